"""A GEMM tile configuration that works at one shape works at every shape (issue 16): a grid of
examples/gemm.py configurations x ragged shapes, each taking the Hopper lowering on sm_90 (a source
whose rows TMA cannot address is copied by the producer's threads, gemm_sm90_load), compiling
without spills, and computing A @ B on the interpreter; where no lowering can hold a tile, the
refusal says which tile to use."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jax_tilescale.codegen import generate_cuda
from jax_tilescale.codegen.gemm_sm90_load import TENSOR_MAP_FIELDS
from jax_tilescale.compiler import compile_cubin, kernel_resources, ptxas_report
from jax_tilescale.errors import KernelTraceError
from tests.codegen.test_compute_codegen import _no_spills
from tests.conftest import load_example
from tests.primitives.util import mesh_of, shard_run

gemm_example = load_example("gemm")
BF16 = jnp.bfloat16
S = jax.ShapeDtypeStruct

# (block_m, block_n, block_k, stages, threads): the example's default, the measured-fastest at
# 8192^3 (256 x 192), a tall one, a one-warpgroup one, one whose k-step is 128 (A's K rows two
# 128-byte swizzle atoms: half the stages and barrier rounds per byte), and the swapped product
CONFIGS = {
    "128x256": dict(block_m=128, block_n=256, block_k=64, num_stages=4, threads=256),
    "256x192": dict(block_m=256, block_n=192, block_k=64, num_stages=4, threads=256),
    "256x128": dict(block_m=256, block_n=128, block_k=64, num_stages=4, threads=256),
    "64x128/t128": dict(block_m=64, block_n=128, block_k=64, num_stages=3, threads=128),
    "64x128x128/t128": dict(block_m=64, block_n=128, block_k=128, num_stages=4, threads=128),
    # the swapped product (C^T = B^T A^T): block_n on wgmma's m64, block_m on its n; C's tile written transposed into
    # the staging tile and stored by TMA, as the others
    "16x64x128/swap": dict(block_m=16, block_n=64, block_k=128, num_stages=9, threads=128, swap=True),
}
# M x N x K: divisible; the 1000 x 3000 x 777 (A's rows 1554 bytes: no tensor map);
# N odd (B's and C's rows not 16-byte multiples); every row length odd
SHAPES = [(8192, 8192, 8192), (1000, 3000, 777), (1024, 1001, 512), (999, 777, 555)]


def _ir(m, n, k, cfg, dtype=BF16):
    return gemm_example.gemm(m, n, k, jnp.dtype(dtype), **cfg).trace(S((m, k), dtype), S((k, n), dtype))


def _thread_copied(m, n, k, itemsize=2) -> set[str]:
    return {name for name, row in (("A", k), ("B", n)) if row * itemsize % 16}


@pytest.mark.parametrize("shape", SHAPES, ids=["x".join(map(str, s)) for s in SHAPES])
@pytest.mark.parametrize("config", CONFIGS)
def test_every_config_takes_the_hopper_lowering_at_every_shape(config, shape):
    mod = generate_cuda(_ir(*shape, CONFIGS[config]), "sm_90")
    assert mod.arch == "sm_90a" and not mod.notes, mod.notes
    copied = _thread_copied(*shape)
    src = mod.source
    assert src.count("ts_swizzled_chunk_from_global<2, ") == len(copied)
    maps = np.asarray(mod.tensor_maps, dtype=np.int64).reshape(-1, TENSOR_MAP_FIELDS)
    # one tensor map per tile TMA loads, + C's when the epilogue stores through TMA (rows of 16 bytes; the swapped
    # product's tile too, written transposed into the staging tile)
    n = shape[1]
    assert len(maps) == 2 - len(copied) + (n * 2 % 16 == 0)
    if copied:  # the full barriers count the producer's 128 threads
        assert "ts_mbar_init(&ts_full0[ts_s], 128);" in src and "ts_mbar_expect_tx(" in src
    else:
        assert "ts_mbar_init(&ts_full0[ts_s], 1);" in src and "ts_ptid" not in src
    if not maps.size:
        assert "ts_maps" not in src  # the handler passes no tensor-map parameter then


def test_no_tensor_map_at_all_drops_the_parameter():
    mod = generate_cuda(_ir(300, 201, 101, CONFIGS["64x128/t128"]), "sm_90")  # rows of 202 and 402 bytes
    assert mod.arch == "sm_90a" and len(mod.tensor_maps) == 0
    assert "TsTensorMaps ts_maps" not in mod.source and "ts_maps" not in mod.source


@pytest.mark.parametrize("config,shape", [
    ("256x192", (1000, 3000, 777)),  # the case: A thread-copied, B by TMA, TMA-stored C
    ("128x256", (999, 777, 555)),  # A and B thread-copied, C stored from registers
    ("64x128/t128", (1024, 1001, 512)),  # B thread-copied, one consumer warpgroup
    ("64x128x128/t128", (1000, 3000, 777)),  # A thread-copied in k-steps of two swizzle atoms
    ("16x64x128/swap", (1000, 3000, 777)),  # the swapped product, A thread-copied
    ("16x64x128/swap", (999, 777, 555)),  # both thread-copied, C's odd rows
])
def test_thread_copied_tiles_build_without_spills(session_cache, require_nvcc, config, shape):
    mod = generate_cuda(_ir(*shape, CONFIGS[config]), "sm_90")
    assert mod.arch == "sm_90a", mod.notes
    cubin = compile_cubin(mod.source, arch=mod.arch, entry=mod.entry, nvshmem=False)
    if shape[1] % 2:
        # C's odd row length: the epilogue stores element by element, and ptxas then serialises the
        # wgmma (C7514, a performance note, not an error): spills are what this test checks there
        got = kernel_resources(cubin, mod.entry)
        assert got is not None and got.registers is not None, ptxas_report(cubin)
        assert (got.spill_stores, got.spill_loads) == (0, 0), ptxas_report(cubin)
    else:
        _no_spills(cubin)


# Small ragged shapes for the interpreter (the kernel as written, every block and iteration).
SMALL = [(300, 200, 77), (130, 385, 64), (257, 64, 129)]


@pytest.mark.parametrize("shape", SMALL, ids=["x".join(map(str, s)) for s in SMALL])
@pytest.mark.parametrize("config", ["128x256", "256x192", "64x128/t128", "64x128x128/t128", "16x64x128/swap"])
def test_every_config_computes_the_product_on_the_interpreter(config, shape):
    m, n, k = shape
    rng = np.random.default_rng(hash((config, shape)) % 2**32)
    a = rng.standard_normal((m, k)).astype(jnp.bfloat16)
    b = rng.standard_normal((k, n)).astype(jnp.bfloat16)
    kern = gemm_example.gemm(m, n, k, jnp.dtype(BF16), **CONFIGS[config])
    got = np.asarray(shard_run(kern, mesh_of((1,)), a, b)[0]).astype(np.float32)
    want = np.asarray(jnp.dot(jnp.asarray(a, jnp.float32), jnp.asarray(b, jnp.float32),
                              precision=jax.lax.Precision.HIGHEST))
    np.testing.assert_allclose(got, want, rtol=2e-2, atol=2e-2 * np.abs(want).max())


def test_a_tile_no_lowering_can_hold_is_refused_naming_a_tile_that_fits():
    # sm_80: the mma.sync plan holds at most 128 accumulators per thread (256 x 192 on 256 threads
    # is 192), so the fragment would live in shared memory on the portable path: too big
    with pytest.raises(KernelTraceError) as e:
        generate_cuda(_ir(1000, 3000, 777, CONFIGS["256x192"]), "sm_80")
    msg = str(e.value)
    assert "needs" in msg and "bytes of shared memory" in msg
    assert "256 x 192 float32" in msg and "portable path" in msg and "Use a smaller tile" in msg
    assert "block_m x block_n = 128 x " in msg


@pytest.mark.parametrize("cfg,advice", [
    (dict(block_m=64, block_n=128, block_k=64, num_stages=3, threads=256),
     "M tile 64 is not a multiple of 64 x 2 consumer warpgroups: at block_m=64 take threads=128, or block_m a "
     "multiple of 128"),
    (dict(block_m=128, block_n=192, block_k=64, num_stages=3, threads=384),
     "at block_m=128 take threads=128 or 256, or block_m a multiple of 192"),
    (dict(block_m=128, block_n=160, block_k=64, num_stages=3, threads=256), None),  # taken (64-byte swizzles)
    # three consumer warpgroups and the producer: launch bounds of 512 threads, 128 registers a thread, where one
    # m64n256 wgmma needs 154 (ptxas refused it: C7602) and an m64n192 fits
    (dict(block_m=192, block_n=256, block_k=64, num_stages=2, threads=384),
     "one m64n256 wgmma needs 154 registers, more than the 128 a thread has at threads=384 (+ the producer's 128, "
     "blocks_per_sm=1): take block_n <= 200"),  # one warpgroup would hold 3 x 128 accumulators: none fits
    (dict(block_m=192, block_n=192, block_k=64, num_stages=2, threads=384), None),
    (dict(block_m=64, block_n=256, block_k=64, num_stages=2, threads=128, blocks_per_sm=2),
     "one m64n256 wgmma needs 154 registers, more than the 128 a thread has at threads=128"),
])
def test_a_tile_wgmma_cannot_split_says_which_threads_would(cfg, advice):
    """Where the Hopper lowering cannot take a configuration, the kernel still runs (mma.sync or the portable path,
    with a PerformanceWarning carrying the notes), and the wgmma note says which configuration it would take."""
    mod = generate_cuda(_ir(1024, 1000, 512, cfg), "sm_90")
    notes = " ".join(mod.notes)
    if advice is None:
        assert mod.arch == "sm_90a", notes
    else:
        assert mod.arch != "sm_90a" and advice in notes, notes


@pytest.mark.parametrize("cfg,note", [
    (dict(block_m=128, block_n=256, block_k=64, num_stages=3, threads=128),
     "each consumer thread holds 2 x 128 accumulators of an 128 x 256 tile at threads=128, more than its 240 "
     "registers leave room for: take threads=256 or a smaller tile"),
    (dict(block_m=256, block_n=208, block_k=64, num_stages=3, threads=256),  # 234 of 232: 2 KB of spills measured
     "each consumer thread holds 2 x 104 accumulators of an 256 x 208 tile at threads=256, more than its 232"),
    (dict(block_m=256, block_n=192, block_k=64, num_stages=4, threads=256), None),  # the 8192^3 pick: no spills
])
def test_a_tile_whose_accumulators_spill_runs_on_wgmma_with_a_note(session_cache, require_nvcc, cfg, note):
    """Warpgroups holding more accumulators than their registers: the Hopper lowering still takes the tile (ptxas
    spills around the wgmma instructions) and the kernel's PerformanceWarning says which threads would fit; no note
    where ptxas builds the tile without spills."""
    mod = generate_cuda(_ir(1024, 1024, 1024, cfg), "sm_90")
    assert mod.arch == "sm_90a"
    cubin = compile_cubin(mod.source, arch=mod.arch, entry=mod.entry, nvshmem=False)
    report = ptxas_report(cubin)
    got = kernel_resources(cubin, mod.entry)
    spilled = got is not None and (got.spill_stores > 0 or got.spill_loads > 0)
    if note is None:
        assert not mod.notes and not spilled, (mod.notes, report)
    else:
        assert any(note in n for n in mod.notes) and spilled, (mod.notes, report)


@pytest.mark.parametrize("cfg,advice,fixed", [
    # 6 stages of 128x256: 288 KiB of rings; 4 fit beside the epilogue's staging
    (dict(block_m=128, block_n=256, block_k=64, num_stages=6, threads=256), "take num_stages=4", dict(num_stages=4)),
    (dict(block_m=128, block_n=256, block_k=64, num_stages=6, threads=256, persistent=True), "take num_stages=4",
     dict(num_stages=4)),
    # 128 KiB a stage: not even two
    (dict(block_m=256, block_n=256, block_k=128, num_stages=3, threads=256), "take a smaller tile",
     dict(block_k=32)),
])
def test_stage_rings_that_do_not_fit_are_refused_saying_what_would(cfg, advice, fixed):
    """A configuration whose pipelined loop's stages overflow shared memory is refused with the stage count that
    fits (found by laying the plan out again with shallower rings), and that configuration builds."""
    with pytest.raises(KernelTraceError, match=re.escape(advice)):
        generate_cuda(_ir(2048, 1024, 1000, dict(cfg, num_sms=132) if cfg.get("persistent") else cfg), "sm_90")
    cfg = {**cfg, **fixed}
    mod = generate_cuda(_ir(2048, 1024, 1000, dict(cfg, num_sms=132) if cfg.get("persistent") else cfg), "sm_90")
    assert mod.arch == "sm_90a"


def test_a_wgmma_too_wide_for_the_launch_bounds_no_longer_crashes_nvcc(session_cache, require_nvcc):
    """192x256 on three consumer warpgroups: one m64n256 wgmma needs 154 registers where 512 threads' launch bounds
    give 128, and ptxas stopped with C7602 ("insufficient registers") when the Hopper plan took it. The plan now
    leaves it to mma.sync, which builds."""
    mod = generate_cuda(_ir(1024, 2048, 1024, dict(block_m=192, block_n=256, block_k=64, num_stages=2, threads=384)),
                        "sm_90")
    assert mod.arch != "sm_90a"
    _no_spills(compile_cubin(mod.source, arch=mod.arch, entry=mod.entry, nvshmem=False))
