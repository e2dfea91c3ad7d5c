"""Every transfer primitive on 2 and 4 simulated devices through jax.jit(jax.shard_map(...)),
compared with numpy on random data: putmem / putmem_signal / getmem at thread, warp and block
scope (blocking and `_nbi`), run-time sizes read with T.load, and put_block / get_block /
put_warp / get_warp. The `check_*` functions take any 1-D mesh: tests/gpu runs them on GPUs."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import jax_tilescale as ts
from jax_tilescale import language as T

from .util import F32, assert_equal, mesh_of, per_device, random_rows, shard_run

M, N, BM = 32, 16, 8  # rows per PE, columns, rows per block
NB = M // BM
OUT = jax.ShapeDtypeStruct((M, N), F32)
PES = [2, 4]


def roll(x: np.ndarray, npes: int, shift: int) -> np.ndarray:
    """What PE p holds when every PE sends its block to PE p + shift: the block of PE p - shift."""
    return np.roll(per_device(x, npes), shift, axis=0).reshape(x.shape)


# --- putmem ------------------------------------------------------------------------------------


@ts.kernel(out_shape=(OUT,) * 6, grid=(NB,))
def puts(a, o1, o2, o3, o4, o5, o6):
    """Six outputs, one per form; block bx sends its rows to the next PE."""
    r = T.ds(T.program_id(0) * BM, BM)
    nxt = (T.get_pe() + 1) % T.get_pe_num()
    tile = T.alloc_shared((BM, N), F32)
    T.copy(a[r, :], tile)
    T.putmem(o1[r, :], a[r, :], pe=nxt)
    T.putmem_nbi(o2[r, :], tile, BM * N * 4, nxt)  # TileScale's positional (dst, src, bytes, pe)
    T.putmem_warp(o3[r, :], a[r, :], pe=nxt)
    T.putmem_nbi_warp(o4[r, :], tile, pe=nxt)
    T.putmem_block(o5[r, :], tile, pe=nxt)
    T.putmem_nbi_block(o6[r, 0 : N // 2], a[r, 0 : N // 2], pe=nxt)  # strided: row by row
    T.putmem_nbi_block(o6[r, N // 2 : N], tile[:, N // 2 : N], pe=nxt)


def check_putmem(mesh: jax.sharding.Mesh, seed: int) -> None:
    npes = mesh.size
    x = random_rows(np.random.default_rng(seed), npes, (M, N))
    for out in shard_run(puts, mesh, x):
        assert_equal(out, roll(x, npes, 1))


@pytest.mark.parametrize("npes", PES)
def test_putmem_every_scope_and_form(npes: int) -> None:
    check_putmem(mesh_of((npes,)), npes)


# --- putmem_signal ---------------------------------------------------------------------------------


@ts.kernel(out_shape=(OUT,) * 2, grid=(NB,))
def put_signal(a, recv, seen):
    """Each form signals its own word on the previous PE, which waits for it and then copies what
    arrived (in late delivery the data gets there only because the wait forces it)."""
    bx = T.program_id(0)
    r = T.ds(bx * BM, BM)
    prv = (T.get_pe() + T.get_pe_num() - 1) % T.get_pe_num()
    sig = T.alloc_signal((6, NB))
    q = N // 6  # six column slices, one per form: columns [k*q, (k+1)*q), the last one wider
    forms = [T.putmem_signal, T.putmem_signal_nbi, T.putmem_signal_warp, T.putmem_signal_nbi_warp,
             T.putmem_signal_block, T.putmem_signal_nbi_block]
    for k, put in enumerate(forms):
        cols = slice(k * q, N if k == 5 else (k + 1) * q)
        op, value = (T.SignalOp.ADD, 1) if k % 2 else (T.SignalOp.SET, bx + 7)
        put(recv[r, cols], a[r, cols], sig=sig[k, bx], value=value, op=op, pe=prv)
    for k in range(6):
        T.signal_wait_until(sig[k, bx], T.Cmp.EQ, 1 if k % 2 else bx + 7)
    T.copy(recv[r, :], seen[r, :])


def check_putmem_signal(mesh: jax.sharding.Mesh, seed: int) -> None:
    npes = mesh.size
    x = random_rows(np.random.default_rng(10 + seed), npes, (M, N))
    recv, seen = shard_run(put_signal, mesh, x)
    assert_equal(recv, roll(x, npes, -1))
    assert_equal(seen, roll(x, npes, -1))


@pytest.mark.parametrize("npes", PES)
def test_putmem_signal_every_scope_and_form(npes: int) -> None:
    check_putmem_signal(mesh_of((npes,)), npes)


# --- getmem ------------------------------------------------------------------------------------


@ts.kernel(out_shape=(OUT,) * 3, grid=(NB,))
def gets(a, o1, o2, o3):
    """Each form reads the previous PE's input (staged for peers to read) into an output or a
    shared tile; the `_nbi` forms are complete after the quiet."""
    r = T.ds(T.program_id(0) * BM, BM)
    prv = (T.get_pe() + T.get_pe_num() - 1) % T.get_pe_num()
    tile = T.alloc_shared((BM, N), F32)
    T.getmem(o1[r, 0 : N // 2], a[r, 0 : N // 2], pe=prv)
    T.getmem_warp(o1[r, N // 2 : N], a[r, N // 2 : N], pe=prv)
    T.getmem_block(tile, a[r, :], pe=prv)
    T.copy(tile, o2[r, :])
    T.getmem_nbi(o3[r, 0:4], a[r, 0:4], pe=prv)
    T.getmem_nbi_warp(o3[r, 4:8], a[r, 4:8], pe=prv)
    T.getmem_nbi_block(tile, a[r, :], size=BM * N * 4, pe=prv)
    T.quiet()
    T.copy(tile[:, 8:N], o3[r, 8:N])


def check_getmem(mesh: jax.sharding.Mesh, seed: int) -> None:
    npes = mesh.size
    x = random_rows(np.random.default_rng(20 + seed), npes, (M, N))
    for out in shard_run(gets, mesh, x):
        assert_equal(out, roll(x, npes, 1))


@pytest.mark.parametrize("npes", PES)
def test_getmem_every_scope_and_form(npes: int) -> None:
    check_getmem(mesh_of((npes,)), npes)


# --- run-time sizes ----------------------------------------------------------------------------


@ts.kernel(out_shape=(OUT, OUT), grid=(1,))
def sized(a, counts, sent, back):
    """PE p sends its first counts[p] rows to the next PE (a byte count computed from T.load, as
    TileScale's address + size form), into symmetric scratch; after a barrier each PE copies the
    whole scratch out, so rows nobody sent stay zero. A getmem with a run-time size brings the
    rows back from the next PE."""
    me, n = T.get_pe(), T.get_pe_num()
    nxt = (me + 1) % n
    there = T.alloc_symmetric((M, N), F32)
    here = T.alloc_symmetric((M, N), F32)
    T.putmem_nbi_block(there[0, :], a[0, :], counts[me] * N * 4, nxt)
    T.barrier_all()
    T.copy(there, sent)
    T.getmem_block(here[0, :], there[0, :], size=T.load(counts[me]) * (N * 4), pe=nxt)
    T.copy(here, back)


def check_run_time_sizes(mesh: jax.sharding.Mesh, seed: int) -> None:
    npes = mesh.size
    rng = np.random.default_rng(30 + seed)
    x = random_rows(rng, npes, (M, N))
    counts = rng.integers(0, M + 1, size=npes).astype(np.int32)
    counts[0] = 0  # an empty transfer is fine
    sent, back = shard_run(sized, mesh, x, np.tile(counts, npes))
    xs = per_device(x, npes)
    want_sent, want_back = np.zeros((npes, M, N), F32), np.zeros((npes, M, N), F32)
    for p in range(npes):
        src = (p - 1) % npes
        want_sent[p, : counts[src]] = xs[src][: counts[src]]
        want_back[p, : counts[p]] = xs[p][: counts[p]]
    assert_equal(sent, want_sent.reshape(x.shape))
    assert_equal(back, want_back.reshape(x.shape))


@pytest.mark.parametrize("npes", PES)
def test_run_time_sizes_from_a_loaded_count(npes: int) -> None:
    check_run_time_sizes(mesh_of((npes,)), npes)


# --- direct peer access ------------------------------------------------------------------------


@ts.kernel(out_shape=(OUT,) * 3, grid=(NB,))
def ipc(a, pushed, pulled, via_scratch):
    """put_block / put_warp store into the next PE's output; get_block / get_warp load the previous
    PE's input and symmetric scratch. TileScale's argument order: (src, dst, size, peer)."""
    bx = T.program_id(0)
    r = T.ds(bx * BM, BM)
    me, n = T.get_pe(), T.get_pe_num()
    nxt, prv = (me + 1) % n, (me + n - 1) % n
    tile = T.alloc_shared((BM, N), F32)
    scratch = T.alloc_symmetric((M, N), F32)
    T.copy(a[r, :], tile)
    T.put_block(tile[:, 0 : N // 2], pushed[r, 0 : N // 2], BM * N // 2, nxt)
    T.put_warp(a[r, N // 2 : N], pushed[r, N // 2 : N], dst_pe=nxt)
    T.get_block(a[r, 0:4], pulled[r, 0:4], src_pe=prv)
    T.get_warp(a[r, 4:N], tile[:, 4:N], src_pe=prv)
    T.copy(tile[:, 4:N], pulled[r, 4:N])
    T.copy(a[r, :], scratch[r, :])
    T.sync_all()  # every PE's scratch is written (plain stores: no quiet needed)
    T.get_block(scratch[r, :], via_scratch[r, :], src_pe=prv)


def check_peer_copies(mesh: jax.sharding.Mesh, seed: int) -> None:
    npes = mesh.size
    x = random_rows(np.random.default_rng(40 + seed), npes, (M, N))
    for out in shard_run(ipc, mesh, x):
        assert_equal(out, roll(x, npes, 1))


@pytest.mark.parametrize("npes", PES)
def test_peer_copies_through_nvshmem_ptr(npes: int) -> None:
    check_peer_copies(mesh_of((npes,)), npes)


# --- loads as peers and offsets ----------------------------------------------------------------


@ts.kernel(out_shape=jax.ShapeDtypeStruct((BM, N), F32), grid=(1,))
def permute(a, perm, off, out):
    """PE q sends its row block off[q] to PE perm[q] (T.load values as a target and an offset)."""
    me = T.get_pe()
    T.putmem_nbi_block(out, a[T.ds(off[me] * BM, BM), :], pe=T.load(perm[me]))


def check_loaded_peers(mesh: jax.sharding.Mesh, seed: int) -> None:
    npes = mesh.size
    rng = np.random.default_rng(50 + seed)
    x = random_rows(rng, npes, (M, N))
    perm = rng.permutation(npes).astype(np.int32)
    off = rng.integers(0, NB, size=npes).astype(np.int32)
    (out,) = shard_run(permute, mesh, x, np.tile(perm, npes), np.tile(off, npes))
    xs, want = per_device(x, npes), np.zeros((npes, BM, N), F32)
    for q in range(npes):
        want[perm[q]] = xs[q][off[q] * BM : (off[q] + 1) * BM]
    assert_equal(out, want.reshape(npes * BM, N))


@pytest.mark.parametrize("npes", PES)
def test_loaded_values_pick_peers_and_rows(npes: int) -> None:
    check_loaded_peers(mesh_of((npes,)), npes)
