"""The GPU's own time per product in a jitted loop, from a `jax.profiler` trace (CUPTI: no other tool needed).

A loop's wall time per product (what `bench_gemm.py`'s "loop" column measures) also holds what the host does
between iterations: XLA runs a `fori_loop` from the host unless its flags record loops as graphs, and a
product whose host side is slower (our FFI handler's few microseconds, the loop's bookkeeping) can leave the
GPU idle between kernels at small and memory-bound shapes. The trace separates the two: each kernel's
duration, the idle gap before it, and the start-to-start interval of the product's kernel (the GPU's time
per product). Used by `bench_gemm.py --trace` and `tools/loop_trace.py`.
"""

from __future__ import annotations

import gzip
import itertools
import json
import os
import pathlib
import statistics
import time
from dataclasses import dataclass

import jax


@dataclass(frozen=True)
class Step:
    """The product's kernel in a traced loop: the one with the most GPU time."""

    kernel: str
    duration_us: float  # median over the loop
    interval_us: float  # median start-to-start: the GPU's time per product, gaps included
    gap_us: float  # median idle time before it
    mean_interval_us: float  # first start to last start over the intervals: what a wall clock sees, stalls included
    max_gap_us: float  # the longest idle time before it (a host stall shows here, not in the medians)
    count: int = 0  # how many of it the events hold (CUPTI can miss a recorded graph's kernels: fewer than the run's)


# The host-side annotation `traced` puts around the run it measures: GPU events from its start on are that run's
# (the earlier runs were blocked on before it began). Counting back `reps` product kernels instead mixed runs
# where a recorded graph's kernels are partly missing from the trace (NOTES, twenty-fifth session).
LAST_RUN = "tilescale measured run"


def _trace_events(trace_dir: pathlib.Path) -> list[dict]:
    runs = sorted((trace_dir / "plugins" / "profile").iterdir(), key=os.path.getmtime)
    (path,) = runs[-1].glob("perfetto_trace.json.gz")
    return json.load(gzip.open(path))["traceEvents"]


def measured_run_span(trace_dir: pathlib.Path) -> tuple[float, float] | None:
    """(start, end) in us, the trace's clock, of the newest trace's last LAST_RUN annotation: the host's view of
    the measured run, dispatch to the end of the wait; None without one."""
    return _measured_span(_trace_events(trace_dir))


def gpu_events(trace_dir: pathlib.Path, after: float | None = None) -> list[dict]:
    """The GPU streams' kernels, copies and memsets of the newest trace in `trace_dir` (name, ts and dur in
    microseconds), by start time, those starting at `after` or later where it is given; [] when the trace has no
    GPU (a CPU run)."""
    return _gpu_events(_trace_events(trace_dir), after)


def _measured_span(events: list[dict]) -> tuple[float, float] | None:
    runs = [e for e in events if e.get("ph") == "X" and e.get("name") == LAST_RUN]
    if not runs:
        return None
    last = max(runs, key=lambda e: e["ts"])
    return last["ts"], last["ts"] + last["dur"]


def _gpu_events(events: list[dict], after: float | None) -> list[dict]:
    meta = [e for e in events if e.get("ph") == "M"]
    gpu = {e["pid"] for e in meta if e.get("name") == "process_name" and "GPU" in e["args"]["name"]}
    # XLA names a device's streams "Stream #N(...)"; its other device threads summarise ops (not kept)
    streams = {(e["pid"], e["tid"]) for e in meta
               if e.get("name") == "thread_name" and e["pid"] in gpu and e["args"]["name"].startswith("Stream")}
    return sorted((e for e in events if e.get("ph") == "X" and (e["pid"], e.get("tid")) in streams
                   and (after is None or e["ts"] >= after)), key=lambda e: e["ts"])


def with_gaps(events: list[dict]) -> list[tuple[dict, float | None]]:
    """Each event with the idle time before it (None for the first; negative where the GPU overlapped them)."""
    return list(zip(events, [None, *(b["ts"] - (a["ts"] + a["dur"]) for a, b in itertools.pairwise(events))]))


def product_kernel(events: list[dict]) -> str:
    """The name of the kernel with the most GPU time (the loop's product)."""
    total: dict[str, float] = {}
    for e in events:
        total[e["name"]] = total.get(e["name"], 0.0) + e["dur"]
    return max(total, key=total.__getitem__)


def last_run(events: list[dict], reps: int) -> list[dict]:
    """The events from the first of the last `reps` product kernels on: the measured loop's, where `traced` ran
    the same loop before it to heat the GPU."""
    name = product_kernel(events) if events else ""
    starts = [i for i, e in enumerate(events) if e["name"] == name]
    return events[starts[-reps]:] if len(starts) > reps else events


def product_step(events: list[dict]) -> Step | None:
    """The loop's product kernel (the most GPU time) and its medians; None without GPU events."""
    if not events:
        return None
    name = product_kernel(events)
    mine = [(e, gap) for e, gap in with_gaps(events) if e["name"] == name]
    intervals = [b["ts"] - a["ts"] for (a, _), (b, _) in itertools.pairwise(mine)]
    mine_gaps = [gap for _, gap in mine if gap is not None]
    nan = float("nan")
    return Step(name, statistics.median(e["dur"] for e, _ in mine),
                statistics.median(intervals) if intervals else nan,
                statistics.median(mine_gaps) if mine_gaps else nan,
                statistics.fmean(intervals) if intervals else nan,
                max(mine_gaps) if mine_gaps else nan, len(mine))


def traced(run, args: tuple, trace_dir: pathlib.Path, heat_s: float) -> list[dict]:
    """`run(*args)` once untraced (compilation), then traced: for `heat_s` seconds and once more; the GPU
    events of that last run (from its LAST_RUN annotation on; all of the trace's where no annotation is found,
    and `last_run(events, reps)` keeps the last run's by count). The heat runs inside the
    trace because the H200 reaches its power cap within half a second of GEMM and the profiler's start idles
    the GPU: heated before the trace, the traced loop ran its first products at boost clocks, up to 10%
    faster than the same loop timed at the cap (benchmarks/NOTES.md, 2026-12-03, seventeenth session)."""
    jax.block_until_ready(run(*args))
    with jax.profiler.trace(str(trace_dir), create_perfetto_trace=True):
        until = time.perf_counter() + heat_s
        while time.perf_counter() < until:
            jax.block_until_ready(run(*args))
        with jax.profiler.TraceAnnotation(LAST_RUN):
            jax.block_until_ready(run(*args))
    events = _trace_events(trace_dir)  # read once: a trace of a long run is tens of megabytes of JSON
    span = _measured_span(events)
    return _gpu_events(events, after=span[0] if span else None)
