"""The Hopper lowering's generated CUDA run on the CPU (tests/codegen/emulator with shim_sm90.h: mbarriers, named
barriers, TMA boxes through the module's tensor maps, wgmma read through its descriptors), bit for bit against
numpy on integer-valued data (fp32 sums exact): the tile table's configurations (persistent, ping-pong, the
epilogue through the ring, thread-copied producers, split-K partials, the swapped product), the 64- and 32-byte
swizzles, k-steps of 32 and 128, transposed operands, FP8, ragged edges. So the addressing of a change to the Hopper
path is checked without a GPU; speed and the hardware's memory ordering are the GPU's to say (tests/gpu)."""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from jax_tilescale.codegen import (
    gemm_sm90,
    gemm_sm90_edge,
    gemm_sm90_load,
    gemm_sm90_pingpong,
    gemm_sm90_store,
    generate_cuda,
)
from jax_tilescale.codegen.gemm_table import (
    DEFAULT_PERSISTENT,
    MID,
    NARROW,
    NARROW_K128,
    NARROW_WIDE,
    PERSISTENT,
    PERSISTENT_BANDED,
    WIDE,
    GemmConfig,
    swapped_config,
)
from tests.codegen import emulator
from tests.codegen.gemm_cases import (
    SMS,
    Emulated,
    Run,
    example,
    fp8,
    reloaded_per_tile,
    run_emulated,
    started_from_shared,
    user_kernel,
)

S = jax.ShapeDtypeStruct
BF16, F16, F32 = jnp.bfloat16, jnp.float16, jnp.float32
E4M3, E5M2 = np.dtype(ml_dtypes.float8_e4m3fn), np.dtype(ml_dtypes.float8_e5m2)


@pytest.fixture(autouse=True)
def _emulator():
    emulator.require()


CASES: dict[str, Callable[[], Emulated]] = {
    # the tile table's configurations
    "128x128/3": lambda: example(256, 256, 256, GemmConfig(block_m=128, block_n=128, num_stages=3)),
    "DEFAULT 128x256/4, A and B thread-copied, C from registers": lambda: example(200, 300, 130, GemmConfig()),
    "WIDE 256x192 persistent, epilogue through the ring": lambda: example(512, 384, 256, WIDE),
    "WIDE ragged, 6 tiles on 4 blocks": lambda: example(300, 500, 200, WIDE),
    "WIDE ragged, an edge column of 64 of 192 (B's rows 16-byte multiples)": lambda: example(300, 448, 200, WIDE),
    "PERSISTENT 128x192 ping-pong": lambda: example(300, 400, 200, PERSISTENT),
    "PERSISTENT ping-pong, 4 x 4 tiles": lambda: example(512, 768, 256, PERSISTENT),
    "PERSISTENT ping-pong, the edge column (16 of 192) last": lambda: example(
        300, 400, 200, dataclasses.replace(PERSISTENT, edge_last=True)),
    "ping-pong 64x256, one m64 slab a warpgroup, ragged": lambda: example(300, 700, 200, GemmConfig(
        block_m=64, block_n=256, num_stages=4, persistent=True, pingpong=True)),
    "DEFAULT_PERSISTENT 128x256": lambda: example(300, 600, 200, DEFAULT_PERSISTENT),
    "PERSISTENT ping-pong, 5 rows of tiles in groups of 2 (the last partial)": lambda: example(
        600, 400, 128, dataclasses.replace(PERSISTENT, group_m=2)),
    "PERSISTENT ping-pong in column groups of 2 (3 tile columns: the last group partial), ragged": lambda: example(
        300, 500, 200, dataclasses.replace(PERSISTENT, group_m=2, group_columns=True)),
    "PERSISTENT ping-pong in serpentine column groups of 2 (the partial last group walked upwards)": lambda: example(
        600, 500, 128, dataclasses.replace(PERSISTENT, group_m=2, group_columns=True, serpentine=True)),
    "PERSISTENT ping-pong in banded column groups (bands of 3 x 2 tiles, the last ones partial)": lambda: example(
        600, 1000, 128, dataclasses.replace(PERSISTENT, group_m=2, group_columns=True, band_columns=3, band_rows=2)),
    "PERSISTENT ping-pong in column groups of 2, the edge column (16 of 192) last": lambda: example(
        300, 400, 200, dataclasses.replace(PERSISTENT, group_m=2, group_columns=True, edge_last=True)),
    # pair_rows: tiles (2r, c) and (2r + 1, c) one after the other; with 3 tile rows the last row comes alone, last
    "PERSISTENT ping-pong in column groups of 2, rows in pairs (4 x 3 tiles)": lambda: example(  # B by TMA
        512, 448, 200, dataclasses.replace(PERSISTENT, group_m=2, group_columns=True, pair_rows=True)),
    "PERSISTENT ping-pong in column groups of 2, rows in pairs, the third row alone, ragged": lambda: example(
        300, 500, 200, dataclasses.replace(PERSISTENT, group_m=2, group_columns=True, pair_rows=True)),
    # a tile queue (T.tile_queue): a producer thread draws the tickets and hands them over through a ring of words; the
    # emulator runs the blocks one after another, so block 0 takes every tile (the ring wraps many times)
    "PERSISTENT ping-pong in banded column groups from a tile queue, 5 x 5 tiles": lambda: example(
        640, 960, 256, dataclasses.replace(PERSISTENT, group_m=2, group_columns=True, band_columns=2, band_rows=2,
                                           tile_queue=True)),
    "WIDE from a tile queue, ragged (A and B thread-copied: every producer thread reads the ring)": lambda: example(
        600, 700, 200, dataclasses.replace(WIDE, tile_queue=True)),
    # 3 tiles on 3 blocks: a block that drew once more than its tiles and one past them would leave the counter
    # nonzero (the emulator checks left_zero scratch after the grid; with 4 blocks such extra draws happen to cancel)
    "WIDE from a tile queue, 3 tiles on 3 blocks, B thread-copied": lambda: example(
        600, 150, 200, dataclasses.replace(WIDE, tile_queue=True)),
    "DEFAULT_PERSISTENT 128x256 from a tile queue, ragged": lambda: example(
        300, 520, 130, dataclasses.replace(DEFAULT_PERSISTENT, tile_queue=True)),
    "SWAPPED persistent from a tile queue, 40 tokens": lambda: example(40, 512, 256, GemmConfig(
        block_m=64, block_n=128, swap=True, persistent=True, threads=128, tile_queue=True)),
    # the queue's tail only: the first full waves dealt statically, the last drawn (T.tile_queue's static_rounds)
    "PERSISTENT ping-pong in banded column groups, the last wave from a tile queue": lambda: example(
        640, 640, 128, dataclasses.replace(PERSISTENT_BANDED, band_columns=2, band_rows=2, tile_queue=True,
                                           queue_tail=1)),
    "WIDE from a tile queue's last wave, ragged (A and B thread-copied)": lambda: example(
        600, 700, 200, dataclasses.replace(WIDE, tile_queue=True, queue_tail=1)),
    "PERSISTENT ping-pong from a tile queue, the edge column last": lambda: example(
        256, 500, 200, dataclasses.replace(PERSISTENT, tile_queue=True, edge_last=True)),
    "NARROW 64x128/8, every operand thread-copied": lambda: example(100, 300, 777, NARROW),
    "NARROW_K128 64x128x128/4, ragged": lambda: example(100, 300, 777, NARROW_K128),
    "NARROW_K128 split in two": lambda: example(128, 256, 2048, dataclasses.replace(NARROW_K128, split_k=2)),
    "MID 128x128x128/3, one consumer warpgroup, ragged": lambda: example(300, 300, 400, MID),
    # 2 rows of tiles (M ragged), group_m 2: each pair of blocks shares a tile column (B; the multicast switch)
    "NARROW_WIDE 64x256/5": lambda: example(120, 512, 256, NARROW_WIDE),
    # the swapped product (C^T = B^T A^T): B's tile MN-major on wgmma's m64, A's K-major on n8-n40, the transposed
    # tile through a shared one into C (a barrier between the fragment's store and the T.Parallel that reads it)
    "SWAPPED 16 tokens, N and K ragged": lambda: example(16, 200, 300, swapped_config(16)),
    "SWAPPED 1 token on n8, odd K and N: A and B thread-copied": lambda: example(1, 130, 777, swapped_config(1)),
    "SWAPPED 40 tokens on n40, two tile columns": lambda: example(40, 128, 256, swapped_config(40)),
    "SWAPPED 128 columns on two consumer warpgroups, 24 tokens": lambda: example(24, 320, 777, GemmConfig(
        block_m=24, block_n=128, block_k=128, num_stages=3, group_m=1, swap=True)),
    # persistent: 4 blocks walk the tiles; the stage ring carries on from tile to tile through the transposed store
    "SWAPPED persistent 160x128 (XLA's tile at 16384 x 8192 x 1024), two warpgroups, ragged": lambda: example(
        350, 300, 200, GemmConfig(block_m=160, block_n=128, num_stages=4, swap=True, persistent=True)),
    "SWAPPED persistent 160x128, 5 rows of tiles in groups of 2 (the last partial), ragged": lambda: example(
        700, 300, 200, GemmConfig(block_m=160, block_n=128, num_stages=4, group_m=2, swap=True, persistent=True)),
    "SWAPPED persistent 160x128 ping-pong (each warpgroup's tile stored transposed through its own staging tile), "
    "ragged": lambda: example(350, 264, 200, GemmConfig(block_m=160, block_n=128, num_stages=4, swap=True,
                                                        persistent=True, pingpong=True)),
    "SWAPPED persistent ping-pong, 5 rows of tiles in groups of 2, 3 stages": lambda: example(
        700, 300, 200, GemmConfig(block_m=160, block_n=128, num_stages=3, group_m=2, swap=True, persistent=True,
                                  pingpong=True)),
    "SWAPPED persistent ping-pong in rows of 4 tiles (group 1: a pair shares A's tile)": lambda: example(
        350, 504, 200, GemmConfig(block_m=160, block_n=128, num_stages=4, group_m=1, swap=True, persistent=True,
                                  pingpong=True)),
    "SWAPPED persistent 40 tokens a tile on one warpgroup, M, N and K ragged": lambda: example(
        130, 200, 300, GemmConfig(block_m=40, block_n=64, block_k=128, num_stages=3, threads=128, group_m=2,
                                  swap=True, persistent=True)),
    "SWAPPED split in three, ragged, float32 partials transposed": lambda: example(
        13, 200, 1536, dataclasses.replace(swapped_config(13), split_k=3)),
    "split-K 2 partials, 64x128": lambda: example(128, 256, 512, dataclasses.replace(NARROW, split_k=2, num_stages=4)),
    "split-K 3 partials, ragged": lambda: example(100, 200, 384, GemmConfig(block_m=64, block_n=128, block_k=64,
                                                                         num_stages=3, threads=128, split_k=3)),
    "split-K 2 summed in the kernel (a ticket in left_zero scratch)": lambda: example(
        128, 256, 512, dataclasses.replace(NARROW, split_k=2, num_stages=4), split_reduce="kernel"),
    "split-K 4 summed in the kernel, ragged": lambda: example(
        100, 200, 512, GemmConfig(block_m=64, block_n=128, num_stages=3, threads=128, split_k=4),
        split_reduce="kernel"),
    "split-K 2 in a cluster (partials added through a peer's shared tile)": lambda: example(
        128, 256, 512, dataclasses.replace(NARROW, split_k=2, num_stages=4), split_reduce="cluster"),
    "split-K 4 in a cluster, ragged, 64x256": lambda: example(
        100, 300, 512, dataclasses.replace(NARROW_WIDE, split_k=4, num_stages=3), split_reduce="cluster"),
    "two blocks an SM, 128x128/3/t128": lambda: example(256, 256, 128, GemmConfig(
        block_m=128, block_n=128, num_stages=3, threads=128, blocks_per_sm=2)),
    # the layouts: k-steps of 128 and 32, the narrower swizzles, fp16
    "block_k 128 (A rows two atoms)": lambda: example(192, 256, 512, GemmConfig(
        block_m=64, block_n=128, block_k=128, num_stages=4, threads=128)),
    "block_k 32 (A rows 64 bytes: 64-byte swizzle)": lambda: example(256, 256, 192, GemmConfig(
        block_m=128, block_n=128, block_k=32, num_stages=6)),
    "128x160 ping-pong (B rows 320 bytes: 64-byte swizzle)": lambda: example(300, 320, 128, GemmConfig(
        block_m=128, block_n=160, num_stages=4, persistent=True, pingpong=True)),
    "128x208/t128 (B rows 416 bytes: 32-byte swizzle)": lambda: example(256, 416, 128, GemmConfig(
        block_m=128, block_n=208, num_stages=3, threads=128)),
    "fp16 256x128/3": lambda: example(256, 256, 128, GemmConfig(block_m=256, block_n=128, num_stages=3), F16),
    # kernels written with T.gemm's options
    "A^T B^T (A MN-major, B K-major), bk32": lambda: user_kernel(256, 256, 256, bk=32, ta=True, tb=True),
    "B^T bk128, 2 stages": lambda: user_kernel(256, 256, 256, bk=128, tb=True, stages=2),
    "A^T fp16, 4 stages": lambda: user_kernel(128, 256, 128, ta=True, dtype=F16, stages=4),
    "fill 0.5, fp32 out": lambda: user_kernel(128, 128, 128, bm=64, bn=64, threads=128, fill=0.5, out_dtype=F32),
    "clear_accum": lambda: user_kernel(128, 128, 256, bm=64, bn=64, threads=128, clear_accum=True, out_dtype=F32),
    "C rows of 129: stores from registers": lambda: user_kernel(128, 128, 64, bm=64, bn=64, threads=128,
                                                               out_dtype=F32, out_cols=129),
    "ragged M, N, K": lambda: user_kernel(100, 88, 72, bm=64, bn=64, bk=32, threads=128, out_dtype=F32),
    "accumulator from a shared tile a T.Parallel rewrites": lambda: started_from_shared(128, 128, 128),
    "epilogue reads a shared tile each tile reloads": lambda: reloaded_per_tile(256, 256, 128),
    # FP8
    "FP8 e4m3 128x256x128": lambda: fp8(256, 512, 256, E4M3),
    "FP8 e5m2 64x128, ragged": lambda: fp8(200, 300, 160, E5M2, block_m=64, block_n=128, threads=128, num_stages=2),
    "FP8 e4m3 FP8_NARROW 64x128x256/4, ragged K": lambda: fp8(100, 300, 700, E4M3, block_m=64, block_n=128,
                                                              block_k=256, num_stages=4, threads=128, group_m=2),
    "FP8 e5m2 FP8_MID 128x128x128/6 on one warpgroup": lambda: fp8(256, 256, 512, E5M2, block_m=128, block_n=128,
                                                                   num_stages=6, threads=128, group_m=2),
    "FP8 e4m3 swapped, 16 tokens on n16": lambda: fp8(16, 200, 384, E4M3, block_m=16, block_n=64, threads=128,
                                                      num_stages=4, swap=True),
    "FP8 e5m2 swapped, 5 tokens, two warpgroups, ragged K": lambda: fp8(5, 300, 300, E5M2, block_m=8, block_n=128,
                                                                        num_stages=3, swap=True),
}


def run_case(name: str, mutate: Callable[[str], str] | None = None) -> Run:
    return run_emulated(CASES[name](), seed=len(name), mutate=mutate)


@pytest.fixture(scope="module")
def emulated() -> dict[str, Run]:
    emulator.require()  # module-scoped: set up before the autouse check
    with ThreadPoolExecutor(max_workers=max(2, min(8, os.cpu_count() or 2))) as pool:
        return dict(zip(CASES, pool.map(run_case, CASES)))


@pytest.mark.parametrize("name", list(CASES))
def test_the_generated_hopper_kernel_computes_the_product(emulated, name):
    run = emulated[name]
    np.testing.assert_array_equal(run.got.astype(np.float64), run.want.astype(np.float64))


# ---- the emulator is a real check: the same kernels with one thing wrong -------------------------------------


def _swap_b_offsets(src: str) -> str:
    """B's descriptor (MN-major) with its leading and stride byte offsets exchanged."""
    return re.sub(r"(ts_db_ring = ts_wgmma_desc\(ts_smem_addr\(p_B_s\), )(\d+)u, (\d+)u,", r"\1\3u, \2u,", src)


def _a_swizzle_64(src: str) -> str:
    """A's descriptor declaring a 64-byte swizzle where TMA wrote 128."""
    return re.sub(r"(ts_da_ring = ts_wgmma_desc\(ts_smem_addr\(p_A_s\), \d+u, \d+u, )1u\)", r"\g<1>2u)", src)


def _epilogue_rows_swapped(src: str) -> str:
    """The epilogue storing a fragment's two row halves (rows r and r + 8) in each other's place."""
    return src.replace("ts_h * 1024u", "(1 - ts_h) * 1024u")


@pytest.mark.parametrize("mutate", [_swap_b_offsets, _a_swizzle_64, _epilogue_rows_swapped])
def test_a_wrong_layout_gives_a_wrong_product(emulated, mutate):
    name = "128x128/3"
    assert mutate(emulated[name].mod.source) != emulated[name].mod.source  # the pattern is still in the source
    run = run_case(name, mutate)
    assert not np.array_equal(run.got.astype(np.float64), run.want.astype(np.float64))


PINGPONG_SWAPPED = ("SWAPPED persistent 160x128 ping-pong (each warpgroup's tile stored transposed through its own "
                    "staging tile), ragged")


def _transposed_unswizzled(src: str) -> str:
    """The transposed epilogue writing its staging boxes without the row's swizzle (TMA reads them swizzled)."""
    return src.replace(" ^ ((ts_dr * 128u / 128u) % 8u)", "")


def _transposed_one_staging_tile(src: str) -> str:
    """Ping-pong's two warpgroups writing their transposed tiles into one staging tile (the first's)."""
    return re.sub(r"(char\* const ts_box = [^;]*?) \+ \(threadIdx\.x / 128\) \* \d+", r"\1", src)


@pytest.mark.parametrize("mutate", [_transposed_unswizzled, _transposed_one_staging_tile])
def test_a_wrong_transposed_epilogue_gives_a_wrong_product(emulated, mutate):
    """The swapped ping-pong's whole transposed copy (gemm_sm90_store._transposed_lines): each part of its addressing
    matters to the emulated result."""
    assert mutate(emulated[PINGPONG_SWAPPED].mod.source) != emulated[PINGPONG_SWAPPED].mod.source
    run = run_case(PINGPONG_SWAPPED, mutate)
    assert not np.array_equal(run.got.astype(np.float64), run.want.astype(np.float64))


def test_the_swapped_products_store_their_tiles_with_tma(emulated):
    """Every swapped form's transposed copy takes the TMA epilogue (a staging tile written transposed) where TMA can
    store the output (rows a multiple of 16 bytes), and the stores from registers elsewhere; both kinds are among
    the cases."""
    kinds = set()
    for name in CASES:
        if name.startswith("SWAPPED") or "swapped" in name:
            run = emulated[name]
            tma = run.got.shape[1] * run.got.dtype.itemsize % 16 == 0
            staged = "const uint32_t ts_dr = ts_col + 1, ts_dc = ts_row;" in run.mod.source
            assert staged == tma, name
            kinds.add(tma)
    assert kinds == {True, False}


def _between(src: str, statement: str, later: str) -> str:
    """The generated code from `statement` (its IR comment, not the listing at the top) to the next `later`."""
    start = src.index(f"] {statement}    at ")
    return src[start:src.index(later, start)]


def test_a_statement_on_the_accumulator_that_shares_a_tile_is_followed_by_a_barrier(emulated):
    """An accumulator loaded from a shared tile that a T.Parallel then rewrites; an epilogue reading a shared tile
    that the next tile reloads: the consumers meet after the copy or the epilogue, as after every block-level
    statement (without it the emulated C of the first was about half wrong); C's own store, which nothing uses
    after it, is not followed by one."""
    barrier = "ts_named_sync(1, 128);  // like every block-level statement"
    started = emulated["accumulator from a shared tile a T.Parallel rewrites"].mod.source
    assert barrier in _between(started, "copy(D_s[:, :] -> C_f[:, :])", "in Parallel(")
    reloaded = emulated["epilogue reads a shared tile each tile reloads"].mod.source
    assert barrier in _between(reloaded, "for i2, i3 in Parallel(64, 64):", "copy(C_f[:, :] -> C[")
    assert "like every block-level statement" not in emulated["128x128/3"].mod.source


def test_a_kernel_left_with_products_in_flight_is_reported():
    """The accumulator's last wait left out: the emulator says so instead of storing unfinished sums."""
    with pytest.raises(RuntimeError, match="wgmma left in flight"):
        run_case("128x128/3", lambda src: src.replace("ts_wgmma_wait<0>();", "", 1))


def test_a_barrier_that_never_completes_is_reported_not_hung(monkeypatch):
    """One release too few for the ring (the empty barriers expect 9 warps' arrivals of 8): a deadlock, reported
    with the barrier's state within the emulator's wait limit."""
    monkeypatch.setattr(emulator, "WAIT_S", 2)
    with pytest.raises(RuntimeError, match=r"(?s)deadlock in the cluster of block .*block rank 0: mbarrier at \d+ "
                                           r"waited for parity 0: phase 0, 1 of 9 arrivals pending"):
        run_case("128x128/3", lambda src: src.replace("ts_mbar_init(&ts_empty0[ts_s], 8);",
                                                      "ts_mbar_init(&ts_empty0[ts_s], 9);"))


def test_scratch_the_kernel_does_not_leave_zero_is_reported():
    """The in-kernel split-K's last split takes back one count too few: the next launch would find its tickets
    started, and the emulator says so (the interpreter checks the same promise on the kernel's statements)."""
    name = "split-K 2 summed in the kernel (a ticket in left_zero scratch)"
    with pytest.raises(RuntimeError, match="left its left_zero scratch nonzero"):
        run_case(name, lambda src: src.replace("(int)((-2))", "(int)((-1))"))


def test_kernels_the_emulator_does_not_model_are_refused():
    mod = generate_cuda(CASES["128x128/3"]().ir(), "sm_90")
    with pytest.raises(emulator.Unsupported, match="communicates"):
        emulator.build(dataclasses.replace(mod, uses_nvshmem=True))
    with pytest.raises(emulator.Unsupported, match="global scratch it does not leave zero"):
        emulator.build(dataclasses.replace(mod, scratch_bytes=256, scratch_left_zero=False))


# ---- the code generator's switches (bench_gemm.py's /direct, /noring, /earlyturn, /sw64, /sw32, /mc) ------------

SWITCHED = {  # switch -> (module, constant, value, the case run with it)
    "direct: C stored from registers": (gemm_sm90, "TMA_STORE", False, "PERSISTENT 128x192 ping-pong"),
    "direct: a transposed C from registers": (gemm_sm90, "TMA_STORE", False, PINGPONG_SWAPPED),
    "noring: a staging tile of its own": (gemm_sm90, "BORROW_RING", False, "WIDE 256x192 persistent, epilogue through "
                                                                          "the ring"),
    "earlyturn: the turn passed at the last stage": (gemm_sm90_pingpong, "EARLY_TURN", True,
                                                     "PERSISTENT 128x192 ping-pong"),
    "cfirst: C stored at L2's evict_first": (gemm_sm90_store, "OUTPUT_EVICT_FIRST", True,
                                              "PERSISTENT 128x192 ping-pong"),
    "cfirst: the ring's epilogue at evict_first": (gemm_sm90_store, "OUTPUT_EVICT_FIRST", True,
                                                   "WIDE 256x192 persistent, epilogue through the ring"),
    "oplast: operands loaded at L2's evict_last": (gemm_sm90_load, "OPERANDS_EVICT_LAST", True,
                                                   "PERSISTENT 128x192 ping-pong"),
    "pfa1: A's box of the next tile prefetched into L2": (gemm_sm90_load, "A_PREFETCH_AHEAD", 1,
                                                          "PERSISTENT 128x192 ping-pong"),
    "sw64: 64-byte swizzles": (gemm_sm90_load, "WIDEST_SWIZZLE", 64, "PERSISTENT 128x192 ping-pong"),
    "sw32: 32-byte swizzles": (gemm_sm90_load, "WIDEST_SWIZZLE", 32, "DEFAULT_PERSISTENT 128x256"),
    "mc: pairs multicasting B (NARROW)": (gemm_sm90, "MULTICAST", True, "NARROW_WIDE 64x256/5"),
    "mc: pairs multicasting, ping-pong": (gemm_sm90, "MULTICAST", True, "PERSISTENT ping-pong, 4 x 4 tiles"),
    "edge: n64 edge products, ping-pong, the edge column last": (gemm_sm90_edge, "EDGE_LOOP", True,
                                                                "PERSISTENT ping-pong, the edge column (16 of 192) "
                                                                "last"),
    "edge: n64 edge products, ping-pong in column groups, the edge column last": (
        gemm_sm90_edge, "EDGE_LOOP", True, "PERSISTENT ping-pong in column groups of 2, the edge column (16 of 192) "
                                           "last"),
    "edge: n64 edge products, cooperative, the ring's epilogue": (
        gemm_sm90_edge, "EDGE_LOOP", True, "WIDE ragged, an edge column of 64 of 192 (B's rows 16-byte multiples)"),
    "edge: n48 edge products, FP8 (B K-major)": (gemm_sm90_edge, "EDGE_LOOP", True, "FP8 e5m2 64x128, ragged"),
    "edge: n32 edge products, the swapped ping-pong (tokens on n)": (gemm_sm90_edge, "EDGE_LOOP", True,
                                                                     PINGPONG_SWAPPED),
    "mc: pairs multicasting A, swapped ping-pong": (
        gemm_sm90, "MULTICAST", True,
        "SWAPPED persistent ping-pong in rows of 4 tiles (group 1: a pair shares A's tile)"),
    "mc: pairs multicasting, the ring's epilogue": (gemm_sm90, "MULTICAST", True, "WIDE 256x192 persistent, epilogue "
                                                                                  "through the ring"),
    "mc: pairs multicasting B, column groups with rows in pairs": (
        gemm_sm90, "MULTICAST", True, "PERSISTENT ping-pong in column groups of 2, rows in pairs (4 x 3 tiles)"),
}


@pytest.mark.parametrize("switch", list(SWITCHED))
def test_each_switch_of_the_hopper_plan_computes_the_product(monkeypatch, switch):
    """The forms the benchmarks time besides the table's (each a module constant of the code generator) compute the
    same product: a measurement of a wrong kernel is worth nothing."""
    module, constant, value, name = SWITCHED[switch]
    plain = generate_cuda(CASES[name]().ir(), "sm_90").source
    monkeypatch.setattr(module, constant, value)
    run = run_case(name)
    assert run.mod.source != plain  # the switch reaches the generated code
    np.testing.assert_array_equal(run.got.astype(np.float64), run.want.astype(np.float64))


def test_the_edge_loop_is_taken_by_the_edge_tiles_only(monkeypatch):
    """gemm_sm90_edge: with every tile taking the narrower products (the edge test made always true) the emulated
    product is wrong: the emulator sees the products' width, and the test picks the loop."""
    monkeypatch.setattr(gemm_sm90_edge, "EDGE_LOOP", True)
    name = "WIDE ragged, an edge column of 64 of 192 (B's rows 16-byte multiples)"
    src = run_case(name).mod.source
    assert src.count(" + 192 > 448) {") == 1
    run = run_case(name, lambda text: text.replace(" + 192 > 448) {", " + 192 > 0) {"))
    assert not np.array_equal(run.got.astype(np.float64), run.want.astype(np.float64))


def test_a_multicast_box_that_misses_the_peer_is_reported(monkeypatch):
    """Each block of a pair issues half of the B tile they share (64 x 256 bf16) for both; sent to its issuer only,
    each block's stage misses the other half's 16 KiB, and the emulator reports both barriers waiting for them (a
    cluster's blocks run at once, each with its own shared memory)."""
    monkeypatch.setattr(gemm_sm90, "MULTICAST", True)
    monkeypatch.setattr(emulator, "WAIT_S", 2)
    name = "NARROW_WIDE 64x256/5"
    with pytest.raises(RuntimeError, match=r"(?s)deadlock in the cluster.*block rank 0: mbarrier at \d+ waited for "
                                           r"parity 0: phase 0, 0 of 1 arrivals pending, 16384 transaction bytes.*"
                                           r"block rank 1: mbarrier at \d+ waited for parity 0: phase 0, 0 of 1 "
                                           r"arrivals pending, 16384 transaction bytes"):
        run_case(name, lambda src: src.replace(", 0x3);", ", 1u << ts_crank);"))


# ---- the stage trace (codegen/gemm_sm90_trace.py, tools/stage_trace.py) -------------------------------------


@pytest.mark.parametrize("name,cfg,shape,slab_rows", [
    ("ping-pong", PERSISTENT, (512, 768, 256), [0]),
    ("cooperative", GemmConfig(block_m=256, block_n=192, num_stages=4), (512, 384, 256), [0, 128]),
    # each tile computed transposed and stored back: the records lie in C's transpose, a 128-row slab a tile
    ("swapped ping-pong", GemmConfig(block_m=160, block_n=128, num_stages=4, swap=True, persistent=True,
                                     pingpong=True), (640, 512, 256), [0]),
], ids=["pingpong", "cooperative", "swapped-pingpong"])
def test_the_stage_trace_writes_a_consistent_record_per_tile(monkeypatch, name, cfg, shape, slab_rows):
    """The traced build (tools/stage_trace.py's) run by the emulator: every tile and consumer warpgroup writes its
    record over its first accumulators and the rest of C is the product; the fields are consistent with each other,
    and in ping-pong every tile but a block's first waited for its turn (the `turn` field), none in the cooperative
    form. (The clock is the host's: the counts say nothing of the GPU's cycles, tests/gpu/test_stage_trace_gpu.py.)"""
    from jax_tilescale.codegen.gemm_sm90_trace import SLOTS, slot_position
    from tests.conftest import load_tool

    stage_trace = load_tool("stage_trace")
    monkeypatch.setattr(gemm_sm90, "STAGE_TRACE", True)
    m, n, k = shape
    run = run_emulated(example(m, n, k, cfg), seed=m)
    got = run.got.astype(np.float64)
    recs = stage_trace.traced_tiles(got, m, n, cfg)
    tiles = (m // cfg.block_m) * (n // cfg.block_n)
    assert len(recs) == tiles * len(slab_rows)
    assert {(r["tm"], r["tn"]) for r in recs} == {
        (i, j) for i in range(m // cfg.block_m) for j in range(n // cfg.block_n)}
    ksteps = k // cfg.block_k
    for r in recs:
        assert r["first"] <= r["longest"] <= r["wait"] <= r["cycles"], r
        assert r["waited"] <= ksteps and r["mask"] >> ksteps == 0 and bin(r["mask"]).count("1") == r["waited"], r
        assert r["sm"] < (SMS if cfg.persistent else (n // cfg.block_n) * (m // cfg.block_m)), r
    turns = [r["turn"] > 0 for r in recs]
    if cfg.pingpong:  # a block's first tile (warpgroup 0's) starts at once; every later one waits for the other's
        assert len(turns) - sum(turns) == min(SMS, tiles), [r["turn"] for r in recs]
    else:
        assert not any(turns)
    traced = np.zeros(got.shape, bool)
    for tm in range(m // cfg.block_m):
        for tn in range(n // cfg.block_n):
            for r0 in slab_rows:
                for slot in range(SLOTS):
                    i, j = slot_position(slot)
                    if cfg.swap:  # the accumulator's row i is C's column tn * block_n + r0 + i
                        traced[tm * cfg.block_m + j, tn * cfg.block_n + r0 + i] = True
                    else:
                        traced[tm * cfg.block_m + r0 + i, tn * cfg.block_n + j] = True
    np.testing.assert_array_equal(got[~traced], run.want.astype(np.float64)[~traced])


def test_the_diagnostic_probes_change_what_they_say_and_nothing_else(monkeypatch):
    """gemm_sm90_probe's timing diagnostics (bench_gemm's `/nostore`, `/fixk`) on the ping-pong pick's kernel: with
    NO_OUTPUT_STORES the kernel still runs to its end (every wait met) and stores nothing (C stays poisoned); with
    FIRST_K_STEP_ONLY every k-step multiplies the first k-step's boxes, so C is k_steps times that one product."""
    from jax_tilescale.codegen import gemm_sm90_probe

    name = "PERSISTENT 128x192 ping-pong"  # 300 x 400 x 200: 4 k-steps of 64
    monkeypatch.setattr(gemm_sm90_probe, "NO_OUTPUT_STORES", True)
    run = run_case(name)
    assert "ts_tma_store_2d(" not in run.mod.source.split("__global__", 1)[1]
    assert np.isnan(run.got.astype(np.float64)).all()
    monkeypatch.setattr(gemm_sm90_probe, "NO_OUTPUT_STORES", False)
    monkeypatch.setattr(gemm_sm90_probe, "FIRST_K_STEP_ONLY", True)
    run = run_case(name)
    a, b = (x.astype(np.float64) for x in run.inputs)
    want = (4 * a[:, :64] @ b[:64, :]).astype(run.got.dtype)
    assert not np.array_equal(want.astype(np.float64), run.want.astype(np.float64))
    np.testing.assert_array_equal(run.got.astype(np.float64), want.astype(np.float64))
    # one operand only: the other's k-steps walk K as they should (A's first 64 columns against each of B's k-slices)
    for operand in ("a", "b"):
        monkeypatch.setattr(gemm_sm90_probe, "FIRST_K_STEP_ONLY", operand)
        run = run_case(name)
        a, b = (x.astype(np.float64) for x in run.inputs)
        want = 0
        for start in range(0, 200, 64):  # the last k-step 8 wide: TMA's zeros past K in the walking operand
            width = min(64, 200 - start)
            a_cols = slice(0, width) if operand == "a" else slice(start, start + width)
            b_rows = slice(0, width) if operand == "b" else slice(start, start + width)
            want = want + a[:, a_cols] @ b[b_rows]
        np.testing.assert_array_equal(run.got.astype(np.float64), want.astype(run.got.dtype).astype(np.float64))
