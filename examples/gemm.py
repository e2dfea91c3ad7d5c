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

`python examples/gemm.py` runs the kernel on one device (a GPU, else one simulated CPU device
through the interpreter, at a smaller default size) and checks A @ B against a float64 product
on the host, on random data.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

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
def check(m: int, n: int, k: int, dtype: str = "bfloat16", seed: int = 0, **config: int) -> ts.testing.Verdict:
    """The kernel's C on one device vs a float64 product on the host (tolerance per dtype, relative
    to max |C|), every element."""
    rng = np.random.default_rng(seed)
    a = ts.testing.random_array(rng, (m, k), dtype)
    b = ts.testing.random_array(rng, (k, n), dtype)
    got = jax.jit(gemm(m, n, k, jnp.dtype(dtype), **config))(a, b)
    want = a.astype(np.float64) @ b.astype(np.float64)
    return ts.testing.compare(got, want, "C close to the float64 product", atol_of_max=TOLERANCE[dtype])


if __name__ == "__main__":
    ts.testing.main(check, mesh=None, defaults=dict(m=256, n=512, k=256), gpu_defaults=dict(m=4096, n=4096, k=4096))
