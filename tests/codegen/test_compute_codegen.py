"""The compute part's CUDA: which kernels take the Hopper GEMM lowering (and why not), what it
asks of the handler (threads, shared memory, tensor maps), and nvcc building every variant for
sm_90a / sm_90 without register spills."""

from __future__ import annotations

import re
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_tilescale as ts
from jax_tilescale import language as T
from jax_tilescale.codegen import generate_cuda
from jax_tilescale.codegen.gemm_sm90 import TENSOR_MAP_FIELDS
from jax_tilescale.compiler import compile_cubin, parse_report, ptxas_report
from tests.conftest import load_example

gemm_example = load_example("gemm")
BF16 = jnp.bfloat16


def _trace(kern, *shapes_dtypes):
    return kern.trace(*(jax.ShapeDtypeStruct(s, d) for s, d in shapes_dtypes))


def _gemm_ir(m, n, k, dtype=BF16, **cfg):
    cfg = {"block_m": 128, "block_n": 256, "block_k": 64, **cfg}  # the tiles these tests read, not the table's pick
    return _trace(gemm_example.gemm(m, n, k, jnp.dtype(dtype), **cfg), ((m, k), dtype), ((k, n), dtype))


def _general_gemm(ta, tb, threads=256, dtype=BF16, bm=128, bn=128, bk=64, stages=3, extra=None):
    m = n = k = 256

    @ts.kernel(out_shape=jax.ShapeDtypeStruct((m, n), jnp.float32), grid=(n // bn, m // bm), threads=threads)
    def kern(A, B, C):
        bx, by = T.program_id(0), T.program_id(1)
        A_s = T.alloc_shared((bk, bm) if ta else (bm, bk), dtype)
        B_s = T.alloc_shared((bn, bk) if tb else (bk, bn), dtype)
        C_f = T.alloc_fragment((bm, bn), jnp.float32)
        T.clear(C_f)
        for ko in T.Pipelined(k // bk, num_stages=stages):
            T.copy(A[T.ds(ko * bk, bk), T.ds(by * bm, bm)] if ta else A[T.ds(by * bm, bm), T.ds(ko * bk, bk)], A_s)
            T.copy(B[T.ds(bx * bn, bn), T.ds(ko * bk, bk)] if tb else B[T.ds(ko * bk, bk), T.ds(bx * bn, bn)], B_s)
            T.gemm(A_s, B_s, C_f, transpose_A=ta, transpose_B=tb)
        if extra is not None:
            extra(C_f, A_s)
        T.copy(C_f, C[T.ds(by * bm, bm), T.ds(bx * bn, bn)])

    return _trace(kern, (((k, m) if ta else (m, k)), dtype), (((n, k) if tb else (k, n)), dtype))


def test_pipelined_gemm_takes_the_hopper_lowering():
    mod = generate_cuda(_gemm_ir(8192, 8192, 8192), "sm_90")
    assert mod.arch == "sm_90a" and mod.threads == 256 + 128 and not mod.notes
    assert mod.smem_bytes == 4 * (128 * 64 + 64 * 256) * 2 + 1024 + 128  # stages, alignment slack, barriers
    maps = np.asarray(mod.tensor_maps).reshape(-1, TENSOR_MAP_FIELDS)
    # A: 64-column boxes of 128 rows; B: 64-column boxes of 64 rows; C (the TMA-stored epilogue):
    # 64-column boxes of 128 rows; all 128-byte swizzled bf16
    assert maps.tolist() == [[0, 9, 2, 8192, 8192, 16384, 64, 128, 3], [1, 9, 2, 8192, 8192, 16384, 64, 64, 3],
                             [2, 9, 2, 8192, 8192, 16384, 64, 128, 3]]
    src = mod.source
    assert "ts_wgmma_m64n256k16_bf16_km" in src and "ts_tma_load_2d" in src and "setmaxnreg" in src
    assert "__syncthreads()" not in src.split("consumer warpgroups")[1]  # consumers never wait for the producer


@pytest.mark.parametrize("why,ir,pattern", [
    # 64 x 64 tiles: the portable path's shared-memory accumulator fits a Turing block's 64 KiB
    ("other GPUs", lambda: _gemm_ir(512, 512, 512, block_m=64, block_n=64, num_stages=2), None),
    ("96 threads", lambda: _general_gemm(False, False, threads=96), r"threads=96"),
    ("fp32 tiles", lambda: _general_gemm(False, False, dtype=jnp.float32), r"fp16/bf16"),
    ("accumulator read elsewhere", lambda: _general_gemm(False, False, extra=lambda c, a: T.fill(c[0:8, :], 1.0)),
     r"accumulator other than"),
    ("tile used outside", lambda: _general_gemm(False, False, extra=lambda c, a: T.fill(a, 0.0)),
     r"pipelined tile outside"),
])
def test_portable_path_and_the_reason(why, ir, pattern):
    arch = "sm_75" if why == "other GPUs" else "sm_90"  # sm_80 and later take the mma.sync lowering
    mod = generate_cuda(ir(), arch)
    assert mod.arch == arch and mod.tensor_maps == ()
    if pattern:
        assert any(re.search(pattern, note) for note in mod.notes), mod.notes
        assert "portable path: " in mod.source


def _two_outputs(out_dtypes, stages=3, bk=64):
    """A 256^3 GEMM whose accumulator is copied into two outputs, in this order."""
    m = n = k = 256
    bm, bn = 128, 256

    @ts.kernel(out_shape=tuple(jax.ShapeDtypeStruct((m, n), d) for d in out_dtypes), grid=(1, m // bm), threads=256)
    def kern(A, B, C, D):
        by = T.program_id(1)
        A_s, B_s = T.alloc_shared((bm, bk), BF16), T.alloc_shared((bk, bn), BF16)
        C_f = T.alloc_fragment((bm, bn), jnp.float32)
        T.clear(C_f)
        for ko in T.Pipelined(k // bk, num_stages=stages):
            T.copy(A[T.ds(by * bm, bm), T.ds(ko * bk, bk)], A_s)
            T.copy(B[T.ds(ko * bk, bk), 0:bn], B_s)
            T.gemm(A_s, B_s, C_f)
        T.copy(C_f, C[T.ds(by * bm, bm), :])
        T.copy(C_f, D[T.ds(by * bm, bm), :])

    return _trace(kern, ((m, k), BF16), ((k, n), BF16))


def _tma_stores(mod) -> int:
    return len(re.findall(r"ts_tma_store_2d\(&", mod.source))


def test_epilogue_stores_through_tma():
    """The last statement's accumulator copy into a 16-bit output: converted into the freed stage
    ring, then one TMA store per 64-column box (the box's rows: the tile's)."""
    mod = generate_cuda(_gemm_ir(1000, 1000, 1000, block_m=256, block_n=192), "sm_90")
    assert _tma_stores(mod) == 3 and "ts_bulk_wait_read();" in mod.source
    maps = np.asarray(mod.tensor_maps).reshape(-1, TENSOR_MAP_FIELDS).tolist()
    assert maps[-1] == [2, 9, 2, 1000, 1000, 2000, 64, 256, 3]
    # the first copy is not last: its stores stay in registers -> global
    two = generate_cuda(_two_outputs([BF16, jnp.float16]), "sm_90")
    assert _tma_stores(two) == 4 and two.source.count("__floats2bfloat162_rn") == 1
    last_map = np.asarray(two.tensor_maps).reshape(-1, TENSOR_MAP_FIELDS)[-1].tolist()
    assert last_map == [3, 6, 2, 256, 256, 512, 64, 128, 3]  # D, fp16


def test_epilogue_stores_fp32_through_tma():
    """fp32 outputs take 32-column boxes (128-byte rows): 8 stores for a 256-column tile."""
    mod = generate_cuda(_two_outputs([BF16, jnp.float32], stages=4), "sm_90")
    assert _tma_stores(mod) == 8
    assert np.asarray(mod.tensor_maps).reshape(-1, TENSOR_MAP_FIELDS)[-1].tolist() == [3, 7, 2, 256, 256, 1024, 32,
                                                                                        128, 3]


@pytest.mark.parametrize("why,ir", [
    ("a float32 tile larger than the rings", lambda: _general_gemm(False, False)),
    ("the ring is smaller than the tile", lambda: _gemm_ir(512, 512, 512, num_stages=1)),
    ("last output float32, 3 stages", lambda: _two_outputs([BF16, jnp.float32])),
])
def test_epilogue_stores_from_registers(why, ir):
    mod = generate_cuda(ir(), "sm_90")
    assert mod.arch == "sm_90a" and _tma_stores(mod) == 0


def test_epilogue_tma_store_can_be_turned_off(monkeypatch):
    from jax_tilescale.codegen import gemm_sm90

    monkeypatch.setattr(gemm_sm90, "TMA_STORE", False)
    mod = generate_cuda(_gemm_ir(8192, 8192, 8192), "sm_90")
    assert _tma_stores(mod) == 0 and len(mod.tensor_maps) == 2 * TENSOR_MAP_FIELDS


def _no_spills(cubin) -> str:
    """The report of a kernel (its cubin is named after its entry) that ptxas built without spills, without
    serialized wgmma (C7514) and with its setmaxnreg (C7504)."""
    report = ptxas_report(cubin) or ""
    got = parse_report(report, Path(cubin).stem)
    assert got.registers is not None and (got.spill_stores, got.spill_loads) == (0, 0), report
    assert not {code for code, _ in got.losses} & {"C7514", "C7504"}, report
    return report


@pytest.mark.parametrize("name,ir", [
    ("128x256", lambda: _gemm_ir(8192, 8192, 8192)),
    ("256x128", lambda: _gemm_ir(8192, 28672, 8192, block_m=256, block_n=128)),
    ("256x192 ragged", lambda: _gemm_ir(8192, 8192, 8192, block_m=256, block_n=192)),
    ("two outputs", lambda: _two_outputs([BF16, jnp.float16])),
    ("fp32 output through TMA", lambda: _two_outputs([BF16, jnp.float32], stages=4)),
    ("fp16 64x64 one warpgroup", lambda: _gemm_ir(256, 512, 192, jnp.float16, block_m=64, block_n=64, threads=128)),
    ("A^T", lambda: _general_gemm(True, False)),
    ("B^T", lambda: _general_gemm(False, True)),
    ("A^T B^T bk=128", lambda: _general_gemm(True, True, bk=128, threads=128)),
])
def test_hopper_variants_build_without_spills(session_cache, require_nvcc, name, ir):
    mod = generate_cuda(ir(), "sm_90")
    assert mod.arch == "sm_90a", mod.notes
    _no_spills(compile_cubin(mod.source, arch=mod.arch, entry=mod.entry, nvshmem=False))


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float16, BF16])
def test_portable_variants_build(session_cache, require_nvcc, dtype):
    mod = generate_cuda(_general_gemm(True, True, threads=96, dtype=dtype), "sm_90")
    assert mod.arch == "sm_90"
    compile_cubin(mod.source, arch=mod.arch, entry=mod.entry, nvshmem=False)
