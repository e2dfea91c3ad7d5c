"""The CUDA of clipped copies (ragged edges, `Copy.clip_dims`): the bound checks the generated
code makes (per vector where the extent allows, else per element; zero on load, skip on store),
the plain copy where nothing can clip, no GEMM plan that would write past a buffer, and nvcc
building every case (the kernels of tests/compute/test_ragged.py and a few more)."""

from __future__ import annotations

import os
from concurrent.futures import Future, ThreadPoolExecutor, wait

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import jax_tilescale as ts
from jax_tilescale import language as T
from jax_tilescale.codegen import CudaModule, generate_cuda
from jax_tilescale.compiler import compile_cubin
from tests.compute.test_ragged import ragged_gemm
from tests.conftest import load_example

BF16 = np.dtype(ml_dtypes.bfloat16)
S = jax.ShapeDtypeStruct
gemm_example = load_example("gemm")


def _gemm(m, n, k, dtype, out_dtype, **kw):
    return ragged_gemm(m, n, k, dtype, out_dtype, **kw).trace(S((m, k), dtype), S((k, n), dtype))


def _tile_roundtrip(m, n, dtype, bm=16, bn=16, tile_dtype=None):
    """Each block: a ragged window -> a tile (cast when tile_dtype differs) -> the same window of the output."""
    tile_dtype = dtype if tile_dtype is None else tile_dtype

    @ts.kernel(out_shape=S((m, n), dtype), grid=(T.ceildiv(n, bn), T.ceildiv(m, bm)))
    def roundtrip(x, y):
        bx, by = T.program_id(0), T.program_id(1)
        t = (T.alloc_fragment if tile_dtype != dtype else T.alloc_shared)((bm, bn), tile_dtype)
        T.copy(x[T.ds(by * bm, bm), T.ds(bx * bn, bn)], t)
        T.copy(t, y[T.ds(by * bm, bm), T.ds(bx * bn, bn)])

    return roundtrip.trace(S((m, n), dtype))


def _three_d():
    @ts.kernel(out_shape=S((3, 50, 24), jnp.float16), grid=(2, 3))
    def three_d(x, y):
        r, b = T.program_id(0), T.program_id(1)
        f = T.alloc_fragment((32, 24), jnp.float16)
        T.copy(x[b, T.ds(r * 32, 32), :], f)
        T.copy(f, y[b, T.ds(r * 32, 32), :])

    return three_d.trace(S((3, 50, 24), jnp.float32))


def _hopper_example():
    m, n, k = 200, 136, 72
    return gemm_example.gemm(m, n, k, jnp.bfloat16, block_m=128, block_n=128, block_k=64, num_stages=2,
                             threads=256).trace(S((m, k), jnp.bfloat16), S((k, n), jnp.bfloat16))


CASES = {
    "gemm-f32": lambda: _gemm(200, 136, 72, np.float32, np.float32),
    "gemm-bf16": lambda: _gemm(200, 136, 72, BF16, BF16),
    "gemm-f16-fragments": lambda: _gemm(200, 136, 72, np.float16, np.float32, a_fragment=True),
    "roundtrip-odd-f32": lambda: _tile_roundtrip(37, 51, np.float32),
    "roundtrip-even-bf16": lambda: _tile_roundtrip(40, 20, BF16, bn=8),
    "roundtrip-cast": lambda: _tile_roundtrip(37, 51, np.float32, tile_dtype=np.float16),
    "three-d": _three_d,
    "softmax-ragged-rows": lambda: load_example("softmax").softmax_ir(m=93, n=200, dtype=BF16, block_m=8),
}


@pytest.fixture(scope="module")
def sources() -> dict[str, CudaModule]:
    """The portable lowering of every case (what this file checks), and the default one of a bf16
    GEMM (a GEMM plan may own its copies: it must clip them too)."""
    out = {name: generate_cuda(make(), gemm_lowering="portable") for name, make in CASES.items()}
    out["gemm-bf16-auto"] = generate_cuda(CASES["gemm-bf16"](), "sm_90")
    out["gemm-bf16-hopper"] = generate_cuda(_hopper_example(), "sm_90")  # TMA + wgmma, TMA-stored epilogue
    return out


@pytest.fixture(scope="module")
def built(sources, session_cache, require_nvcc) -> dict[str, Future]:
    with ThreadPoolExecutor(max_workers=max(2, min(8, os.cpu_count() or 2))) as pool:
        futures = {name: pool.submit(compile_cubin, m.source, arch=m.arch, entry=m.entry, nvshmem=False)
                   for name, m in sources.items()}
        wait(futures.values())
    return futures


@pytest.mark.parametrize("name", [*CASES, "gemm-bf16-auto", "gemm-bf16-hopper"])
def test_ragged_kernel_builds_to_a_cubin(built, sources, name):
    data = built[name].result().read_bytes()
    assert data[:4] == b"\x7fELF" and sources[name].entry.encode() + b"\0" in data


def _copy_block(src: str, nth: int) -> str:
    """The generated lines of the nth copy statement."""
    start = -1
    for _ in range(nth + 1):
        start = src.index("] copy(", start + 1)
    return src[start:src.index("__syncthreads();", start)]


def test_vector_checks_where_the_extent_allows(sources):
    src = sources["gemm-f32"].source
    a_load = _copy_block(src, 0)
    assert "as 512 x 16-byte accesses" in a_load and "elements outside are zero-filled" in a_load
    assert "const int64_t ts_lim0 = 200 - (ts_by * 64);" in a_load and "const int64_t ts_lim1 = 72 - (ts_i0 * 32);" \
        in a_load
    assert "((int64_t)ts_c0 < ts_lim0 && (int64_t)ts_c1 * 4 < ts_lim1) ? ts_src[" in a_load and ": uint4{};" in a_load
    store = _copy_block(src, 2)
    assert "elements outside are skipped" in store and "if ((int64_t)ts_c0 < ts_lim0 && " in store
    bf16 = _copy_block(sources["gemm-bf16"].source, 1)  # 136 columns: 16-byte vectors of 8 still fit exactly
    assert "x 16-byte accesses" in bf16 and "(int64_t)ts_c1 * 8 < ts_lim1" in bf16


def test_element_checks_where_it_does_not(sources):
    odd = _copy_block(sources["roundtrip-odd-f32"].source, 0)  # 51 columns: no vector divides them
    assert "x 4-byte accesses" in odd and "(int64_t)ts_c1 < ts_lim1" in odd
    cast = sources["roundtrip-cast"].source
    load, store = _copy_block(cast, 0), _copy_block(cast, 1)
    assert "? ts_convert<__half, float>(" in load and ": ts_from_float<__half>(0.0f);" in load
    assert "if ((int64_t)ts_c0 < ts_lim0 && (int64_t)ts_c1 < ts_lim1) ts_dst[" in store
    three = _copy_block(sources["three-d"].source, 0)  # only the middle dimension clips
    assert "ts_lim0 = 50 - (ts_bx * 32);" in three and "ts_lim1" not in three
    softmax = sources["softmax-ragged-rows"].source  # whole rows: one check per row of 25 vectors
    assert "ts_lim0 = 93 - (ts_bx * 8);" in _copy_block(softmax, 0) and "ts_lim1" not in softmax


def test_nothing_to_clip_keeps_the_plain_copy():
    src = generate_cuda(_gemm(192, 128, 64, np.float32, np.float32)).source
    assert "ts_lim" not in src and "clipped" not in src and "clip_dims" not in src


def test_no_gemm_plan_writes_past_the_buffer(monkeypatch):
    """The pipelined example at ragged shapes on sm_90: the Hopper plan takes it (TMA zero-fills
    the tiles past A's and B's ends). Its epilogue stores C through TMA, which leaves out what lies
    past C's 200 x 136 (the tensor map's dimensions); with that off, every accumulator store is
    guarded with the room left in C."""
    from jax_tilescale.codegen import gemm_sm90

    module = generate_cuda(_hopper_example(), "sm_90")
    assert module.arch == "sm_90a", module.notes
    assert "ts_tma_store_2d(&ts_maps.m[2]" in module.source
    assert list(module.tensor_maps[-9:-6]) == [2, 9, 2] and list(module.tensor_maps[-6:-4]) == [136, 200]
    monkeypatch.setattr(gemm_sm90, "TMA_STORE", False)
    module = generate_cuda(_hopper_example(), "sm_90")
    store = module.source[module.source.rindex("] copy("):]
    assert "const int64_t ts_room0 = (int64_t)(200) - " in store
    assert "const int64_t ts_room1 = (int64_t)(136) - " in store
    assert "if (ts_row < ts_room0 && ts_col < ts_room1) *reinterpret_cast<__nv_bfloat162*>" in store
