"""How fast HBM delivers a skinny product's operands, next to the product itself (a GPU diagnostic).

At 128 x 8192 x 8192 the product is memory-bound: B (128 MiB) dominates. This times, each in a traced jitted loop
(benchmarks/_gpu_trace.py: the kernel's median duration on the GPU), XLA's dot, `gemm()`'s pick, and XLA reductions
that read B once in two patterns: the column sum (each block narrow column strips down all rows, the GEMMs'
pattern) and the row sum (each block whole contiguous rows), on B and on a B four times as tall (less start-up
per byte). Prints each kernel's time and the bytes it reads over that time.

    python tools/hbm_floor.py [--shape 128x8192x8192] [--reps 100] [--heat 1.0]

Findings: benchmarks/NOTES.md, twenty-third session (H200: row sum 4.41 TB/s, column sum 3.51, both products
~37-39 us against the row sum's 30.45).
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "examples"))
from _gpu_trace import last_run, product_step, traced  # noqa: E402
from bench_gemm import loop_and_calls  # noqa: E402
from gemm import gemm  # noqa: E402


def column_sum(x, y):
    """XLA's column sum of `y` (one row, 2-D): every block reads narrow column strips down all rows."""
    return jnp.sum(y, 0, jnp.float32, keepdims=True)


def row_sum(x, y):
    """XLA's row sum of `y` (one row, 2-D): every block reads whole contiguous rows."""
    return jnp.sum(y, 1, jnp.float32)[None]


def references(m: int, n: int, k: int, a, b, tall) -> list[tuple[str, object, tuple, int]]:
    """(name, function of two arrays returning a 2-D result, its arguments, bytes it must read)."""
    operands = 2 * (m * k + k * n)
    return [
        ("xla dot", lambda x, y: x @ y, (a, b), operands),
        ("pick", gemm(m, n, k, jnp.bfloat16), (a, b), operands),
        ("colsum B", column_sum, (a, b), 2 * k * n),
        ("rowsum B", row_sum, (a, b), 2 * k * n),
        ("colsum 4B", column_sum, (a, tall), 8 * k * n),
        ("rowsum 4B", row_sum, (a, tall), 8 * k * n),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="128x8192x8192")
    ap.add_argument("--reps", type=int, default=100)
    ap.add_argument("--heat", type=float, default=1.0)
    args = ap.parse_args()
    m, n, k = map(int, args.shape.split("x"))
    ka, kb = jax.random.split(jax.random.key(0))
    a = jax.random.normal(ka, (m, k), jnp.float32).astype(jnp.bfloat16)
    tall = jax.random.normal(kb, (4 * k, n), jnp.float32).astype(jnp.bfloat16)
    b = tall[:k]
    rows = references(m, n, k, a, b, tall)
    want = np.asarray(jnp.dot(a.astype(jnp.float32), b.astype(jnp.float32)))
    got = np.asarray(jax.jit(rows[1][1])(a, b).astype(jnp.float32))
    err = float(np.max(np.abs(got - want)))
    print(f"{args.shape}: the pick against jnp.dot in float32: max error {err:.3g} (max |C| "
          f"{float(np.max(np.abs(want))):.3g})", flush=True)
    if not err <= 2e-2 * float(np.max(np.abs(want))):
        raise SystemExit("the pick's product is wrong: nothing timed")
    where = pathlib.Path(os.environ.get("OUT", "/tmp")) / "hbm_floor"
    print(f"{'what':>10}  {'kernel us':>9}  {'TB/s':>5}  kernel")
    for name, fn, operands, nbytes in rows:
        loop, _ = loop_and_calls(fn, args.reps)
        step = product_step(last_run(traced(loop, operands, where / name.replace(" ", "_"), args.heat), args.reps))
        if step is None:
            print(f"{name:>10}  {'-':>9}  {'-':>5}  (no GPU kernels in the trace)", flush=True)
        else:
            print(f"{name:>10}  {step.duration_us:9.2f}  {nbytes / step.duration_us / 1e6:5.2f}  {step.kernel[:60]}",
                  flush=True)


if __name__ == "__main__":
    main()
