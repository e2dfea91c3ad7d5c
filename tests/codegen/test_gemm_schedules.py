"""examples/gemm.py's persistent and split-K kernels on the Hopper lowering: the persistent tile
loop (codegen/gemm_sm90_nest.py) is taken, not left to the portable path; its producer follows
the tile loop, stages and phases count across tiles, the last stage of each tile is released, the
epilogue stages through a tile of its own; both build without spills. A T.clear right before its
loop is folded into the loop's first products."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

import jax_tilescale as ts
from jax_tilescale import language as T
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
    mod = _module(m, n, k, block_m=128, block_n=256, num_stages=3, persistent=True, num_sms=132)
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
    assert mod.scratch_bytes > 0  # the tiles' counters, zero at the start and, taken back by each tile's last
    assert "no end of call: the kernel leaves its scratch (arrived) zero itself" in consumer  # split, at the end


@pytest.mark.parametrize("m,n,k,cfg", [
    (16384, 8192, 1024, dict(persistent=True)),
    (1000, 3000, 777, dict(block_m=128, block_n=256, persistent=True)),  # A thread-copied inside the tile loop
    (1000, 3000, 777, dict(persistent=True)),  # the table's two 128x128 blocks per SM, persistent
    (128, 8192, 8192, dict(split_k=4, split_reduce="kernel")),
    (128, 8192, 8192, dict(split_k=4, split_reduce="xla")),
    (200, 3000, 4096, dict(split_k=2, split_reduce="kernel")),  # ragged M and N: the last split's store of C is guarded
    (16384, 8192, 1024, dict(persistent=True, pingpong=True, block_m=128, block_n=192, num_stages=4, mc=True)),
    # partial last groups of sizes that are not powers of two, both orders (a runtime division there spilled, C7507)
    (1000, 3000, 768, dict(persistent=True, pingpong=True, block_m=128, block_n=192, num_stages=4, group_m=3,
                           num_sms=16)),
    (1536, 3072, 768, dict(persistent=True, pingpong=True, block_m=128, block_n=192, num_stages=4, group_m=5,
                           group_columns=True, num_sms=16)),
    # the column-grouped pick with its rows in pairs, multicasting B
    (16384, 8192, 1024, dict(persistent=True, pingpong=True, block_m=128, block_n=192, num_stages=4,
                             group_columns=True, pair_rows=True, mc=True)),
])
def test_schedules_build_without_spills(session_cache, require_nvcc, monkeypatch, m, n, k, cfg):
    from jax_tilescale.codegen import gemm_sm90

    cfg = dict(cfg)
    monkeypatch.setattr(gemm_sm90, "MULTICAST", cfg.pop("mc", False))  # a two-block cluster of the ping-pong pick
    mod = _module(m, n, k, **{"num_sms": 132, **cfg})
    report = _no_spills(compile_cubin(mod.source, arch=mod.arch, entry=mod.entry, nvshmem=False))
    assert "C7510" not in report, report  # no call between the wgmma instructions


@pytest.mark.parametrize("m,n,k,cfg,pair", [
    # the pick at 16384 x 8192 x 1024 (ping-pong): blocks 2c and 2c + 1 take tiles t and t + 1 of every wave, one
    # tile column (B shared), and the last wave's 92 tiles leave no pair half-empty
    (16384, 8192, 1024, dict(persistent=True, pingpong=True, block_m=128, block_n=192, num_stages=4), True),
    (4096, 4096, 1024, dict(persistent=True, block_m=128, block_n=256, num_stages=4), True),  # cooperative
    (2048, 3000, 1024, dict(persistent=True, pingpong=True, block_m=128, block_n=192, num_stages=4, num_sms=6), True),
    # the column-grouped pick: a pair's two tiles are neighbours in one tile row, except where the last group of 3
    # columns carries a pair across rows: no pair; with the rows in pairs both blocks take one tile column (B)
    (16384, 8192, 1024, dict(persistent=True, pingpong=True, block_m=128, block_n=192, num_stages=4,
                             group_columns=True), False),
    (16384, 8192, 1024, dict(persistent=True, pingpong=True, block_m=128, block_n=192, num_stages=4,
                             group_columns=True, pair_rows=True), True),
])
def test_persistent_tile_loops_multicast_only_where_both_blocks_of_a_pair_take_the_tile(monkeypatch, m, n, k, cfg,
                                                                                        pair):
    """With gemm_sm90.MULTICAST a persistent kernel's block pair shares a tile only where the check over every
    wave (the tile loop's iterations and its guard) proves both blocks load it; then each tile's last stage is
    released in both blocks' barriers (a missing remote release would hang the peer's producer)."""
    from jax_tilescale.codegen import gemm_sm90

    monkeypatch.setattr(gemm_sm90, "MULTICAST", True)
    mod = _module(m, n, k, **{"num_sms": 132, **cfg})
    assert mod.arch == "sm_90a" and not mod.notes, mod.notes
    assert ("__cluster_dims__(2, 1, 1)" in mod.source) == pair
    if pair:
        consumer = mod.source.split("consumer warpgroups", 1)[1]
        tail = consumer.split("the producer may refill it for the next run", 1)[0].rsplit("\n", 1)[1]
        assert "ts_mbar_arrive_cluster(" in tail and "ts_crank ^ 1" in tail


@pytest.mark.parametrize("tiles,pair", [(4, True), (3, False)])
def test_a_pair_that_the_tile_loops_guard_splits_is_not_a_cluster(monkeypatch, tiles, pair):
    """Two blocks, each wave's two tiles in one tile row (A shared at every wave). With 3 tiles the second wave
    has one: block 1 skips the tile block 0 would multicast half of into it, so no cluster is built."""
    from jax_tilescale.codegen import gemm_sm90

    monkeypatch.setattr(gemm_sm90, "MULTICAST", True)
    m, n, k = 256, 256, 256

    @ts.kernel(out_shape=S((m, n), jnp.float32), grid=(2,), threads=256)
    def kern(A, B, C):
        A_s = T.alloc_shared((128, 64), BF16)
        B_s = T.alloc_shared((64, 128), BF16)
        C_f = T.alloc_fragment((128, 128), jnp.float32)
        for w in T.serial(2):
            tile = w * 2 + T.program_id(0)
            if tile < tiles:
                T.clear(C_f)
                for ko in T.Pipelined(k // 64, num_stages=3):
                    T.copy(A[T.ds(w * 128, 128), T.ds(ko * 64, 64)], A_s)
                    T.copy(B[T.ds(ko * 64, 64), T.ds(T.program_id(0) * 128, 128)], B_s)
                    T.gemm(A_s, B_s, C_f)
                T.copy(C_f, C[T.ds(w * 128, 128), T.ds(T.program_id(0) * 128, 128)])

    mod = generate_cuda(kern.trace(S((m, k), BF16), S((k, n), BF16)), "sm_90")
    assert mod.arch == "sm_90a" and not mod.notes, mod.notes
    assert ("__cluster_dims__(2, 1, 1)" in mod.source) == pair


def _clear_then_loop(fill_value: float, between: bool):
    """A 128x128 tile GEMM whose accumulator is filled with `fill_value` before its loop, with an
    element-wise update between the two when `between`."""
    m = n = 256
    k = 512

    @ts.kernel(out_shape=S((m, n), jnp.float32), grid=(n // 128, m // 128), threads=256)
    def kern(A, B, C):
        bx, by = T.program_id(0), T.program_id(1)
        A_s = T.alloc_shared((128, 64), BF16)
        B_s = T.alloc_shared((64, 128), BF16)
        C_f = T.alloc_fragment((128, 128), jnp.float32)
        T.fill(C_f, fill_value)
        if between:
            for i, j in T.Parallel(128, 128):
                C_f[i, j] = C_f[i, j] * 2.0
        for ko in T.Pipelined(k // 64, num_stages=3):
            T.copy(A[T.ds(by * 128, 128), T.ds(ko * 64, 64)], A_s)
            T.copy(B[T.ds(ko * 64, 64), T.ds(bx * 128, 128)], B_s)
            T.gemm(A_s, B_s, C_f)
        T.copy(C_f, C[T.ds(by * 128, 128), T.ds(bx * 128, 128)])

    return generate_cuda(kern.trace(S((m, k), BF16), S((k, n), BF16)), "sm_90")


@pytest.mark.parametrize("fill_value,between,folded", [(0.0, False, True), (1.0, False, False), (0.0, True, False)])
def test_clear_right_before_the_loop_is_folded_into_its_first_product(fill_value, between, folded):
    """T.clear right before the loop: no register writes, the first stage's first wgmma overwrites
    (scale-d `ts_i0 > 0`); a fill with another value, or one something reads before the loop, stays."""
    mod = _clear_then_loop(fill_value, between)
    assert mod.arch == "sm_90a" and not mod.notes, mod.notes
    consumer = mod.source.split("consumer warpgroups", 1)[1]
    first_products = [line for line in consumer.splitlines() if "ts_da0_0, ts_db0," in line]
    assert len(first_products) == 1, first_products
    assert first_products[0].rstrip().endswith(", (ts_i0 > 0));" if folded else ", 1);"), first_products[0]
    assert ("no clear" in consumer) == folded
    assert ("= 0.0f;" in consumer) == (not folded and fill_value == 0.0)
    persistent = _module(16384, 8192, 1024, block_m=128, block_n=256, persistent=True, num_sms=132)
    assert "ts_da0_0, ts_db0, (ts_i1 > 0));" in persistent.source  # each tile's clear, folded
