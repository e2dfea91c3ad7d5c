"""A kernel that the CUDA code generator lowers in a slower form than the GPU allows says so when it is compiled
(`lowering.cuda.warn_slower_paths`, called by the CUDA lowering on every kernel): a PerformanceWarning naming the
kernel, each loop's line and the reason, from the code generator's own notes; none for a kernel lowered as asked."""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_tilescale as ts
from jax_tilescale.codegen import generate_cuda
from jax_tilescale.lowering.cuda import warn_slower_paths
from tests.conftest import load_example, needs_extension, needs_toolchain

gemm_example = load_example("gemm")
S = jax.ShapeDtypeStruct


def _module(m, n, k, dtype, **cfg):
    kern = gemm_example.gemm(m, n, k, jnp.dtype(dtype), **cfg)
    ir = kern.trace(S((m, k), dtype), S((k, n), dtype))
    return ir, generate_cuda(ir, "sm_90")


def test_a_float32_gemm_on_hopper_warns_that_it_takes_the_portable_path():
    ir, mod = _module(256, 128, 64, jnp.float32, block_m=64, block_n=32, block_k=16, num_stages=2, threads=128)
    assert mod.notes  # neither tensor-core lowering takes float32 tiles
    with pytest.warns(ts.PerformanceWarning) as got:
        warn_slower_paths(ir, mod.notes)
    (w,) = got
    text = str(w.message)
    assert ir.name in text and "portable path" in text and "float32" in text
    assert all(note in text for note in mod.notes)


def test_a_tile_width_the_hopper_plan_refuses_is_named_with_its_reason():
    ir, mod = _module(1024, 1024, 512, jnp.bfloat16, block_m=128, block_n=200, block_k=64, num_stages=4)
    with pytest.warns(ts.PerformanceWarning, match=r"64 x 200: its contiguous dimension must be a multiple of 16"):
        warn_slower_paths(ir, mod.notes)


def test_the_table_pick_lowers_as_asked_and_says_nothing():
    ir, mod = _module(4096, 4096, 4096, jnp.bfloat16)
    assert mod.notes == ()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any warning fails the test
        warn_slower_paths(ir, mod.notes)


def test_the_warning_can_be_silenced_by_category():
    ir, mod = _module(256, 128, 64, jnp.float32, block_m=64, block_n=32, block_k=16, num_stages=2, threads=128)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", category=ts.PerformanceWarning)
        warn_slower_paths(ir, mod.notes)
    assert seen == []


@needs_extension
@needs_toolchain
def test_lowering_a_float32_gemm_for_cuda_warns(tmp_path, monkeypatch):
    """Through the CUDA lowering itself (compiles the kernel with nvcc; no GPU needed): the warning reaches the
    user who jits the kernel."""
    monkeypatch.setenv("TILESCALE_CACHE_DIR", str(tmp_path / "cache"))
    m, n, k = 256, 128, 64
    kern = gemm_example.gemm(m, n, k, jnp.dtype(jnp.float32), block_m=64, block_n=32, block_k=16, num_stages=2,
                             threads=128)
    rng = np.random.default_rng()
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    with pytest.warns(ts.PerformanceWarning, match=r"portable path.*float32"):
        text = jax.jit(kern).trace(a, b).lower(lowering_platforms=("cuda",)).as_text()
    assert "jax_tilescale" in text  # the custom call of the launch handler was emitted
