"""Two blocks per SM (`ts.kernel(blocks_per_sm=2)`, examples/gemm.py's 128x128 pick at one-wave
shapes, codegen/gemm_table.PAIRED): the launch bounds ask for two blocks, the Hopper plan's
setmaxnreg split takes half the register file, ptxas fits each thread in 65536 / (2 x 256)
registers without spills, the shared memory fits twice in an SM (else a clear refusal), and the
mma.sync plan shortens its ring to its half of the SM."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import pytest

import jax_tilescale as ts
from jax_tilescale import language as T
from jax_tilescale.codegen import generate_cuda
from jax_tilescale.codegen.gemm_table import PAIRED
from jax_tilescale.codegen.layout import SHARED_BYTES_PER_SM, blocks_fitting
from jax_tilescale.compiler import compile_cubin
from jax_tilescale.errors import KernelTraceError
from tests.codegen.test_compute_codegen import _no_spills
from tests.conftest import load_example

gemm_example = load_example("gemm")
BF16 = jnp.bfloat16
S = jax.ShapeDtypeStruct
PAIRED_ARGS = dict(block_m=PAIRED.block_m, block_n=PAIRED.block_n, block_k=PAIRED.block_k,
                   num_stages=PAIRED.num_stages, threads=PAIRED.threads, blocks_per_sm=2)


def _module(m, n, k, arch="sm_90", **cfg):
    kern = gemm_example.gemm(m, n, k, jnp.dtype(BF16), num_sms=132, **cfg)
    return generate_cuda(kern.trace(S((m, k), BF16), S((k, n), BF16)), arch)


def test_paired_blocks_at_a_one_wave_shape():
    mod = _module(2048, 2048, 2048, **PAIRED_ARGS)  # asked for: the table no longer picks it (gemm_table.py)
    assert mod.arch == "sm_90a" and not mod.notes, mod.notes
    assert mod.grid == (16, 16, 1)  # 256 tiles of 128 x 128: one wave of two per SM
    src = mod.source
    assert "__launch_bounds__(256, 2)" in src  # 128 consumer + 128 producer threads, two blocks
    # the block's share is 128 registers per thread: the producer gives 88 of its to the consumers
    assert "ts_setmaxnreg_dec<40>();" in src and "ts_setmaxnreg_inc<216>();" in src
    assert "ts_tma_store_2d(" in src  # the epilogue still goes through the freed ring and TMA
    assert 2 * (mod.smem_bytes + 1024) <= SHARED_BYTES_PER_SM[90] and blocks_fitting(mod.smem_bytes, "sm_90") == 2


def test_one_block_per_sm_keeps_its_launch_bounds_and_registers():
    src = _module(4096, 4096, 4096).source  # the table's 128x256 (no pairing): as before
    assert "__launch_bounds__(384, 1)" in src and "ts_setmaxnreg_inc<232>();" in src


@pytest.mark.parametrize("m,n,k", [(2048, 2048, 2048), (1000, 3000, 777), (999, 777, 555)])
def test_paired_blocks_fit_their_register_share_without_spills(session_cache, require_nvcc, m, n, k):
    mod = _module(m, n, k, **PAIRED_ARGS)
    report = _no_spills(compile_cubin(mod.source, arch=mod.arch, entry=mod.entry, nvshmem=False))
    regs = int(re.search(r"Used (\d+) registers", report).group(1))
    assert regs <= 65536 // (2 * mod.threads), report


def test_shared_memory_that_does_not_fit_twice_is_refused_with_the_way_out():
    # 128x128 tiles on one warpgroup with 4 stages: 128 KiB per block, one fits in an SM
    with pytest.raises(KernelTraceError, match=r"blocks_per_sm=2 but needs \d+ bytes of shared memory per block; "
                                               r"2 blocks fit in an SM of sm_90 with at most 115712 each: .*"
                                               r"or blocks_per_sm=1"):
        _module(2048, 2048, 2048, block_m=128, block_n=128, block_k=64, num_stages=4, threads=128, blocks_per_sm=2)


def test_a_wgmma_too_wide_for_two_blocks_registers_says_so_and_takes_another_path():
    # 128x256 tiles on two warpgroups, two blocks an SM: 80 registers a thread, where one m64n256 wgmma needs 154
    mod = _module(2048, 2048, 2048, block_m=128, block_n=256, block_k=64, num_stages=4, blocks_per_sm=2)
    assert mod.arch != "sm_90a"
    assert any("one m64n256 wgmma needs 154 registers, more than the 80 a thread has" in n and "blocks_per_sm=1" in n
               for n in mod.notes), mod.notes


def test_mma_sync_plan_shortens_its_ring_to_half_an_sm():
    mod = _module(2048, 2048, 2048, arch="sm_80", **PAIRED_ARGS)
    assert "__launch_bounds__(128, 2)" in mod.source
    assert any("2 stages instead of 3" in note for note in mod.notes), mod.notes
    assert blocks_fitting(mod.smem_bytes, "sm_80") >= 2


def test_portable_kernels_take_the_launch_bound_too():
    @ts.kernel(out_shape=S((256,), jnp.float32), grid=2, threads=128, blocks_per_sm=4)
    def twice(x, y):
        for i in T.Parallel(128):
            y[T.program_id(0) * 128 + i] = x[T.program_id(0) * 128 + i] * 2.0

    assert "__launch_bounds__(128, 4)" in generate_cuda(twice.trace(S((256,), jnp.float32))).source


@pytest.mark.parametrize("bps,threads", [(0, 128), (3, 1024), (True, 128), (2.0, 128)])
def test_blocks_per_sm_out_of_range_is_refused(bps, threads):
    @ts.kernel(out_shape=S((256,), jnp.float32), grid=2, threads=threads, blocks_per_sm=bps)
    def copy(x, y):
        T.copy(x, y)

    with pytest.raises(KernelTraceError, match="blocks_per_sm must be an int from 1 to"):
        copy.trace(S((256,), jnp.float32))
