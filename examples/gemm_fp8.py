"""FP8 GEMM on one GPU: C = (scale_a * A) @ (scale_b * B)^T with A and B in float8 (e4m3 or e5m2),
float32 accumulation, the per-tensor scales applied in the epilogue, C in bfloat16.

The layout is the one FP8 GEMMs use everywhere (cuBLASLt, torch._scaled_mm): both operands K-major,
A stored M x K and B stored N x K, because Hopper's FP8 tensor-core instruction (wgmma ...k32.e4m3)
reads both tiles from shared memory K-major. The kernel is examples/gemm.py's with `transpose_B=True`
and a `T.Parallel` that multiplies the accumulator by the two scales before the store; on an
H100/H200 the code generator keeps the accumulator in registers through all of it (the scaling is
a multiply per accumulator, jax_tilescale/codegen/gemm_emit.py) and stores C through TMA. The CPU
interpreter runs the kernel as written (float8 -> float32 is exact, so its products are float32
products).

For a decoder's few tokens, `swap=True` computes each tile transposed (C^T = B A^T: B's rows on the tensor
cores' 64-row side, the tokens on their narrow n), both tiles still K-major.

`python examples/gemm_fp8.py` quantises random normal matrices to float8 with per-tensor scales
(max |x| / the format's largest finite value), runs the kernel and checks C against a float64
product of the dequantised operands on the host.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np

import jax_tilescale as ts
from jax_tilescale import language as T

TOLERANCE = 2e-2  # relative to max |C|: bfloat16 output (the float8 rounding is in the reference)


# --- config + kernel --------------------------------------------------------------------------
def gemm_fp8(m: int, n: int, k: int, dtype=jnp.float8_e4m3fn, out_dtype=jnp.bfloat16, block_m: int = 128,
             block_n: int = 256, block_k: int = 128, num_stages: int = 4, threads: int = 256,
             group_m: int = 8, swap: bool = False) -> ts.TileKernel:
    """A [m, k] (float8), B [n, k] (float8), scale_a [1], scale_b [1] (float32) ->
    C [m, n] = scale_a * scale_b * A @ B^T in `out_dtype`.

    `swap=True`, for a few rows of A (a decoder's tokens): each tile is computed transposed, C^T = B A^T, block_n
    of B's rows on the tensor cores' 64-row side and block_m of A's on their narrow n (8-256). Both tiles stay
    K-major, as FP8's wgmma reads them (B's is the product's left operand as stored, A's its right one with
    `transpose_B`), and the tile goes back the right way round through a shared tile (examples/gemm.py's
    store_transposed)."""
    gemm = ts.testing.sibling(__file__, "gemm")  # examples/gemm.py: the swapped product's checks and store
    if swap:
        gemm.check_swapped(gemm.GemmConfig(block_m=block_m, block_n=block_n, block_k=block_k, num_stages=num_stages,
                                           threads=threads, swap=True), "xla")
    tiles_m, tiles_n = T.ceildiv(m, block_m), T.ceildiv(n, block_n)
    group = group_m if tiles_m % group_m == 0 else 1
    acc_shape = (block_n, block_m) if swap else (block_m, block_n)

    @ts.kernel(out_shape=jax.ShapeDtypeStruct((m, n), out_dtype), grid=(tiles_n, tiles_m), threads=threads)
    def gemm_fp8_kernel(A, B, scale_a, scale_b, C):
        tm, tn = gemm.grouped_tile(T.program_id(1) * tiles_n + T.program_id(0), tiles_m, tiles_n, group)
        A_s = T.alloc_shared((block_m, block_k), dtype)
        B_s = T.alloc_shared((block_n, block_k), dtype)
        C_f = T.alloc_fragment(acc_shape, jnp.float32)  # C's tile, or its transpose
        T.clear(C_f)
        for ko in T.Pipelined(T.ceildiv(k, block_k), num_stages=num_stages):
            T.copy(A[T.ds(tm * block_m, block_m), T.ds(ko * block_k, block_k)], A_s)
            T.copy(B[T.ds(tn * block_n, block_n), T.ds(ko * block_k, block_k)], B_s)
            if swap:
                T.gemm(B_s, A_s, C_f, transpose_B=True)
            else:
                T.gemm(A_s, B_s, C_f, transpose_B=True)
        for i, j in T.Parallel(*acc_shape):  # the per-tensor scales, on the accumulator
            C_f[i, j] = C_f[i, j] * (scale_a[0] * scale_b[0])
        if swap:
            gemm.store_transposed(C_f, T.alloc_shared(acc_shape, out_dtype, name="Ct_s"), C, tm * block_m,
                                  tn * block_n, m, n)
        else:
            T.copy(C_f, C[T.ds(tm * block_m, block_m), T.ds(tn * block_n, block_n)])

    return gemm_fp8_kernel


def quantize(x: np.ndarray, dtype) -> tuple[np.ndarray, np.ndarray]:
    """(x / scale in `dtype`, scale as a float32 [1]) with scale = max |x| / the largest finite value."""
    top = float(ml_dtypes.finfo(dtype).max)
    scale = np.float32(max(float(np.max(np.abs(x))), 1e-12) / top)
    return (x / scale).astype(dtype), np.array([scale], np.float32)


# --- check + entry point ----------------------------------------------------------------------
def check(m: int, n: int, k: int, dtype: str = "float8_e4m3fn", seed: int = 0, **config: int) -> ts.testing.Verdict:
    """The kernel's C vs a float64 product of the dequantised float8 operands on the host."""
    fp8 = np.dtype(getattr(ml_dtypes, dtype))
    rng = np.random.default_rng(seed)
    a, sa = quantize(rng.standard_normal((m, k)).astype(np.float32), fp8)
    b, sb = quantize(rng.standard_normal((n, k)).astype(np.float32), fp8)
    got = jax.jit(gemm_fp8(m, n, k, fp8, **config))(a, b, sa, sb)
    want = (a.astype(np.float64) * float(sa[0])) @ (b.astype(np.float64) * float(sb[0])).T
    return ts.testing.compare(got, want, "C close to the float64 product of the dequantised operands",
                              atol_of_max=TOLERANCE)


if __name__ == "__main__":
    ts.testing.main(check, mesh=None, defaults=dict(m=256, n=512, k=256), gpu_defaults=dict(m=4096, n=4096, k=4096))
