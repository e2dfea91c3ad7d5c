"""What a timed run of `benchmarks/bench_gemm.py` costs besides its products: wall time of runs of a few
product counts for XLA's `jnp.dot` and our kernel (the table's pick unless `--config` names one), in the
bench's loop and graph forms, and a least-squares line through them: the slope is the time per product,
the intercept what each run costs once (dispatch, the first launch's latency, a command buffer's update,
the final wait). Where the bench's ratio to XLA differs from the traced kernels' (a per-run cost the trace
does not see), the two columns say which it is.

    python tools/run_constant.py 128x8192x8192 [--config 64x128x64/8/g2/t128] [--reps 32,128,512] [--runs 7]
        [--torch]

`--torch`: torch's CUDA context in the process first, holding the operands and having run one torch.matmul, as
`bench_gemm.py`'s cuBLAS runners leave it (our ratio at 128 x 8192 x 8192 moved by 5% with and without it,
benchmarks/NOTES.md, twenty-fifth session).
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "examples"))
from bench_gemm import GRAPH_UNROLL, XLA, gemm, parse_entry, run_for, timing_forms, with_settings  # noqa: E402


def line(points: list[tuple[int, float]]) -> tuple[float, float]:
    """(intercept s, slope s per product) of the least-squares line through (products, seconds) points."""
    x, y = np.array([p for p, _ in points], float), np.array([s for _, s in points], float)
    slope, intercept = np.polyfit(x, y, 1)
    return float(intercept), float(slope)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("shape")
    ap.add_argument("--config", default="table", help="a bench_gemm.py --configs entry (default: the table's pick)")
    ap.add_argument("--reps", default="32,128,512", help=f"products per run (multiples of {GRAPH_UNROLL})")
    ap.add_argument("--runs", type=int, default=7, help="timed runs per point (median), interleaved over runners")
    ap.add_argument("--heat", type=float, default=0.3, help="seconds each runner runs before each timed run")
    ap.add_argument("--torch", action="store_true", help="torch's CUDA context in the process, as in the bench")
    args = ap.parse_args()
    m, n, k = map(int, args.shape.split("x"))
    counts = [int(r) for r in args.reps.split(",")]
    ka, kb = jax.random.split(jax.random.key(0))
    a = jax.random.normal(ka, (m, k), jnp.bfloat16)
    b = jax.random.normal(kb, (k, n), jnp.bfloat16)
    held = ()
    if args.torch:  # what bench_gemm.py's cuBLAS runners leave in the process
        import torch
        from _cublas_torch import torch_operands

        held = torch_operands(torch, a, b)
        torch.matmul(*held)
        torch.cuda.synchronize()
    entry = args.config
    cfg, switches = parse_entry(entry)  # `table`: gemm() picks from its table
    ours = gemm(m, n, k, jnp.bfloat16, **cfg)
    runners = {}
    for reps in counts:
        for name, product in ((XLA, lambda x, y: x @ y), ("ours", ours)):
            for how, run in timing_forms(product, reps).items():
                if how != "calls":
                    runners[name, how, reps] = with_settings("auto", switches, run) if name == "ours" else run
    for run in runners.values():
        jax.block_until_ready(run(a, b))
    walls: dict[tuple, list[float]] = {key: [] for key in runners}
    for _ in range(args.runs):
        for key, run in runners.items():
            run_for(run, a, b, args.heat)
            t0 = time.perf_counter()
            jax.block_until_ready(run(a, b))
            walls[key].append(time.perf_counter() - t0)
    print(f"{args.shape}, ours {entry}{', torch in the process' if held else ''}: median wall time per run (ms) "
          "and the line through them")
    head = " ".join(f"{r:>9}" for r in counts)
    print(f"{'what':>6} {'form':>6} {head} {'per run us':>11} {'per product us':>15}")
    for name in (XLA, "ours"):
        for how in ("loop", "graph"):
            medians = [statistics.median(walls[name, how, r]) for r in counts]
            intercept, slope = line(list(zip(counts, medians)))
            label = "XLA" if name == XLA else name
            print(f"{label:>6} {how:>6} " + " ".join(f"{t * 1e3:9.3f}" for t in medians)
                  + f" {intercept * 1e6:11.1f} {slope * 1e6:15.2f}")


if __name__ == "__main__":
    main()
