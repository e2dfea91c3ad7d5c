"""Correct kernels give the numpy answer on 2, 4 and 8 simulated PEs, in both delivery modes."""

from __future__ import annotations

import numpy as np
import pytest

from jax_tilescale import language as T

from .harness import build, launch, random_inputs, run, session

F32 = np.float32
M, N, BM = 64, 8, 16
NB = M // BM
PES = [2, 4, 8]


def shift_kernel(npes: int):
    def shift(a, b):
        rows = T.ds(T.program_id(0) * BM, BM)
        tile = T.alloc_shared((BM, N), F32)
        T.copy(a[rows, :], tile)
        T.putmem_nbi_block(b[rows, :], tile, pe=(T.get_pe() + 1) % T.get_pe_num())

    return build(shift, inputs=[((M, N), F32)], outputs=[((M, N), F32)], grid=(NB,), num_pes=npes)


@pytest.mark.parametrize("delivery", ["late", "eager"])
@pytest.mark.parametrize("npes", PES)
def test_shift_matches_roll(npes: int, delivery: str) -> None:
    x = random_inputs(np.random.default_rng(npes), npes, (M, N))
    outs = run(session(shift_kernel(npes), delivery=delivery), [[x[p]] for p in range(npes)])
    np.testing.assert_array_equal(np.stack([o[0] for o in outs]), np.roll(x, 1, axis=0))


@pytest.mark.parametrize("npes", PES)
def test_ring_allgather_matches_concatenate(npes: int) -> None:
    def allgather(shard, gathered):
        bx, me = T.program_id(0), T.get_pe()
        tile = T.alloc_shared((BM, N), F32)
        T.copy(shard[T.ds(bx * BM, BM), :], tile)
        mine = gathered[T.ds(me * M + bx * BM, BM), :]
        T.copy(tile, mine)  # own rows: a local store
        for k in range(1, npes):  # the same rows on every other PE
            T.putmem_nbi_block(mine, tile, pe=(me + k) % T.get_pe_num())

    kernel = build(allgather, inputs=[((M, N), F32)], outputs=[((npes * M, N), F32)], grid=(NB,), num_pes=npes)
    x = random_inputs(np.random.default_rng(10 + npes), npes, (M, N))
    outs = run(session(kernel), [[x[p]] for p in range(npes)])
    expected = np.concatenate(list(x), axis=0)
    for p in range(npes):
        np.testing.assert_array_equal(outs[p][0], expected)


def producer_consumer_kernel(npes: int, op: T.SignalOp):
    """Each block sends its rows to the next PE with a signal; the receiver copies them once signalled.
    SET: one word per block, waited for == 1. ADD: one word for all blocks, waited for == NB."""

    def producer_consumer(a, recv, result):
        bx = T.program_id(0)
        rows = T.ds(bx * BM, BM)
        sig = T.alloc_signal(NB)
        word, target = (sig[bx], 1) if op is T.SignalOp.SET else (sig[0], NB)
        T.putmem_signal_nbi_block(recv[rows, :], a[rows, :], sig=word, value=1, op=op,
                                  pe=(T.get_pe() + 1) % T.get_pe_num())
        T.signal_wait_until(word, T.Cmp.EQ, target)
        T.signal_wait_until(word, T.Cmp.GE, target)  # waiting does not consume the signal
        T.copy(recv[rows, :], result[rows, :])

    return build(producer_consumer, inputs=[((M, N), F32)], outputs=[((M, N), F32)] * 2, grid=(NB,), num_pes=npes)


@pytest.mark.parametrize("op", [T.SignalOp.SET, T.SignalOp.ADD])
@pytest.mark.parametrize("delivery", ["late", "eager"])
@pytest.mark.parametrize("npes", PES)
def test_put_signal_producer_consumer(npes: int, delivery: str, op: T.SignalOp) -> None:
    x = random_inputs(np.random.default_rng(20 + npes), npes, (M, N))
    outs = run(session(producer_consumer_kernel(npes, op), delivery=delivery), [[x[p]] for p in range(npes)])
    expected = np.roll(x, 1, axis=0)
    np.testing.assert_array_equal(np.stack([o[0] for o in outs]), expected)
    # In late mode the data reaches `recv` only because the wait forced its delivery.
    np.testing.assert_array_equal(np.stack([o[1] for o in outs]), expected)


@pytest.mark.parametrize("npes", PES)
def test_barrier_completes_puts(npes: int) -> None:
    def exchange(a, recv, result):
        rows = T.ds(T.program_id(0) * BM, BM)
        T.putmem_nbi_block(recv[rows, :], a[rows, :], pe=(T.get_pe() + npes - 1) % T.get_pe_num())
        T.barrier_all()
        T.copy(recv[rows, :], result[rows, :])

    kernel = build(exchange, inputs=[((M, N), F32)], outputs=[((M, N), F32)] * 2, grid=(NB,), num_pes=npes)
    x = random_inputs(np.random.default_rng(30 + npes), npes, (M, N))
    outs = run(session(kernel), [[x[p]] for p in range(npes)])
    np.testing.assert_array_equal(np.stack([o[1] for o in outs]), np.roll(x, -1, axis=0))


def test_consecutive_launches_start_from_zeroed_signals() -> None:
    npes = 4
    sess = session(producer_consumer_kernel(npes, T.SignalOp.ADD))
    rng = np.random.default_rng(40)
    for _ in range(3):  # a stale signal (NB from the last launch) would make == NB never hold again
        x = random_inputs(rng, npes, (M, N))
        outs = run(sess, [[x[p]] for p in range(npes)])
        np.testing.assert_array_equal(np.stack([o[1] for o in outs]), np.roll(x, 1, axis=0))
    assert sess.live_launches() == 0


def test_teams_are_separate_launches() -> None:
    """Four devices, two teams of two PEs: each team shifts within itself."""
    sess = session(shift_kernel(2))
    x = random_inputs(np.random.default_rng(50), 4, (M, N))
    results: dict[int, list] = {}
    import threading

    def device(d: int) -> None:
        results[d] = sess.run(d % 2, d // 2, [x[d]])

    threads = [threading.Thread(target=device, args=(d,)) for d in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert sorted(results) == [0, 1, 2, 3]
    for d in range(4):
        np.testing.assert_array_equal(results[d][0], x[d ^ 1])


def test_unwritten_outputs_are_poisoned() -> None:
    def half(a, b_float, b_int):
        T.copy(a[0:BM, :], b_float[0:BM, :])

    kernel = build(half, inputs=[((M, N), F32)], outputs=[((M, N), F32), ((M, N), np.int32)], grid=(1,), num_pes=2)
    x = random_inputs(np.random.default_rng(60), 2, (M, N))
    res = launch(session(kernel, check_coverage=False), [[x[0]], [x[1]]])  # the coverage check would refuse it
    for p, (out_f, out_i) in enumerate(res.check()):
        np.testing.assert_array_equal(out_f[:BM], x[p][:BM])
        assert np.isnan(out_f[BM:]).all()
        assert (out_i == np.iinfo(np.int32).max).all()
