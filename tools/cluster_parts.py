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
room: `--config`'s stage count applies), and one named with `/g` (`plain/np/g`) takes its tile in the grouped
order of examples/gemm.py (`grouped_tile`) instead of tm = program_id(1), tn = program_id(0).

    python tools/cluster_parts.py [--shape 128x4096x14336] [--config 64x128x64/8/g2/t128/s2] [--reps 200]
"""

from __future__ import annotations

import os
import pathlib
import sys

import jax
import jax.numpy as jnp

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(ROOT / "tools"))
from bench_gemm import parse_config  # noqa: E402
from gemm import PARTNER_PAD, GemmConfig, gemm, group_of, grouped_tile  # noqa: E402
from splitk_parts import checked_inputs, parts_arguments, time_part  # noqa: E402

import jax_tilescale as ts  # noqa: E402
from jax_tilescale import language as T  # noqa: E402
from jax_tilescale.codegen import cuda as codegen_cuda  # noqa: E402

PARTS = ("plain", "launch", "sync", "exchange", "whole")


def cluster_part(m: int, n: int, k: int, cfg: GemmConfig, part: str, partner_tile: bool = True,
                 grouped: bool = False):
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
        if grouped:
            tm, tn = grouped_tile(T.program_id(1) * tiles_n + T.program_id(0), tiles_m, tiles_n, group_of(tiles_m, cfg))
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
    args = parts_arguments(__doc__, "128x4096x14336", "64x128x64/7/g2/t128/s2", ",".join(("xla", "table", *PARTS)))
    kwargs, _ = parse_config(args.config)
    cfg = GemmConfig(**kwargs)
    whole = gemm(*map(int, args.shape.split("x")), jnp.bfloat16, **kwargs, split_reduce="cluster")
    m, n, k, a, b = checked_inputs(args.shape, args.config, whole, "the cluster form")
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
            product = cluster_part(m, n, k, cfg, part, partner_tile="np" not in flags, grouped="g" in flags)
        rows.append((name, time_part(name, product, a, b, args.reps, args.heat, where / name.replace("/", "_"))))
    codegen_cuda.DEPENDENT_LAUNCH = True
    print("\npart            kernel us  interval us")
    for name, step in rows:
        if step is not None:
            print(f"{name:>14}  {step.duration_us:9.2f}  {step.interval_us:11.2f}")


if __name__ == "__main__":
    main()
