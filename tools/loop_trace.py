"""Where a jitted loop of GEMM products spends its time on the GPU: each kernel's duration and the idle gap
before it, for XLA's `jnp.dot` and for our kernel (`examples/gemm.py`'s `gemm()`, the table's pick unless
`--config` names one), in the loop `benchmarks/bench_gemm.py` times (a `fori_loop` of products, each reduced
to one element). Traced with `jax.profiler` (CUPTI; no other tool needed on the GPU machine), each loop after
`--heat` seconds of itself in the same trace (the GPU at its power cap, as in the bench), only the last
loop's kernels read: benchmarks/_gpu_trace.py.

    python tools/loop_trace.py 128x8192x8192 [--config 128x64x64/8/g8/t128] [--reps 32] [--forms loop,graph]
        [--out DIR]

Prints, per loop, each kernel's median duration and the median gap before it, the product kernel's median
start-to-start interval (the GPU's time per product), and the first kernels in order. `--forms graph`: also
the bench's graph form (its products recorded by XLA as one CUDA graph); then, for each form, the measured run
as the host saw it (dispatch to the end of the wait) against the GPU's span of it (the first kernel's start after
the dispatch, the last one's end before the wait returned), how many product kernels the trace holds of the
run's `--reps` (a recorded graph's kernels can be missing from CUPTI's trace), and our launch handler's calls
per run (fewer than the products: replayed from the graph). The raw traces stay in DIR (default $OUT or /tmp).
"""

from __future__ import annotations

import argparse
import os
import pathlib
import statistics
import sys

import jax
import jax.numpy as jnp

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "benchmarks"))
from _gpu_trace import last_run, measured_run_span, product_step, traced, with_gaps  # noqa: E402
from bench_gemm import GRAPH_UNROLL, handler_calls_per_run, timing_forms, whole_iterations  # noqa: E402
from profile_gemm import bench_config, gemm  # noqa: E402


def span_line(events: list[dict], span: tuple[float, float] | None, reps: int) -> str:
    """The measured run: the host's span against the GPU's, and the product kernels seen of `reps`."""
    if span is None or not events:
        return "  (no annotated run in the trace)"
    start, end = span
    seen = product_step(events).count
    first, last = events[0]["ts"], max(e["ts"] + e["dur"] for e in events)
    busy = sum(e["dur"] for e in events)
    return (f"  run: host {end - start:9.1f} us; first kernel {first - start:7.1f} us after the dispatch, last one "
            f"ends {end - last:7.1f} us before the wait returned; GPU busy {busy:9.1f} us of its span "
            f"{last - first:9.1f}; {seen} of {reps} product kernels traced")


def summarize(label: str, events: list[dict]) -> None:
    step = product_step(events)
    if step is None:
        print(f"{label}: no GPU kernels in the trace")
        return
    durs: dict[str, list[float]] = {}
    gaps: dict[str, list[float]] = {}
    for e, gap in with_gaps(events):
        durs.setdefault(e["name"], []).append(e["dur"])
        if gap is not None:
            gaps.setdefault(e["name"], []).append(gap)
    print(f"{label}: {len(events)} kernels; {step.kernel[:60]}: {step.duration_us:.2f} us, start to start "
          f"{step.interval_us:.2f} us (median)")
    for name, d in durs.items():
        g = gaps.get(name, [])
        gap = f"{statistics.median(g):7.2f}" if g else "      -"
        print(f"  {len(d):4d} x {statistics.median(d):8.2f} us, gap before {gap} us  {name[:90]}")
    print("  first kernels (start us from the first, duration, gap):")
    t0 = events[0]["ts"]
    for e, gap in with_gaps(events)[:12]:
        print(f"    {e['ts'] - t0:9.2f} {e['dur']:8.2f} {'' if gap is None else f'{gap:6.2f}':>6}  {e['name'][:80]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("shape", help="MxNxK")
    ap.add_argument("--config", default="", help="a bench_gemm.py --configs entry (default: the table's pick)")
    ap.add_argument("--reps", type=int, default=32,
                    help=f"products per loop (the graph form: rounded up to a multiple of {GRAPH_UNROLL})")
    ap.add_argument("--forms", default="loop", help="loop, graph or both (comma-separated): bench_gemm.py's forms")
    ap.add_argument("--heat", type=float, default=1.0,
                    help="seconds each loop runs in its trace before the loop that is read")
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp"), help="where the traces are written")
    args = ap.parse_args()
    m, n, k = map(int, args.shape.split("x"))
    ka, kb = jax.random.split(jax.random.key(0))
    a = jax.random.normal(ka, (m, k), jnp.bfloat16)
    b = jax.random.normal(kb, (k, n), jnp.bfloat16)
    ours = gemm(m, n, k, jnp.bfloat16, **(bench_config(args.config) if args.config else {}))
    reps = whole_iterations(args.reps) if "graph" in args.forms else args.reps
    for label, product in {"XLA jnp.dot": lambda x, y: x @ y, "ours": ours}.items():
        forms = timing_forms(product, reps)  # the very runs bench_gemm.py times
        for form in args.forms.split(","):
            run = forms[form]
            trace_dir = pathlib.Path(args.out) / f"loop_trace_{label.split()[0].lower()}_{form}"
            events = traced(run, (a, b), trace_dir, args.heat)
            summarize(f"{args.shape} {label}, {form} form", last_run(events, reps))
            print(span_line(events, measured_run_span(trace_dir), reps))
            if label == "ours":
                print(f"  launch handler calls per run: {handler_calls_per_run(run, a, b)} ({reps} products)")


if __name__ == "__main__":
    main()
