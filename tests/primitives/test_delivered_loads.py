"""T.load of data a peer delivered (symmetric scratch, a signal word), after the wait that delivered
it, used as a run-time byte count, an offset, a PE, a wait value, inside T.Parallel and in per-thread
code; through jax.jit(jax.shard_map(...)) on 2, 4 and 8 simulated devices, compared with numpy. The
`check_*` functions take any 1-D mesh: tests/gpu runs them on GPUs (references on the host, no XLA
collective)."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import jax_tilescale as ts
from jax_tilescale import language as T

from .util import F32, assert_equal, mesh_of, per_device, random_rows, shard_run

I32 = np.int32
M, N, BM = 32, 16, 8  # rows per PE, columns, rows per block
NB = M // BM
OUT = jax.ShapeDtypeStruct((M, N), F32)
SEEN = jax.ShapeDtypeStruct((NB, 2), I32)


@ts.kernel(out_shape=(OUT, OUT, SEEN), grid=(NB,))
def delivered(x, request, sent, shifted, seen):
    """PE p sends `request` = [rows n, first row s, PE q] to q = p + 1, which uses what it received:
    rows [s, s + n) of its x into rows [0, n) of `sent` (through its symmetric inbox, a put with a
    run-time size, offset and PE), its x rolled by s into `shifted` (T.Parallel), and in each block's
    thread 0 the loaded n and the signal word that announced the rows (per-thread code)."""
    bx = T.program_id(0)
    me, npes = T.get_pe(), T.get_pe_num()
    box = T.alloc_symmetric((3,), I32)
    inbox = T.alloc_symmetric((M, N), F32)  # zero at launch: rows past n stay zero
    sig = T.alloc_signal(2)
    if bx == 0:
        T.putmem_signal_nbi(box[0:3], request[0:3], sig=sig[0], value=1, op=T.SignalOp.SET, pe=(me + 1) % npes)
    T.signal_wait_until(sig[0], T.Cmp.EQ, 1)  # every block: the request is here, it may be loaded
    n, start = T.load(box[0]), T.load(box[1])
    if bx == 0:  # size, offsets and PE from the loaded request; the signal value too
        T.putmem_signal_block(inbox[0, :], x[start, :], n * N * 4, sig[1], n + 1, T.SignalOp.SET, T.load(box[2]))
    T.signal_wait_until(sig[1], T.Cmp.EQ, T.load(box[0]) + 1)  # a wait value from loaded data
    rows = T.ds(bx * BM, BM)
    T.copy(inbox[rows, :], sent[rows, :])
    for i, j in T.Parallel(BM, N):
        shifted[bx * BM + i, j] = x[(bx * BM + i + T.load(box[1])) % M, j]
    if T.thread_id() == 0:
        seen[bx, 0] = T.load(box[0])
        seen[bx, 1] = T.load(sig[1])  # a signal word, read after the wait for it


def check_delivered_loads(mesh: jax.sharding.Mesh, seed: int) -> None:
    npes = mesh.size
    rng = np.random.default_rng(40 + seed)
    x = random_rows(rng, npes, (M, N))
    request = np.zeros((npes, 3), I32)
    request[:, 0] = rng.integers(0, M // 2 + 1, npes)
    request[0, 0] = 0  # an empty transfer
    request[:, 1] = rng.integers(0, M // 2, npes)
    request[:, 2] = (np.arange(npes) + 1) % npes  # the receiver itself
    sent, shifted, seen = shard_run(delivered, mesh, x, request.reshape(-1))
    xs = per_device(x, npes)
    want_sent, want_shifted = np.zeros((npes, M, N), F32), np.zeros((npes, M, N), F32)
    want_seen = np.zeros((npes, NB, 2), I32)
    for q in range(npes):
        n, s, _ = request[(q - 1) % npes]
        want_sent[q, :n] = xs[q][s:s + n]
        want_shifted[q] = np.roll(xs[q], -s, axis=0)
        want_seen[q] = [n, n + 1]
    assert_equal(sent, want_sent.reshape(x.shape))
    assert_equal(shifted, want_shifted.reshape(x.shape))
    assert_equal(seen, want_seen.reshape(npes * NB, 2))


@pytest.mark.parametrize("npes", [2, 4, 8])
def test_delivered_counts_drive_a_transfer_parallel_and_per_thread_code(npes: int) -> None:
    check_delivered_loads(mesh_of((npes,)), npes)

