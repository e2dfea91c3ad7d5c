"""Two products in a row, the second on the first's result: an MLP's two matrices (x [M, K] @ w1 [K, F] -> h,
then h @ w2 [F, K] -> y), our kernels (`examples/gemm.py`'s `gemm()`, the table's pick for each product unless a
config is named) against XLA's two dots, in `benchmarks/bench_gemm.py`'s loop and graph forms (its interleaved
rounds after heat, medians; a chain's time, both products). Here the second kernel follows the first directly, so
the variants of the dependent launch (docs/calling_convention.md, "Dependent launches") that bench_gemm.py cannot
show are timed: `/trig` (the first kernel lets the second launch as its blocks begin), `/nodep` (plain launches).

    python tools/chain_time.py 4096x4096x14336 [--variants table,table/trig,table/nodep] [--reps 32] [--rounds 5]

A variant is `table` or a bench_gemm.py --configs entry (the same tiles for both products), with bench_gemm.py's
switch suffixes. Every variant's chain is first checked against XLA's on random data (bfloat16 h between the two, as
both compute it). Prints per variant: ms per chain in each form, the ratio to XLA's (rounds: lowest and highest
per-round ratio).
"""

from __future__ import annotations

import argparse
import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "examples"))
from bench_gemm import (  # noqa: E402
    XLA,
    finishes_in_xla,
    gemm,
    interleaved_times,
    median,
    parse_entry,
    round_ratios,
    timing_forms,
    whole_iterations,
    with_settings,
)

FORMS = ("loop", "graph")  # bench_gemm.py's forms a chain is timed in (its calls form is host-bound here)


def chain_of(first, second):
    """A function of (x, (w1, w2)): both products, the second on the first's result."""
    return lambda x, ws: second(first(x, ws[0]), ws[1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("shape", help="MxKxF: x [M, K], w1 [K, F], w2 [F, K]")
    ap.add_argument("--variants", default="table,table/trig,table/nodep")
    ap.add_argument("--reps", type=int, default=32, help="chains per timed run (rounded to whole graph iterations)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--heat", type=float, default=0.5, help="seconds each runner runs untimed before its timed run")
    args = ap.parse_args()
    m, k, f = map(int, args.shape.split("x"))
    reps = whole_iterations(args.reps)
    kx, k1, k2 = jax.random.split(jax.random.key(0), 3)
    x = jax.random.normal(kx, (m, k), jnp.bfloat16)
    ws = (jax.random.normal(k1, (k, f), jnp.bfloat16) * (k ** -0.5), jax.random.normal(k2, (f, k), jnp.bfloat16))
    xla = chain_of(lambda a, b: a @ b, lambda a, b: a @ b)
    want = np.asarray(jax.jit(xla)(x, ws), np.float32)
    runners = {(XLA, how): run for how, run in timing_forms(xla, reps).items() if how in FORMS}
    for entry in args.variants.split(","):
        cfg, switches = parse_entry(entry)
        second = gemm(m, k, f, jnp.bfloat16, **cfg)
        ours = chain_of(gemm(m, f, k, jnp.bfloat16, **cfg), second)
        got = np.asarray(with_settings("auto", switches, jax.jit(ours))(x, ws), np.float32)
        err, scale = float(np.abs(got - want).max()), float(np.abs(want).max())
        if not np.all(np.isfinite(got)) or err > 3e-2 * scale:
            raise SystemExit(f"{entry}: the chain differs from XLA's (max error {err:.3g}, scale {scale:.3g})")
        # the first product's result is read whole by the second; the second's whole where XLA finishes it
        for how, run in timing_forms(ours, reps, whole=finishes_in_xla(second)).items():
            if how in FORMS:
                runners[f"ours {entry}", how] = with_settings("auto", switches, run)
    times = interleaved_times(runners, x, ws, reps, rounds=args.rounds, heat_s=args.heat)
    flops = 2 * 2 * m * k * f
    print(f"{args.shape}: x [{m}, {k}] @ w1 [{k}, {f}] @ w2 [{f}, {k}], {reps} chains per timed run, "
          f"{args.rounds} rounds; every chain checked against XLA's")
    print(f"{'what':>28} " + " ".join(f"{how + ' ms':>9} {'TF/s':>6} {'xXLA':>5} {'rounds':>9}" for how in FORMS))
    for name in dict.fromkeys(n for n, _ in runners):
        cells = []
        for how in FORMS:
            t = median(times[name, how])
            low, high = round_ratios(times, (XLA, how), (name, how))
            cells.append(f"{t * 1e3:9.3f} {flops / t / 1e12:6.1f} {median(times[XLA, how]) / t:5.2f} "
                         f"{low:4.2f}-{high:4.2f}")
        print(f"{name:>28} " + " ".join(cells))


if __name__ == "__main__":
    main()
