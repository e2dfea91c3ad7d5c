"""Where examples/gemm.py's split-K in a cluster (SplitK reduce="cluster") spends its time: the kernel built
in parts, each timed on the GPU in a traced jitted loop (benchmarks/_gpu_trace.py), after the whole form is
checked against jnp.dot. The parts, cumulative (all but `whole` leave C wrong: timing only):

- `plain`:    no cluster; every split runs its main loop, split 0 stores its partial as C;
- `launch`:   the same kernel launched in clusters of the tile's splits (the frame's meetings at the start and
              end, nothing else);
- `sync`:     + one `T.cluster_sync()` after the main loop;
- `exchange`: + split 1's partial stored into split 0's shared tile before it (no add);
- `whole`:    the example's kernel (the add, every round).

And `xla` (jnp.dot) and `table` (the table's pick at the shape) beside them; a part named with `/nodep`
(`launch/nodep`) is built launched plainly, not as a programmatic dependent (codegen.cuda.DEPENDENT_LAUNCH), and
one named with `/np` (`plain/np`, `launch/np`) has no partner tile in shared memory (the stages may then use its
room: `--config`'s stage count applies).

    python tools/cluster_parts.py [--shape 128x4096x14336] [--config 64x128x64/8/g2/t128/s2] [--reps 200]
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
from _gpu_trace import last_run, product_step, traced  # noqa: E402
from bench_gemm import loop_and_calls, parse_config  # noqa: E402
from gemm import PARTNER_PAD, GemmConfig, gemm  # noqa: E402

import jax_tilescale as ts  # noqa: E402
from jax_tilescale import language as T  # noqa: E402
from jax_tilescale.codegen import cuda as codegen_cuda  # noqa: E402

PARTS = ("plain", "launch", "sync", "exchange", "whole")


def cluster_part(m: int, n: int, k: int, cfg: GemmConfig, part: str, partner_tile: bool = True):
    """The cluster form up to `part` (module doc)."""
    dtype = jnp.dtype(jnp.bfloat16)
    bm, bn, bk, splits = cfg.block_m, cfg.block_n, cfg.block_k, cfg.split_k
    tiles_m, tiles_n = T.ceildiv(m, bm), T.ceildiv(n, bn)
    per = T.ceildiv(k, bk) // splits
    cluster = None if part == "plain" else (1, 1, splits)

    @ts.kernel(out_shape=jax.ShapeDtypeStruct((m, n), dtype), grid=(tiles_n, tiles_m, splits), threads=cfg.threads,
               cluster=cluster)
    def cluster_part_kernel(A, B, C):
        tm, tn, split = T.program_id(1), T.program_id(0), T.program_id(2)
        A_s = T.alloc_shared((bm, bk), dtype)
        B_s = T.alloc_shared((bk, bn), dtype)
        C_f = T.alloc_fragment((bm, bn), jnp.float32)
        if partner_tile:
            partner = T.alloc_shared((bm, bn + PARTNER_PAD), jnp.float32)
        T.clear(C_f)
        for ko in T.Pipelined(per, num_stages=cfg.num_stages):
            T.copy(A[T.ds(tm * bm, bm), T.ds((split * per + ko) * bk, bk)], A_s)
            T.copy(B[T.ds((split * per + ko) * bk, bk), T.ds(tn * bn, bn)], B_s)
            T.gemm(A_s, B_s, C_f)
        if part == "exchange":
            if split == 1:
                T.copy(C_f, T.cluster_tile(partner[:, :bn], 0))
        if part in ("sync", "exchange"):
            T.cluster_sync()
        if split == 0:
            T.copy(C_f, C[T.ds(tm * bm, bm), T.ds(tn * bn, bn)])

    return cluster_part_kernel


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="128x4096x14336")
    ap.add_argument("--config", default="64x128x64/7/g2/t128/s2", help="bench_gemm.py's form, with /sN")
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--heat", type=float, default=1.0)
    ap.add_argument("--parts", default=",".join(("xla", "table", *PARTS)))
    args = ap.parse_args()
    m, n, k = map(int, args.shape.split("x"))
    kwargs, _ = parse_config(args.config)
    cfg = GemmConfig(**kwargs)
    ka, kb = jax.random.split(jax.random.key(0))
    a = jax.random.normal(ka, (m, k), jnp.float32).astype(jnp.bfloat16)
    b = jax.random.normal(kb, (k, n), jnp.float32).astype(jnp.bfloat16)
    want = jnp.dot(a.astype(jnp.float32), b.astype(jnp.float32))
    whole = gemm(m, n, k, jnp.bfloat16, **kwargs, split_reduce="cluster")
    err = float(jnp.max(jnp.abs(jax.jit(whole)(a, b).astype(jnp.float32) - want)))
    print(f"{args.shape} {args.config}: the cluster form, max error {err:.3g} "
          f"(max |C| {float(jnp.max(jnp.abs(want))):.3g})", flush=True)
    where = pathlib.Path(os.environ.get("OUT", "/tmp")) / "cluster_parts"
    rows = []
    for name in args.parts.split(","):
        part, *flags = name.split("/")
        codegen_cuda.DEPENDENT_LAUNCH = "nodep" not in flags
        if part == "xla":
            product = lambda x, y: x @ y
        elif part == "table":
            product = gemm(m, n, k, jnp.bfloat16)
        elif part == "whole":
            product = whole
        else:
            product = cluster_part(m, n, k, cfg, part, partner_tile="np" not in flags)
        loop, _ = loop_and_calls(product, args.reps)
        step = product_step(last_run(traced(loop, (a, b), where / part, args.heat), args.reps))
        rows.append((name, step))
        print(f"{name:>14}: {'-' if step is None else f'{step.duration_us:8.2f} us  {step.kernel}'}", flush=True)
    codegen_cuda.DEPENDENT_LAUNCH = True
    print("\npart            kernel us  interval us")
    for name, step in rows:
        if step is not None:
            print(f"{name:>14}  {step.duration_us:9.2f}  {step.interval_us:11.2f}")


if __name__ == "__main__":
    main()
