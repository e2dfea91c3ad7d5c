"""Autotuning at first call, remembered on disk: `ts.tune.autotune(name, candidates, build, args)` builds, checks and
times each candidate configuration of a computation on the GPU the first time a problem (name, argument shapes,
device, candidates) is seen, and keeps the fastest in the kernel cache's directory, so that every later process reads
its choice and builds only that one (jax_tilescale/tune/search.py; the record's format: store.py; how a candidate is
timed: timing.py). `examples/gemm.py`'s `gemm(..., autotune=True)` is its first user."""

from .search import MARGIN, REFUSALS, Tuned, autotune
from .store import Record, record_path
from .timing import LoopTimer, Timer, looped

__all__ = ["MARGIN", "REFUSALS", "LoopTimer", "Record", "Timer", "Tuned", "autotune", "looped", "record_path"]
