"""examples/gemm.py's persistent and split-K kernels on the Hopper lowering: the persistent tile
loop (codegen/gemm_sm90_nest.py) is taken, not left to the portable path; its producer follows
the tile loop, stages and phases count across tiles, the last stage of each tile is released, the
epilogue stages through a tile of its own; both build without spills."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from jax_tilescale.codegen import generate_cuda
from jax_tilescale.compiler import compile_cubin
from tests.codegen.test_compute_codegen import _no_spills
from tests.conftest import load_example

gemm_example = load_example("gemm")
BF16 = jnp.bfloat16
S = jax.ShapeDtypeStruct
SPLIT4 = dict(block_m=128, block_n=256, block_k=64, split_k=4)  # the table's skinny pick before NARROW


def _module(m, n, k, **cfg):
    kern = gemm_example.gemm(m, n, k, jnp.dtype(BF16), **cfg)
    return generate_cuda(kern.trace(S((m, k), BF16), S((k, n), BF16)), "sm_90")


@pytest.mark.parametrize("m,n,k", [(16384, 8192, 1024), (1000, 3000, 777), (999, 777, 555)])
def test_persistent_tile_loop_takes_the_hopper_plan(m, n, k):
    mod = _module(m, n, k, block_m=128, block_n=256, persistent=True, num_sms=132)
    assert mod.arch == "sm_90a" and not mod.notes, mod.notes
    src = mod.source
    producer, consumer = src.split("consumer warpgroups", 1)
    for side in (producer, consumer):  # both count the loop's iterations over the whole kernel
        assert "uint32_t ts_it0 = 0;" in side and "ts_it0 += " in side
    assert "ts_mbar_wait(&ts_full0[ts_s], (uint32_t)(((ts_it0 + ts_i1) / 3) & 1));" in consumer
    assert "ts_mbar_arrive(&ts_empty0[(ts_it0 + " in consumer  # each tile's last stage released
    assert "< (int64_t)" in producer.split("producer warpgroup", 1)[1]  # the producer's copy of the guard
    if n * 2 % 16 == 0:  # C by TMA: a staging tile of its own after the 3-stage A ring
        assert "char* const ts_box = reinterpret_cast<char*>(p_A_s + 49152);" in src
        # each tile's stores stay in flight: the next epilogue waits for their reads before it writes the
        # staging tile, and the consumers wait for the last tile's before they leave
        before_box, after_box = consumer.split("char* const ts_box", 1)
        assert "ts_bulk_wait_read();  // the previous tile's stores" in before_box.rsplit("{", 1)[1]
        after_store = after_box.split("ts_bulk_commit();", 1)[1]
        assert "ts_bulk_wait_read();" not in after_store.split("}", 1)[0]
        assert "ts_bulk_wait_read();  // the last tile's stores" in after_store


def test_split_k_summed_by_xla_takes_the_hopper_plan_with_float32_partials_stored_by_tma():
    mod = _module(128, 8192, 8192, **SPLIT4, split_reduce="xla")  # 4 splits of 128x256 tiles
    assert mod.arch == "sm_90a" and not mod.notes, mod.notes
    assert "ts_tma_store_2d(" in mod.source and "ts_bz" in mod.source


def test_split_k_in_the_kernel_takes_the_hopper_plan_with_its_turnstile_on_the_consumers():
    """The partial store, the ticket and the last split's sum and store run on the consumer
    warpgroups after the loop; the workspace and counter indices are proven in bounds, so no
    check (a call that would serialise the wgmma pipeline) is generated."""
    mod = _module(128, 8192, 8192, **SPLIT4, split_reduce="kernel")  # 4 splits of 128x256 tiles
    assert mod.arch == "sm_90a" and not mod.notes, mod.notes
    consumer = mod.source.split("consumer warpgroups", 1)[1]
    assert "atomicAdd(reinterpret_cast<int*>(" in consumer and "ts_named_sync(1, 256);" in consumer
    assert "ts_elem_index(" not in consumer
    assert mod.scratch_bytes > 0  # the tiles' counters, zero at the start


@pytest.mark.parametrize("m,n,k,cfg", [
    (16384, 8192, 1024, dict(persistent=True)),
    (1000, 3000, 777, dict(block_m=128, block_n=256, persistent=True)),  # A thread-copied inside the tile loop
    (1000, 3000, 777, dict(persistent=True)),  # the table's two 128x128 blocks per SM, persistent
    (128, 8192, 8192, dict(split_k=4, split_reduce="kernel")),
    (128, 8192, 8192, dict(split_k=4, split_reduce="xla")),
    (200, 3000, 4096, dict(split_k=2, split_reduce="kernel")),  # ragged M and N: the last split's store of C is guarded
])
def test_schedules_build_without_spills(session_cache, require_nvcc, m, n, k, cfg):
    mod = _module(m, n, k, num_sms=132, **cfg)
    report = _no_spills(compile_cubin(mod.source, arch=mod.arch, entry=mod.entry, nvshmem=False))
    assert "C7510" not in report, report  # no call between the wgmma instructions
