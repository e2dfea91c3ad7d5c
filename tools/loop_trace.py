"""Where a jitted loop of GEMM products spends its time on the GPU: each kernel's duration and the idle gap
before it, for XLA's `jnp.dot` and for our kernel (`examples/gemm.py`'s `gemm()`, the table's pick unless
`--config` names one), in the loop `benchmarks/bench_gemm.py` times (a `fori_loop` of products, each reduced
to one element). Traced with `jax.profiler` (CUPTI; no other tool needed on the GPU machine), each loop after
`--heat` seconds of itself in the same trace (the GPU at its power cap, as in the bench), only the last
loop's kernels read: benchmarks/_gpu_trace.py.

    python tools/loop_trace.py 128x8192x8192 [--config 128x64x64/8/g8/t128] [--reps 20] [--out DIR]

Prints, per loop, each kernel's median duration and the median gap before it, the product kernel's median
start-to-start interval (the GPU's time per product), and the first kernels in order. The raw traces stay
in DIR (default $OUT or /tmp) for a closer look.
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
from _gpu_trace import last_run, product_step, traced, with_gaps  # noqa: E402
from bench_gemm import loop_and_calls  # noqa: E402
from profile_gemm import bench_config, gemm  # noqa: E402


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
    ap.add_argument("--reps", type=int, default=20, help="products per loop")
    ap.add_argument("--heat", type=float, default=1.0,
                    help="seconds each loop runs in its trace before the loop that is read")
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp"), help="where the traces are written")
    args = ap.parse_args()
    m, n, k = map(int, args.shape.split("x"))
    ka, kb = jax.random.split(jax.random.key(0))
    a = jax.random.normal(ka, (m, k), jnp.bfloat16)
    b = jax.random.normal(kb, (k, n), jnp.bfloat16)
    ours = gemm(m, n, k, jnp.bfloat16, **(bench_config(args.config) if args.config else {}))
    for label, product in {"XLA jnp.dot": lambda x, y: x @ y, "ours": ours}.items():
        loop, _ = loop_and_calls(product, args.reps)  # the very loop bench_gemm.py times
        trace_dir = pathlib.Path(args.out) / f"loop_trace_{label.split()[0].lower()}"
        summarize(f"{args.shape} {label}", last_run(traced(loop, (a, b), trace_dir, args.heat), args.reps))


if __name__ == "__main__":
    main()
