"""FP8 T.gemm (issue 16): the verifier's rules, the interpreter against a float64 product of the
dequantised operands (examples/gemm_fp8.py, per-tensor scales in the epilogue), the Hopper lowering
(k32 e4m3/e5m2 wgmma, both tiles K-major, TMA as bytes), the element-wise update of a register
accumulator that applies the scales, and nvcc building it without spills."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import jax_tilescale as ts
from jax_tilescale import language as T
from jax_tilescale.codegen import generate_cuda
from jax_tilescale.codegen.gemm_sm90_load import TENSOR_MAP_FIELDS
from jax_tilescale.compiler import compile_cubin
from jax_tilescale.errors import KernelTraceError
from tests.codegen.kernels import scaled_relu_gemm
from tests.codegen.test_compute_codegen import _no_spills
from tests.conftest import load_example
from tests.primitives.util import mesh_of, shard_run

fp8_example = load_example("gemm_fp8")
gemm_example = load_example("gemm")
E4M3, E5M2 = np.dtype(ml_dtypes.float8_e4m3fn), np.dtype(ml_dtypes.float8_e5m2)
S = jax.ShapeDtypeStruct


def _fp8_ir(m, n, k, dtype=E4M3, **cfg):
    kern = fp8_example.gemm_fp8(m, n, k, dtype, **cfg)
    return kern.trace(S((m, k), dtype), S((n, k), dtype), S((1,), jnp.float32), S((1,), jnp.float32))


# ---- interpreter --------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float8_e4m3fn", "float8_e5m2"])
@pytest.mark.parametrize("m,n,k,cfg", [
    (256, 512, 256, {}),
    (200, 300, 130, dict(block_m=64, block_n=128, threads=128, num_stages=2)),  # every edge ragged
    (13, 200, 300, dict(block_m=16, block_n=64, threads=128, num_stages=3, swap=True)),  # swapped, ragged
])
def test_fp8_example_on_the_interpreter(dtype, m, n, k, cfg):
    verdict = fp8_example.check(m, n, k, dtype, seed=m + n, **cfg)
    assert verdict.ok, verdict


def test_fp8_products_are_exact_float32_products():
    """float8 -> float32 is exact: the interpreter's C (float32 out, scales 1) is numpy's float32
    product of the float8 values, bit for bit."""
    m, n, k = 64, 128, 128
    rng = np.random.default_rng(3)
    a = (rng.standard_normal((m, k)) * 8).astype(E4M3)
    b = (rng.standard_normal((n, k)) * 8).astype(E4M3)
    one = np.ones(1, np.float32)
    kern = fp8_example.gemm_fp8(m, n, k, E4M3, out_dtype=jnp.float32, block_m=64, block_n=128, threads=128)
    got = np.asarray(shard_run(kern, mesh_of((1,)), a, b, one, one)[0])
    np.testing.assert_array_equal(got, np.matmul(a.astype(np.float32), b.astype(np.float32).T, dtype=np.float32))


# ---- verifier -----------------------------------------------------------------------------------


def test_fp8_and_bf16_operands_do_not_mix():
    @ts.kernel(out_shape=S((64, 64), jnp.float32), grid=(1,), threads=128)
    def mixed(a, b, c):
        a_s = T.alloc_shared((64, 64), E4M3)
        b_s = T.alloc_shared((64, 64), jnp.bfloat16)
        c_f = T.alloc_fragment((64, 64), jnp.float32)
        T.copy(a, a_s)
        T.copy(b, b_s)
        T.gemm(a_s, b_s, c_f)
        T.copy(c_f, c)

    with pytest.raises(KernelTraceError, match="A and B must have one dtype"):
        mixed.trace(S((64, 64), E4M3), S((64, 64), jnp.bfloat16))


# ---- the Hopper lowering ------------------------------------------------------------------------


@pytest.mark.parametrize("dtype,ptx", [(E4M3, "e4m3"), (E5M2, "e5m2")])
def test_fp8_takes_the_hopper_lowering(dtype, ptx):
    mod = generate_cuda(_fp8_ir(8192, 8192, 8192, dtype), "sm_90")
    assert mod.arch == "sm_90a" and not mod.notes, mod.notes
    src = mod.source
    assert f"wgmma.mma_async.sync.aligned.m64n256k32.f32.{ptx}.{ptx} " in src
    assert f"ts_wgmma_m64n256k32_{ptx}_kk(" in src  # both tiles K-major, no transpose immediates
    maps = np.asarray(mod.tensor_maps, np.int64).reshape(-1, TENSOR_MAP_FIELDS)
    # A and B as bytes (UINT8 = 0), boxes of 128 one-byte columns; C in bf16 (9) through TMA
    assert maps[:, 1].tolist() == [0, 0, 9] and maps[:2, 6].tolist() == [128, 128]
    # 4 K-steps of 32 bytes per 128-byte stage row, 128 x 256 x 128 tiles, 4 stages
    assert src.count(f"ts_wgmma_m64n256k32_{ptx}_kk(ts_acc_C_f") == 4
    assert mod.smem_bytes == 4 * (128 * 128 + 256 * 128) + 1024 + 128
    # the scales: one multiply per accumulator, in registers, no shared-memory fragment
    assert "__fmul_rn(ts_rep(ts_acc_C_f[ts_m][ts_j * 4 + ts_h * 2 + 0])" in src


def test_fp8_with_b_stored_k_by_n_is_refused_naming_the_layout():
    m = n = k = 256

    @ts.kernel(out_shape=S((m, n), jnp.float32), grid=(2, 2), threads=256)
    def kn(A, B, C):
        A_s = T.alloc_shared((128, 128), E4M3)
        B_s = T.alloc_shared((128, 128), E4M3)
        C_f = T.alloc_fragment((128, 128), jnp.float32)
        T.clear(C_f)
        for ko in T.Pipelined(2, num_stages=2):
            T.copy(A[T.ds(T.program_id(1) * 128, 128), T.ds(ko * 128, 128)], A_s)
            T.copy(B[T.ds(ko * 128, 128), T.ds(T.program_id(0) * 128, 128)], B_s)
            T.gemm(A_s, B_s, C_f)
        T.copy(C_f, C[T.ds(T.program_id(1) * 128, 128), T.ds(T.program_id(0) * 128, 128)])

    ir = kn.trace(S((m, k), E4M3), S((k, n), E4M3))
    with pytest.raises(KernelTraceError, match=r"float8 wgmma reads both tiles K-major.*transpose_B=True"):
        generate_cuda(ir, "sm_90")
    with pytest.raises(KernelTraceError, match="runs only on the Hopper lowering"):
        generate_cuda(ir, "sm_80")


def test_elementwise_update_of_a_bf16_accumulator_stays_in_registers():
    """The same epilogue on examples/gemm.py's bf16 kernel: both tensor-core plans take it (before,
    a T.Parallel on the accumulator sent the loop to the portable path)."""
    m = n = k = 512

    scaled = scaled_relu_gemm(m, n, k)

    ir = scaled.trace(S((m, k), jnp.bfloat16), S((k, n), jnp.bfloat16), S((1,), jnp.float32))
    hopper = generate_cuda(ir, "sm_90")
    mma = generate_cuda(ir, "sm_80")
    assert hopper.arch == "sm_90a" and not hopper.notes and "ts_mma_16816_" in mma.source and not mma.notes
    for mod in (hopper, mma):
        assert "ts_vmax(__fmul_rn(ts_rep(ts_acc_" in mod.source


@pytest.mark.parametrize("name,make", [
    ("e4m3 128x256x128 8192^3", lambda: _fp8_ir(8192, 8192, 8192)),
    ("e5m2 ragged thread-copied", lambda: _fp8_ir(1024, 3072, 777, E5M2)),
    ("e4m3 256x128 t256", lambda: _fp8_ir(4096, 4096, 4096, block_m=256, block_n=128)),
    ("e4m3 swapped, 16 tokens", lambda: _fp8_ir(16, 4096, 4096, block_m=16, block_n=64, threads=128, num_stages=8,
                                                swap=True)),
])
def test_fp8_builds_without_spills(session_cache, require_nvcc, name, make):
    mod = make()
    mod = generate_cuda(mod, "sm_90")
    assert mod.arch == "sm_90a", mod.notes
    _no_spills(compile_cubin(mod.source, arch=mod.arch, entry=mod.entry, nvshmem=False))


def test_fp8_swap_without_tiles_takes_the_swapped_configuration_up_to_64_rows():
    kern = fp8_example.gemm_fp8(16, 256, 512, E4M3, swap=True)
    mod = generate_cuda(kern.trace(S((16, 512), E4M3), S((256, 512), E4M3), S((1,), jnp.float32),
                                   S((1,), jnp.float32)), "sm_90")
    assert mod.arch == "sm_90a" and not mod.notes and "ts_wgmma_m64n16k32_e4m3_kk" in mod.source, mod.notes
    with pytest.raises(ValueError, match="chooses its tiles for up to 64 rows of A, not 65: take block_m"):
        fp8_example.gemm_fp8(65, 256, 512, E4M3, swap=True)
