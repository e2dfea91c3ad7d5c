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

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np

import jax_tilescale as ts
from jax_tilescale import language as T
from jax_tilescale.codegen.gemm_table import (
    FP8_DEFAULT,
    GemmConfig,
    fp8_pick,
    fp8_tune_candidates,
)

TOLERANCE = 2e-2  # relative to max |C|: bfloat16 output (the float8 rounding is in the reference)


# --- config + kernel --------------------------------------------------------------------------
def gemm_fp8(m: int, n: int, k: int, dtype=jnp.float8_e4m3fn, out_dtype=jnp.bfloat16, block_m: int | None = None,
             block_n: int | None = None, block_k: int | None = None, num_stages: int | None = None,
             threads: int | None = None, group_m: int | None = None, swap: bool | None = None,
             autotune: bool = False) -> ts.TileKernel:
    """A [m, k] (float8), B [n, k] (float8), scale_a [1], scale_b [1] (float32) ->
    C [m, n] = scale_a * scale_b * A @ B^T in `out_dtype`. Arguments left None come from gemm_table.fp8_pick for
    this problem (FP8_DEFAULT's 128 x 256 x 128 tiles, 4 stages, where they make a wave; smaller or swapped tiles
    where they do not), or from FP8_DEFAULT where tiles are given; the ones given win.

    `swap=True`, for a few rows of A (a decoder's tokens): each tile is computed transposed, C^T = B A^T, block_n
    of B's rows on the tensor cores' 64-row side and block_m of A's on their narrow n (8-256); without tile
    arguments gemm_table.swapped_config's. Both tiles stay K-major, as FP8's wgmma reads them (B's is the product's
    left operand as stored, A's its right one with `transpose_B`), and the tile goes back the right way round
    as one transposed copy (examples/gemm.py's store_transposed).

    `autotune=True` (no configuration arguments then): fp8_pick's choice and the others
    gemm_table.fp8_tune_candidates names are built, checked against the dequantised product and timed on the GPU the
    first time this problem is seen; the fastest is kept on disk for every later call and process
    (jax_tilescale/tune); without a GPU, fp8_pick's choice untimed."""
    gemm = ts.testing.sibling(__file__, "gemm")  # examples/gemm.py: the arguments' rules, as gemm()'s
    given = gemm.given_arguments("gemm_fp8", autotune, block_m=block_m, block_n=block_n, block_k=block_k,
                                 num_stages=num_stages, threads=threads, group_m=group_m, swap=swap)
    if autotune:
        return build(m, n, k, dtype, out_dtype, tuned_config(m, n, k, dtype, out_dtype).config)
    tiles_given = any(f in given for f in ("block_m", "block_n", "block_k"))
    if swap and not tiles_given:
        base = gemm.swapped_base("gemm_fp8", m, 1)
    else:  # the caller chose the tiles, else gemm_table.fp8_pick for this problem
        base = FP8_DEFAULT if tiles_given else fp8_pick(m, n, k, gemm.device_sm_count())
    return build(m, n, k, dtype, out_dtype, dataclasses.replace(base, **given))


def build(m: int, n: int, k: int, dtype, out_dtype, cfg: GemmConfig) -> ts.TileKernel:
    """The kernel of one configuration (its split_k, persistent, blocks_per_sm and pingpong unused: one block per
    tile)."""
    gemm = ts.testing.sibling(__file__, "gemm")  # examples/gemm.py: grouped order, the swapped product's parts
    if cfg.swap:
        gemm.check_swapped(cfg, "xla")
    bm, bn, bk = cfg.block_m, cfg.block_n, cfg.block_k
    tiles_m, tiles_n = T.ceildiv(m, bm), T.ceildiv(n, bn)
    group = gemm.group_of(tiles_m, cfg)
    acc_shape = (bn, bm) if cfg.swap else (bm, bn)

    @ts.kernel(out_shape=jax.ShapeDtypeStruct((m, n), out_dtype), grid=(tiles_n, tiles_m), threads=cfg.threads)
    def gemm_fp8_kernel(A, B, scale_a, scale_b, C):
        tm, tn = gemm.grouped_tile(T.program_id(1) * tiles_n + T.program_id(0), tiles_m, tiles_n, group)
        A_s = T.alloc_shared((bm, bk), dtype)
        B_s = T.alloc_shared((bn, bk), dtype)
        C_f = T.alloc_fragment(acc_shape, jnp.float32)  # C's tile, or its transpose
        T.clear(C_f)
        for ko in T.Pipelined(T.ceildiv(k, bk), num_stages=cfg.num_stages):
            T.copy(A[T.ds(tm * bm, bm), T.ds(ko * bk, bk)], A_s)
            T.copy(B[T.ds(tn * bn, bn), T.ds(ko * bk, bk)], B_s)
            if cfg.swap:
                T.gemm(B_s, A_s, C_f, transpose_B=True)
            else:
                T.gemm(A_s, B_s, C_f, transpose_B=True)
        for i, j in T.Parallel(*acc_shape):  # the per-tensor scales, on the accumulator
            C_f[i, j] = C_f[i, j] * (scale_a[0] * scale_b[0])
        if cfg.swap:
            gemm.store_transposed(C_f, C, tm * bm, tn * bn)
        else:
            T.copy(C_f, C[T.ds(tm * bm, bm), T.ds(tn * bn, bn)])

    return gemm_fp8_kernel


def tuned_config(m: int, n: int, k: int, dtype, out_dtype=jnp.bfloat16, sms: int | None = None,
                 **tune: Any) -> ts.tune.Tuned[GemmConfig]:
    """The fastest of gemm_table.fp8_tune_candidates for this problem on a GPU of `sms` SMs (default: this one's)
    (ts.tune.autotune: timed on the GPU the first time, then read from disk), each candidate's C first checked
    against the float64 product of the dequantised operands (a wrong one is refused, never chosen). `tune`:
    autotune's keyword arguments (timer, retune, progress)."""
    fp8 = np.dtype(dtype)
    sms = sms or ts.testing.sibling(__file__, "gemm").device_sm_count()
    rng = np.random.default_rng(0)
    a8, sa = quantize(rng.standard_normal((m, k)).astype(np.float32), fp8)
    b8, sb = quantize(rng.standard_normal((n, k)).astype(np.float32), fp8)
    want = dequantised_product(a8, sa, b8, sb)
    limit = TOLERANCE * max(float(np.abs(want).max()), 1e-30)

    def check(c: jax.Array) -> str | None:
        err = float(np.abs(np.asarray(c.astype(jnp.float32), np.float64) - want).max())
        return None if err <= limit else f"max |C - the dequantised product| = {err:.3g}, over {limit:.3g}"

    with jax.ensure_compile_time_eval():  # on the device now, also where gemm_fp8() is called while a jit traces
        args = tuple(jnp.asarray(x) for x in (a8, b8, sa, sb))
    return ts.tune.autotune("examples.gemm_fp8", fp8_tune_candidates(m, n, k, sms),
                            lambda cfg: build(m, n, k, fp8, out_dtype, cfg), args, describe=GemmConfig.describe,
                            key=dict(sms=sms, out_dtype=str(np.dtype(out_dtype))), check=check, **tune)


def dequantised_product(a8: np.ndarray, sa: np.ndarray, b8: np.ndarray, sb: np.ndarray) -> np.ndarray:
    """(scale_a * A) @ (scale_b * B)^T in float64 on the host: what the kernel's C is checked against."""
    return (a8.astype(np.float64) * float(sa[0])) @ (b8.astype(np.float64) * float(sb[0])).T


def quantize(x: np.ndarray, dtype) -> tuple[np.ndarray, np.ndarray]:
    """(x / scale in `dtype`, scale as a float32 [1]) with scale = max |x| / the largest finite value."""
    top = float(ml_dtypes.finfo(dtype).max)
    scale = np.float32(max(float(np.max(np.abs(x))), 1e-12) / top)
    return (x / scale).astype(dtype), np.array([scale], np.float32)


# --- check + entry point ----------------------------------------------------------------------
def check(m: int, n: int, k: int, dtype: str = "float8_e4m3fn", seed: int = 0, autotune: bool = False,
          **config: int) -> ts.testing.Verdict:
    """The kernel's C vs a float64 product of the dequantised float8 operands on the host. `--autotune`:
    gemm_fp8(autotune=True)'s choice (timed on a GPU the first time)."""
    fp8 = np.dtype(getattr(ml_dtypes, dtype))
    rng = np.random.default_rng(seed)
    a, sa = quantize(rng.standard_normal((m, k)).astype(np.float32), fp8)
    b, sb = quantize(rng.standard_normal((n, k)).astype(np.float32), fp8)
    got = jax.jit(gemm_fp8(m, n, k, fp8, autotune=autotune, **config))(a, b, sa, sb)
    return ts.testing.compare(got, dequantised_product(a, sa, b, sb),
                              "C close to the float64 product of the dequantised operands", atol_of_max=TOLERANCE)


if __name__ == "__main__":
    ts.testing.main(check, mesh=None, defaults=dict(m=256, n=512, k=256), gpu_defaults=dict(m=4096, n=4096, k=4096))
