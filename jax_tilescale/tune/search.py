"""`autotune`: the fastest of a few candidate configurations of one computation, timed on the device the first time a
problem is seen and remembered on disk (jax_tilescale/tune/store.py) for every later process."""

from __future__ import annotations

import contextlib
import importlib.metadata
import sys
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, Literal, TypeVar

import jax
import numpy as np

from ..errors import PerformanceWarning, TileScaleError
from . import store
from .timing import LoopTimer, Timer

C = TypeVar("C")
# What a candidate may raise while it is built, compiled or run once and still leave the others to try: a refused
# configuration (TileScaleError: the code generator's refusals with their advice, nvcc's errors), a bad argument
# combination (ValueError) and a failure XLA reports from the run.
REFUSALS: tuple[type[BaseException], ...] = (TileScaleError, ValueError, NotImplementedError,
                                            getattr(jax.errors, "JaxRuntimeError", RuntimeError))
# autotune keeps the earliest candidate within this fraction of the fastest median, so that a run's noise does not
# move the choice away from the candidate put first (the table's pick)
MARGIN = 0.02


@dataclass(frozen=True)
class Tuned(Generic[C]):
    """What autotune chose: the candidate, its label, and how it was chosen (`source`): "timed" here, read from
    "cache", the "only" candidate, or "untimed" (no GPU to time on: the first candidate)."""

    config: C
    label: str
    source: Literal["timed", "cache", "only", "untimed"]
    seconds: Mapping[str, float] = field(default_factory=dict)  # median seconds per call of each candidate timed
    refused: Mapping[str, str] = field(default_factory=dict)  # label -> why it could not run
    path: Path | None = None  # the record on disk, where there is one


def _stderr(line: str) -> None:
    print(f"[jax_tilescale] {line}", file=sys.stderr, flush=True)


def _argument_key(args: Sequence[Any]) -> list[str]:
    return [f"{np.dtype(a.dtype).name}{list(a.shape)}" for a in args]


def _package_version() -> str:
    try:
        return importlib.metadata.version("jax_tilescale")
    except importlib.metadata.PackageNotFoundError:  # run from a source tree that is not installed
        return "unknown"


def _device_key() -> dict[str, object]:
    device = jax.local_devices()[0]  # this process's (in a multi-process run jax.devices()[0] may be another's)
    return {"platform": device.platform, "device": device.device_kind,
            "sms": getattr(device, "core_count", None), "jax_tilescale": _package_version(), "jax": jax.__version__}


@contextlib.contextmanager
def _performance_warnings() -> Iterator[list[str]]:
    """Collects the PerformanceWarnings raised in the block (a candidate built in a slower form, ptxas's spills) as
    one line each for the tuner's progress, instead of a warning per candidate; other warnings pass through."""
    notes: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", PerformanceWarning)
        yield notes
    for w in caught:
        if issubclass(w.category, PerformanceWarning):
            lines = str(w.message).splitlines()
            notes.append("slower form: " + (lines[1].strip(" -") if len(lines) > 1 else lines[0]))
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)


def _reason(err: BaseException) -> str:
    first = str(err).strip().splitlines()[0] if str(err).strip() else ""
    return f"{type(err).__name__}: {first}"[:400]


def autotune(name: str, candidates: Sequence[C], build: Callable[[C], Callable[..., Any]], args: Sequence[Any], *,
             describe: Callable[[C], str] = str, key: Mapping[str, object] | None = None,
             check: Callable[[Any], str | None] | None = None, timer: Timer | None = None, retune: bool = False,
             margin: float = MARGIN, progress: Callable[[str], None] | None = _stderr) -> Tuned[C]:
    """The fastest of `candidates` for `build(candidate)(*args)`.

    `build` turns a candidate into a function of `args` (a jax_tilescale kernel, or anything jittable); `args` are
    example arguments on the device, of the shapes and dtypes the chosen function will be called with (their values
    matter only to `check`). `describe` names a candidate (the names must differ: they are what the record on disk
    keeps). `key` adds what else changes the answer (problem sizes the arguments do not show). `check(output)`
    returns why a candidate's output is wrong, or None: a wrong candidate is refused, never chosen.

    The first time a problem is seen every candidate is built, run once and checked (a candidate that raises one of
    REFUSALS, or fails its check, is left out with its reason), then the rest are timed against each other
    (`timer`, by default LoopTimer: on-device loops in interleaved rounds) and the fastest is recorded on disk (the
    earliest in the order given among those within `margin` of the fastest median: put the candidate to keep unless
    another is clearly faster first, so that a run's noise does not move the choice); later
    calls, in any process, read the record and build nothing (`retune=True` times again). Without a GPU and without
    a `timer` nothing is timed (an interpreter's speed says nothing about a GPU's): the first candidate is taken,
    and nothing recorded. Lines of progress go to `progress` (stderr by default; None: silent). Raises TileScaleError
    when every candidate is refused, listing each reason."""
    if not candidates:
        raise ValueError(f"autotune {name!r}: no candidates")
    if not 0 <= margin < 1:
        raise ValueError(f"autotune {name!r}: margin is a fraction of the fastest time, in [0, 1), not {margin}")
    labels = [describe(c) for c in candidates]
    if len(set(labels)) != len(labels):
        twice = sorted({lab for lab in labels if labels.count(lab) > 1})
        raise ValueError(f"autotune {name!r}: candidates must be described differently, {twice} name several")
    say = progress or (lambda line: None)
    if len(candidates) == 1:
        return Tuned(candidates[0], labels[0], "only")
    if timer is None:
        if jax.default_backend() != "gpu":
            say(f"autotune {name}: no GPU ({jax.default_backend()}) to time on: took the first candidate, "
                f"{labels[0]}, untimed")
            return Tuned(candidates[0], labels[0], "untimed")
        timer = LoopTimer()
    full_key = {"name": name, "candidates": labels, "arguments": _argument_key(args), **_device_key(),
                **dict(key or {})}
    path = store.record_path(name, full_key)

    def recorded() -> Tuned[C] | None:
        record = None if retune else store.load(path, labels)
        return None if record is None else Tuned(candidates[labels.index(record.choice)], record.choice, "cache",
                                                 record.seconds, record.refused, path)

    if (found := recorded()) is not None:
        return found
    # Called while a jit traces (a layer that builds its kernel inside the function it jits), the candidates must
    # still run now, on the example arguments, not be staged into the caller's program.
    with (jax.ensure_compile_time_eval(),
          store.tuning(path, on_wait=lambda: say(f"autotune {name}: another process is tuning this problem; "
                                                 f"waiting for its choice ({path.with_suffix('.lock')})"))):
        # a process that held the lock may have recorded the choice meanwhile (with retune, time again anyway)
        return recorded() or _tune(name, candidates, labels, build, args, check, timer, margin, say, path, full_key)


def _tune(name: str, candidates: Sequence[C], labels: list[str], build: Callable[[C], Callable[..., Any]],
          args: Sequence[Any], check: Callable[[Any], str | None] | None, timer: Timer, margin: float,
          say: Callable[[str], None], path: Path, full_key: Mapping[str, object]) -> Tuned[C]:
    """Builds, checks and times the candidates (autotune's first call for a problem) and records the fastest."""
    say(f"autotune {name}: {len(candidates)} candidates on {full_key['device']}, the first time this problem is seen "
        f"(the choice is kept in {path})")
    runners: dict[str, Callable[..., Any]] = {}
    refused: dict[str, str] = {}
    for i, (label, candidate) in enumerate(zip(labels, candidates, strict=True)):
        with _performance_warnings() as slower:
            try:
                fn = jax.jit(build(candidate))
                out = jax.block_until_ready(fn(*args))
                wrong = check(out) if check is not None else None
            except REFUSALS as err:
                refused[label] = _reason(err)
            else:
                if wrong:
                    refused[label] = f"wrong result: {wrong}"
                else:
                    runners[label] = fn
        line = f"refused ({refused[label]})" if label in refused else "built and checked"
        say(f"  [{i + 1}/{len(candidates)}] {label}: {line}" + "".join(f"; {note}" for note in slower))
    if not runners:
        reasons = "\n".join(f"  {label}: {why}" for label, why in refused.items())
        raise TileScaleError(f"autotune {name}: every candidate was refused:\n{reasons}")

    times = timer(runners, args)
    seconds = {label: float(np.median(times[label])) for label in runners}
    fastest = min(seconds.values())
    choice = next(label for label in seconds if seconds[label] <= fastest * (1 + margin))  # runners keep the order
    for label, s in sorted(seconds.items(), key=lambda e: e[1]):
        say(f"  {label}: {s * 1e3:.4f} ms a call (+{(s / fastest - 1) * 100:.1f}%)"
            + ("  <- chosen" if label == choice else ""))
    record = store.Record(choice, seconds, refused, str(full_key["device"]), store.today())
    store.save(path, record, full_key)
    return Tuned(candidates[labels.index(choice)], choice, "timed", seconds, refused, path)
