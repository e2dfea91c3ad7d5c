"""Where the in-kernel split-K (`examples/gemm.py`'s SplitK, reduce="kernel") spends its time after the main
loop: the same kernel built in parts, each part's kernel timed on the GPU in a traced jitted loop
(benchmarks/_gpu_trace.py), after the whole form is checked against jnp.dot. The parts, cumulative:

- `slab`:   the main loop, then the float32 partial stored to its slab (no counter, no scratch);
- `direct`: the same with one statement after the slab's copy (a shared word written), so the copy is not the
            kernel's last and the code generator stores it from registers instead of through TMA;
- `scratch`: `direct` with the counter's global scratch word written plainly (no atomic): the end of call that
            zeroes scratch, without the turnstile;
- `ticket`: `slab` + the tile's counter (`T.atomic_fetch_add` on a zeroed global scratch word, the end of call
            that zeroes it again);
- `leftzero`: `ticket` with the tile's last split taking the count back (`left_zero=True`): no end of call;
- `sum`:    + the last split summing the slabs in split order (SplitK's form before the twenty-second session);
- `whole`:  + the tile of C stored: SplitK's kernel.

Two references beside them: `xla` (jnp.dot) and `hbm` (XLA's column sum of B, which reads B's bytes once and
writes one row: the product's memory floor where B dominates, as at 128 x 8192 x 8192).

    python tools/splitk_parts.py [--shape 128x8192x8192] [--config 128x128x64/6/g8/t128/s2] [--reps 200]
        [--parts xla,slab,direct,scratch,ticket,sum,whole,splitk]

`--config` in bench_gemm.py's form (`/sN`: N splits, two or more).

The twenty-second session (benchmarks/NOTES.md) measured the whole form 13-14 us slower than the main loop
writing partials for XLA to sum, at 128 x 8192 x 8192 with two splits; this says which part holds them.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys

import jax
import jax.numpy as jnp

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(ROOT / "tools"))
from _gpu_trace import last_run, product_step, traced  # noqa: E402
from bench_gemm import loop_and_calls, parse_config  # noqa: E402
from gemm import GemmConfig, gemm  # noqa: E402
from hbm_floor import column_sum  # noqa: E402

import jax_tilescale as ts  # noqa: E402
from jax_tilescale import language as T  # noqa: E402

PARTS = ("slab", "direct", "scratch", "ticket", "leftzero", "sum", "whole")


def split_k_part(m: int, n: int, k: int, cfg: GemmConfig, part: str):
    """SplitK's in-kernel form up to `part` (module doc); outputs (C, W) as SplitK's for `whole`, else W."""
    dtype = jnp.dtype(jnp.bfloat16)
    bm, bn, bk, splits = cfg.block_m, cfg.block_n, cfg.block_k, cfg.split_k
    tiles_m, tiles_n = T.ceildiv(m, bm), T.ceildiv(n, bn)
    tiles, per = tiles_m * tiles_n, T.ceildiv(k, bk) // splits
    slabs = jax.ShapeDtypeStruct((splits * tiles * bm, bn), jnp.float32)
    out_shape = (jax.ShapeDtypeStruct((m, n), dtype), slabs) if part == "whole" else slabs

    @ts.kernel(out_shape=out_shape, grid=(tiles_n, tiles_m, splits), threads=cfg.threads)
    def split_k_part_kernel(A, B, *outputs):
        C, W = outputs if part == "whole" else (None, *outputs)
        pid, split = T.program_id(1) * tiles_n + T.program_id(0), T.program_id(2)
        tm, tn = pid // tiles_n, pid % tiles_n
        A_s = T.alloc_shared((bm, bk), dtype)
        B_s = T.alloc_shared((bk, bn), dtype)
        C_f = T.alloc_fragment((bm, bn), jnp.float32)
        T.clear(C_f)
        for ko in T.Pipelined(per, num_stages=cfg.num_stages):
            T.copy(A[T.ds(tm * bm, bm), T.ds((split * per + ko) * bk, bk)], A_s)
            T.copy(B[T.ds((split * per + ko) * bk, bk), T.ds(tn * bn, bn)], B_s)
            T.gemm(A_s, B_s, C_f)
        T.copy(C_f, W[T.ds((split * tiles + pid) * bm, bm), :])
        if part == "direct":
            word = T.alloc_shared((1,), jnp.int32)
            word[0] = split
        elif part == "scratch":
            arrived = T.alloc((tiles,), jnp.int32, level="global")
            if split == 0:
                arrived[pid] = 0  # already zero: the scratch the end of call zeroes again
        elif part in ("ticket", "leftzero"):
            arrived = T.alloc((tiles,), jnp.int32, level="global", left_zero=part == "leftzero")
            ticket = T.alloc_shared((2,), jnp.int32)
            T.atomic_fetch_add(arrived[pid], 1, ticket[0])
            if part == "leftzero":
                if ticket[0] == splits - 1:
                    T.atomic_fetch_add(arrived[pid], -splits, ticket[1])
        elif part != "slab":
            arrived = T.alloc((tiles,), jnp.int32, level="global")
            ticket = T.alloc_shared((1,), jnp.int32)
            T.atomic_fetch_add(arrived[pid], 1, ticket[0])
            if ticket[0] == splits - 1:
                T.clear(C_f)
                for s in T.serial(splits):
                    for i, j in T.Parallel(bm, bn):
                        C_f[i, j] = C_f[i, j] + W[(s * tiles + pid) * bm + i, j]
                if part == "whole":
                    T.copy(C_f, C[T.ds(tm * bm, bm), T.ds(tn * bn, bn)])

    return split_k_part_kernel


def parts_arguments(doc: str, shape: str, config: str, parts: str):
    """The command line both parts tools share (this one and cluster_parts.py)."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default=shape)
    ap.add_argument("--config", default=config, help="bench_gemm.py's form, with /sN")
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--heat", type=float, default=1.0)
    ap.add_argument("--parts", default=parts, help="which to time, in order")
    return ap.parse_args()


def checked_inputs(shape: str, config: str, whole, what: str):
    """(m, n, k, a, b) of `shape` (random bf16), after `whole` (a product) is checked against jnp.dot."""
    m, n, k = map(int, shape.split("x"))
    ka, kb = jax.random.split(jax.random.key(0))
    a = jax.random.normal(ka, (m, k), jnp.float32).astype(jnp.bfloat16)
    b = jax.random.normal(kb, (k, n), jnp.float32).astype(jnp.bfloat16)
    want = jnp.dot(a.astype(jnp.float32), b.astype(jnp.float32))
    err = float(jnp.max(jnp.abs(jax.jit(whole)(a, b).astype(jnp.float32) - want)))
    print(f"{shape} {config}: {what}, max error {err:.3g} (max |C| {float(jnp.max(jnp.abs(want))):.3g})", flush=True)
    return m, n, k, a, b


def time_part(name: str, product, a, b, reps: int, heat: float, where: pathlib.Path):
    """The GPU time of `product`'s kernel in a traced jitted loop of `reps` (benchmarks/_gpu_trace.py), printed."""
    loop, _ = loop_and_calls(product, reps)
    step = product_step(last_run(traced(loop, (a, b), where, heat), reps))
    print(f"{name:>14}: {'-' if step is None else f'{step.duration_us:8.2f} us  {step.kernel}'}", flush=True)
    return step


def main() -> None:
    args = parts_arguments(__doc__, "128x8192x8192", "128x128x64/6/g8/t128/s2", ",".join(("xla", *PARTS, "splitk")))
    kwargs, _ = parse_config(args.config)
    cfg = GemmConfig(**kwargs)
    if cfg.split_k < 2:
        raise SystemExit(f"--config {args.config}: name two or more splits (/s2, /s4, ...)")
    whole = gemm(*map(int, args.shape.split("x")), jnp.bfloat16, **kwargs, split_reduce="kernel")
    m, n, k, a, b = checked_inputs(args.shape, args.config, whole, "SplitK's kernel form")
    where = pathlib.Path(os.environ.get("OUT", "/tmp")) / "splitk_parts"
    rows = []
    for part in args.parts.split(","):
        if part == "xla":
            product = lambda x, y: x @ y
        elif part == "hbm":
            product = column_sum
        elif part == "splitk":
            product = whole
        else:
            kern = split_k_part(m, n, k, cfg, part)
            product = (lambda x, y, kern=kern: kern(x, y)[0]) if part == "whole" else kern
        rows.append((part, time_part(part, product, a, b, args.reps, args.heat, where / part)))
    base = dict(rows).get("slab")
    print("\npart      kernel us  over `slab`")
    for part, step in rows:
        if step is not None:
            over = f"{step.duration_us - base.duration_us:+.2f}" if base is not None else "-"
            print(f"{part:>8}  {step.duration_us:9.2f}  {over}")


if __name__ == "__main__":
    main()
