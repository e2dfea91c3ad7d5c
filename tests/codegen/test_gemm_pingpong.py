"""Ping-pong consumers of the persistent tile loop (codegen/gemm_sm90_pingpong.py), asked for with
`ts.kernel(pingpong=True)` (examples/gemm.py's `pingpong`): which kernels take it (and the note of
those that do not), the turn protocol the warpgroups follow, each warpgroup's whole tile, stage
releases and staging tile, and that the kernels build without spills or serialised wgmma.
On the GPU: tests/gpu/test_gemm_paths_gpu.py::test_pingpong_persistent_matches_dot."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import pytest

import jax_tilescale as ts
from jax_tilescale import language as T
from jax_tilescale.codegen import generate_cuda
from jax_tilescale.compiler import compile_cubin
from jax_tilescale.errors import KernelTraceError
from tests.codegen.test_compute_codegen import _no_spills
from tests.conftest import load_example

gemm_example = load_example("gemm")
BF16 = jnp.bfloat16
S = jax.ShapeDtypeStruct


def _module(m, n, k, pingpong=True, **cfg):
    kern = gemm_example.gemm(m, n, k, jnp.dtype(BF16), persistent=True, num_sms=132, pingpong=pingpong, **cfg)
    return generate_cuda(kern.trace(S((m, k), BF16), S((k, n), BF16)), "sm_90")


def _consumer(mod) -> str:
    return mod.source.split("consumer warpgroups", 1)[1]


def test_off_by_default():
    mod = _module(16384, 8192, 1024, pingpong=None, block_m=128, block_n=128, num_stages=4)
    assert "ts_named_arrive" not in _consumer(mod) and not mod.notes, mod.notes


def test_each_warpgroup_takes_alternate_whole_tiles():
    mod = _module(16384, 8192, 1024, block_m=128, block_n=128, num_stages=4)  # 8192 tiles: 63 waves
    assert mod.arch == "sm_90a" and not mod.notes, mod.notes
    c = _consumer(mod)
    assert "float ts_acc_C_f[2][64];" in c  # both m64 slabs of the 128x128 tile in each warpgroup
    # the other warpgroup's tiles: their 16 stages counted when the tile exists, nothing waited for
    skip = c.split("if ((int)(ts_i0 % 2) != (threadIdx.x / 128)) {", 1)[1].split("continue;", 1)[0]
    assert re.search(r"if \(.*< \(int64_t\)8192\)\) != 0\) ts_it0 \+= 16;", skip), skip
    assert "ts_mbar_wait" not in skip
    # its turn: after the other's main loop (but not at the first tile); a missing tile passes it on
    turn = c.split("continue;", 1)[1]
    assert turn.index("if (ts_i0 > 0) ts_named_sync(2 + (threadIdx.x / 128), 256);") \
        < turn.index("if (ts_i0 + 1 < 63) ts_named_arrive(2 + 1 - (threadIdx.x / 128), 256);") \
        < turn.index("continue;") < turn.index("ts_mbar_wait(")
    # the turn passes on once every stage of the tile was waited for, before the last products are waited
    # for (EARLY_TURN off, the default), and not inside the loop
    loop = c.split("for (int ts_i1 = 0; ts_i1 < 16; ++ts_i1) {", 1)[1]
    assert "if (ts_i1 == 15) {" not in loop
    loop_end = c.split("ts_mbar_arrive(&ts_empty0[((ts_it0 + ts_i1) - 1) % 4]);", 1)[1]
    assert loop_end.index("ts_named_arrive(2 + 1 - (threadIdx.x / 128), 256);") < loop_end.index("ts_wgmma_wait<0>();")
    # the A slab of each wgmma is the tile's, not the warpgroup's share of it
    assert "ts_da0_1 = ts_da + ((1) * 512u + 0u);" in c and "ts_wg * 2 +" not in c
    # one warpgroup's 4 warps release a stage
    assert "ts_mbar_init(&ts_empty0[ts_s], 4);" in mod.source
    # the epilogue: the warpgroup's own threads, its own staging tile, its first thread stores
    epi = c.split("copy(C_f[:, :]", 1)[1]
    assert "ts_named_sync(1, 256)" not in epi
    assert epi.count("ts_named_sync(4 + threadIdx.x / 128, 128);") == 2
    assert "p_A_s + 65536 + (threadIdx.x / 128) * 32768" in epi  # after the 4-stage A ring, 32 KiB each
    assert "if (threadIdx.x % 128 == 0) {" in epi
    assert "if (threadIdx.x % 128 == 0) ts_bulk_wait_read();  // the last tile's stores" in c
    assert mod.smem_bytes >= 4 * 32768 + 2 * 32768  # the rings and both staging tiles


def test_the_turn_at_the_last_stage_when_asked(monkeypatch):
    """EARLY_TURN on (bench_gemm's `/earlyturn`): the turn passes at the tile's last stage, right after its
    products are committed and before the stage before it is waited for, and not again after the loop."""
    from jax_tilescale.codegen import gemm_sm90_pingpong

    monkeypatch.setattr(gemm_sm90_pingpong, "EARLY_TURN", True)
    c = _consumer(_module(16384, 8192, 1024, block_m=128, block_n=128, num_stages=4))
    loop = c.split("for (int ts_i1 = 0; ts_i1 < 16; ++ts_i1) {", 1)[1]
    early = loop.index("if (ts_i1 == 15) {")
    assert loop.index("ts_wgmma_commit();") < early < loop.index("ts_wgmma_wait<1>();")
    assert loop[early:].index("ts_named_arrive(2 + 1 - (threadIdx.x / 128), 256);") < loop[early:].index("}")
    loop_end = loop.split("ts_mbar_arrive(&ts_empty0[((ts_it0 + ts_i1) - 1) % 4]);", 1)[1]
    assert "ts_named_arrive" not in loop_end.split("ts_wgmma_wait<0>();", 1)[0]


@pytest.mark.parametrize("m,n,k,cfg", [
    (16384, 8192, 1024, dict(block_m=128, block_n=128, num_stages=4)),
    (16384, 8192, 1024, dict(block_m=128, block_n=192, num_stages=3)),  # 192 accumulators per thread
    (16384, 8192, 1024, dict(block_m=128, block_n=192, num_stages=4)),  # the table's: staging boxes in rounds
    (1000, 3000, 777, dict(block_m=128, block_n=128, num_stages=4)),  # A thread-copied, ragged C
    (16384, 8192, 1024, dict(block_m=64, block_n=256, num_stages=4)),  # one m64n256 slab a warpgroup
])
def test_builds_without_spills(m, n, k, cfg):
    mod = _module(m, n, k, **cfg)
    assert "ts_named_arrive" in _consumer(mod)
    _no_spills(compile_cubin(mod.source, arch=mod.arch, entry=mod.entry, nvshmem=False))


@pytest.mark.parametrize("cfg,why", [
    (dict(block_m=128, block_n=256, num_stages=3), "needs 256 accumulators per thread"),
    (dict(block_m=64, block_n=128, threads=128), "256 threads"),
])
def test_not_taken_and_the_header_says_why(cfg, why):
    mod = _module(16384, 8192, 1024, **cfg)
    assert mod.arch == "sm_90a", why
    assert "ts_named_arrive" not in _consumer(mod), why
    assert any("pingpong=True not taken" in note and why in note for note in mod.notes), mod.notes
    assert why in mod.source.split("consumer warpgroups", 1)[0]  # the header's comment


def test_not_taken_without_a_tile_loop():
    kern = gemm_example.gemm(4096, 4096, 4096, jnp.dtype(BF16), block_m=128, block_n=128, pingpong=True)
    mod = generate_cuda(kern.trace(S((4096, 4096), BF16), S((4096, 4096), BF16)), "sm_90")
    assert any("not inside a serial tile loop" in note for note in mod.notes), mod.notes


def test_a_64_row_tile_takes_wgmma_with_ping_pong_and_says_why_not_without():
    """Each ping-pong warpgroup holds whole tiles, so 64-row tiles on two consumer warpgroups plan (one m64 slab a
    warpgroup; exact on the emulator: tests/codegen/test_gemm_sm90_emulated.py); where ping-pong is then not taken
    the shared schedule would split 64 rows over two warpgroups: off wgmma, the notes saying both whys."""
    mod = _module(1000, 3000, 777, block_m=64, block_n=256, num_stages=4)
    assert mod.arch == "sm_90a" and not mod.notes and "ts_named_arrive" in _consumer(mod), mod.notes
    kern = gemm_example.gemm(4096, 4096, 4096, jnp.dtype(BF16), block_m=64, block_n=128, pingpong=True)
    mod = generate_cuda(kern.trace(S((4096, 4096), BF16), S((4096, 4096), BF16)), "sm_90")
    assert mod.arch != "sm_90a", mod.notes
    assert any("not inside a serial tile loop" in note for note in mod.notes), mod.notes
    assert any("M tile 64 is not a multiple of 64 x 2 consumer warpgroups" in note for note in mod.notes), mod.notes


def test_pingpong_must_be_a_bool():
    with pytest.raises(KernelTraceError, match="pingpong must be True or False"):
        @ts.kernel(out_shape=S((8,), jnp.float32), grid=1, pingpong="yes")
        def kern(x, o):
            pass


def _tile_loop_module(fill: float = 0.0, through_shared: bool = False):
    """A ping-pong persistent kernel (8 blocks, 128x128 tiles of 1024 x 1024 x 256) whose tiles start from `fill`
    and, `through_shared`, add a copy of their accumulator through a shared tile before C's store."""
    m, n, k, bm, bn, bk = 1024, 1024, 256, 128, 128, 64
    tiles = (m // bm) * (n // bn)

    @ts.kernel(out_shape=S((m, n), BF16), grid=(8,), threads=256, pingpong=True)
    def kern(A, B, C):
        A_s = T.alloc_shared((bm, bk), BF16)
        B_s = T.alloc_shared((bk, bn), BF16)
        C_s = T.alloc_shared((bm, bn), BF16)
        C_f = T.alloc_fragment((bm, bn), jnp.float32)
        for w in T.serial(tiles // 8):
            tile = w * 8 + T.program_id(0)
            tm, tn = tile // (n // bn), tile % (n // bn)
            T.fill(C_f, fill)
            for ko in T.Pipelined(k // bk, num_stages=3):
                T.copy(A[T.ds(tm * bm, bm), T.ds(ko * bk, bk)], A_s)
                T.copy(B[T.ds(ko * bk, bk), T.ds(tn * bn, bn)], B_s)
                T.gemm(A_s, B_s, C_f)
            if through_shared:
                T.copy(C_f, C_s)
                for i, j in T.Parallel(bm, bn):
                    C_f[i, j] = C_f[i, j] + C_s[i, j]
            T.copy(C_f, C[T.ds(tm * bm, bm), T.ds(tn * bn, bn)])

    return generate_cuda(kern.trace(S((m, k), BF16), S((k, n), BF16)), "sm_90")


def test_not_taken_when_the_tile_body_meets_every_consumer():
    """The plan takes ping-pong only when every statement of the tile body is one it knows to be
    private to a warpgroup; a fill with 1.0 (not folded into the products) is not on that list."""
    assert "ts_named_arrive" in _consumer(_tile_loop_module())  # taken with a clear, as the test kernel's control
    mod = _tile_loop_module(fill=1.0)
    assert mod.arch == "sm_90a" and "ts_named_arrive" not in _consumer(mod)
    assert any("a tile's statements" in note for note in mod.notes), mod.notes


def test_not_taken_when_the_tile_goes_through_a_shared_tile():
    """The accumulator copied into a shared tile that an element-wise epilogue then reads (every other statement one
    a warpgroup could run alone): in ping-pong both warpgroups' tiles would be in that one shared tile at once (and
    the copy's barrier would wait for the other warpgroup, busy in its main loop), so the plan keeps the cooperative
    schedule and the note says why."""
    mod = _tile_loop_module(through_shared=True)
    assert mod.arch == "sm_90a" and "ts_named_arrive" not in _consumer(mod)
    assert any("pingpong=True not taken" in note and "a tile's statements" in note for note in mod.notes), mod.notes
    stored = _consumer(mod).split("] copy(C_f[:, :] -> C_s[:, :])", 1)[1].split("in Parallel(", 1)[0]
    assert "ts_named_sync(1, 256);  // like every block-level statement" in stored  # both warpgroups' tile, then reads


def test_a_failing_check_pauses_instead_of_meeting_the_other_warpgroup():
    """ts_fail's wait: the consumers' barrier over both warpgroups would never complete when one of
    them fails alone, so the ping-pong kernel pauses instead."""
    mod = _module(16384, 8192, 1024, block_m=128, block_n=128, num_stages=4)
    assert "#define TS_FAIL_SYNC() __nanosleep(1000000)" in mod.source
    assert 'bar.sync 1, 256;" ::: "memory")' not in mod.source
