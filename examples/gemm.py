"""GEMM on one GPU, written the TileLang way: C = A @ B with T.Pipelined + T.gemm.

Each block computes a block_m x block_n tile of C: it clears a float32 fragment, walks K in
block_k steps copying a tile of A and of B into shared memory and multiplying them into the
fragment, then stores the fragment (rounded to the output dtype). M, N and K need not be multiples
of the tiles: the grid and the K loop round up (T.ceildiv) and the copies clip at the edges (a tile
loaded past the end of A or B is zero-filled, C is written only inside). On an H100/H200 the code
generator turns the loop into a TMA producer warpgroup and wgmma consumer warpgroups and the final
copy into TMA stores (jax_tilescale/codegen/gemm_sm90.py; there `block_m=256, block_n=192` is the
fastest measured: benchmarks/NOTES.md); on other GPUs since Ampere into cp.async + mma.sync
(gemm_sm80.py); the CPU interpreter runs the kernel as written. Blocks are visited in groups of
`group_m` rows of tiles so that neighbouring blocks share tiles of B in L2.

`python examples/gemm.py` checks A @ B against jnp.dot in float32 on random data.
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp

import jax_tilescale as ts
from jax_tilescale import language as T

TOLERANCE = {"float32": 1e-4, "float16": 5e-3, "bfloat16": 2e-2}  # relative to max |C|


# --- config + kernel --------------------------------------------------------------------------
def gemm(m: int, n: int, k: int, dtype: jnp.dtype = jnp.bfloat16, block_m: int = 128, block_n: int = 256,
         block_k: int = 64, num_stages: int = 4, threads: int = 256, group_m: int = 8) -> ts.TileKernel:
    """A [m, k] @ B [k, n] -> C [m, n] in `dtype` (fp32 accumulation)."""
    tiles_m, tiles_n = T.ceildiv(m, block_m), T.ceildiv(n, block_n)
    group = group_m if tiles_m % group_m == 0 else 1

    @ts.kernel(out_shape=jax.ShapeDtypeStruct((m, n), dtype), grid=(tiles_n, tiles_m), threads=threads)
    def gemm_kernel(A, B, C):
        # grouped tile order: `group` rows of tiles walk the columns together (L2 reuse of B)
        pid = T.program_id(1) * tiles_n + T.program_id(0)
        in_group = pid % (group * tiles_n)
        tm = pid // (group * tiles_n) * group + in_group % group
        tn = in_group // group
        A_s = T.alloc_shared((block_m, block_k), dtype)
        B_s = T.alloc_shared((block_k, block_n), dtype)
        C_f = T.alloc_fragment((block_m, block_n), jnp.float32)
        T.clear(C_f)
        for ko in T.Pipelined(T.ceildiv(k, block_k), num_stages=num_stages):
            # ragged edges: rows of A past m and columns past k arrive as zeros (and add nothing)
            T.copy(A[T.ds(tm * block_m, block_m), T.ds(ko * block_k, block_k)], A_s)
            T.copy(B[T.ds(ko * block_k, block_k), T.ds(tn * block_n, block_n)], B_s)
            T.gemm(A_s, B_s, C_f)
        T.copy(C_f, C[T.ds(tm * block_m, block_m), T.ds(tn * block_n, block_n)])  # only the part inside C

    return gemm_kernel


# --- check + entry point ----------------------------------------------------------------------
def check(m: int, n: int, k: int, dtype: str = "bfloat16", seed: int = 0, **config) -> bool:
    """The kernel's C vs jnp.dot in float32 (tolerance per dtype, relative to max |C|), every element."""
    ka, kb = jax.random.split(jax.random.key(seed))
    a = jax.random.normal(ka, (m, k), jnp.float32).astype(dtype)
    b = jax.random.normal(kb, (k, n), jnp.float32).astype(dtype)
    got = jax.jit(gemm(m, n, k, jnp.dtype(dtype), **config))(a, b)
    want = jnp.dot(a.astype(jnp.float32), b.astype(jnp.float32))
    scale = float(jnp.max(jnp.abs(want)))
    return ts.testing.allclose(got.astype(jnp.float32), want, atol=TOLERANCE[dtype] * scale)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--m", type=int, default=None, help="default: 4096 on a GPU, 256 on CPU")
    ap.add_argument("--n", type=int, default=None, help="default: 4096 on a GPU, 512 on CPU")
    ap.add_argument("--k", type=int, default=None, help="default: 4096 on a GPU, 256 on CPU")
    ap.add_argument("--dtype", default="bfloat16")
    a = ap.parse_args()
    platform = ts.platform.setup()
    gpu = jax.devices()[0].platform == "gpu"
    m, n, k = (a.m or (4096 if gpu else 256)), (a.n or (4096 if gpu else 512)), (a.k or (4096 if gpu else 256))
    ok = check(m, n, k, a.dtype)
    what = f"A {m}x{k} @ B {k}x{n}, {a.dtype}, random data, close to jnp.dot in float32"
    ts.testing.report("gemm", platform, {what: ok})


if __name__ == "__main__":
    main()
