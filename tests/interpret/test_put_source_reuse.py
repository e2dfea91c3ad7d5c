"""A non-blocking put reads its source until it completes: writing the source before the issuing
block's quiet (the GPU may still be sending it, so the peer could receive the new values) is a
race naming both lines; quiet first, a blocking put, or an acknowledgement from the peer that
received the data orders the reuse, and those programs run clean with the right data."""

from __future__ import annotations

import numpy as np
import pytest

from jax_tilescale import language as T
from jax_tilescale.errors import RaceError
from jax_tilescale.ir.nodes import Fill, Put

from .harness import build, launch, random_inputs, run, session, stmt_loc

F32 = np.float32
M, N, BM = 32, 8, 16
NB = M // BM
NPES = 4

# (put, whether it takes a signal), per scope: thread scope (issued by thread 0) and block scope.
PUTS = {
    "thread": (T.putmem_nbi, T.putmem_signal_nbi),
    "block": (T.putmem_nbi_block, T.putmem_signal_nbi_block),
}


def inputs(seed: int) -> list[list[np.ndarray]]:
    x = random_inputs(np.random.default_rng(seed), NPES, (M, N))
    return [[x[p]] for p in range(NPES)]


def reuse_kernel(scope: str, signal: bool, sync: str):
    """Each block copies its rows into a shared tile, puts the tile to the next PE, then fills
    the tile with -1: `sync` says what comes between the put and the fill ("quiet"), or after
    the fill ("none": a quiet; "never": no quiet, the put lands at its signal's wait or the end)."""
    put, put_signal = PUTS[scope]

    def reuse(a, recv):
        bx = T.program_id(0)
        rows = T.ds(bx * BM, BM)
        sig = T.alloc_signal(NB)
        tile = T.alloc_shared((BM, N), F32)
        nxt = (T.get_pe() + 1) % T.get_pe_num()
        T.copy(a[rows, :], tile)
        if signal:
            put_signal(recv[rows, :], tile, sig=sig[bx], value=1, op=T.SignalOp.SET, pe=nxt)
        else:
            put(recv[rows, :], tile, pe=nxt)
        if sync == "quiet":
            T.quiet()
        T.fill(tile, -1.0)  # reuse of the source
        if sync == "none":
            T.quiet()  # too late
        if signal:
            T.signal_wait_until(sig[bx], T.Cmp.EQ, 1)

    return build(reuse, inputs=[((M, N), F32)], outputs=[((M, N), F32)], grid=(NB,), num_pes=NPES)


@pytest.mark.parametrize("delivery", ["late", "eager"])
@pytest.mark.parametrize("signal", [False, True], ids=["put", "put_signal"])
@pytest.mark.parametrize("scope", ["thread", "block"])
@pytest.mark.parametrize("sync", ["none", "never"])
def test_reusing_the_source_before_quiet_is_a_race(scope: str, signal: bool, delivery: str, sync: str) -> None:
    kernel = reuse_kernel(scope, signal, sync)
    res = launch(session(kernel, delivery=delivery), inputs(0))
    messages = {str(e) for e in res.errors}
    assert all(isinstance(e, RaceError) for e in res.errors), [repr(e) for e in res.errors]
    assert len(messages) == 1, "every PE reports the same race"
    msg = messages.pop()
    put_loc, fill_loc = stmt_loc(kernel, Put), stmt_loc(kernel, Fill)
    assert "the shared tile tile of PE " in msg
    assert f"at {put_loc} (delivery of a transfer issued by PE " in msg and "read of tile[0:16, 0:8] on PE " in msg
    assert "write of tile[0:16, 0:8] on PE " in msg and f"by fill at {fill_loc} (PE " in msg
    assert "reads its source until it completes" in msg and "T.quiet()" in msg


@pytest.mark.parametrize("delivery", ["late", "eager"])
@pytest.mark.parametrize("signal", [False, True], ids=["put", "put_signal"])
@pytest.mark.parametrize("scope", ["thread", "block"])
def test_reusing_the_source_after_quiet_is_fine(scope: str, signal: bool, delivery: str) -> None:
    data = inputs(1)
    outs = run(session(reuse_kernel(scope, signal, "quiet"), delivery=delivery), data)
    for p in range(NPES):
        np.testing.assert_array_equal(outs[(p + 1) % NPES][0], data[p][0])  # the data, not the -1s


@pytest.mark.parametrize("scope", ["thread", "block"])
def test_reusing_the_source_of_a_blocking_put_is_fine(scope: str) -> None:
    put = T.putmem if scope == "thread" else T.putmem_block

    def blocking(a, recv):
        rows = T.ds(T.program_id(0) * BM, BM)
        tile = T.alloc_shared((BM, N), F32)
        T.copy(a[rows, :], tile)
        put(recv[rows, :], tile, pe=(T.get_pe() + 1) % T.get_pe_num())
        T.fill(tile, -1.0)  # the source is free once a blocking put returns

    data = inputs(2)
    kernel = build(blocking, inputs=[((M, N), F32)], outputs=[((M, N), F32)], grid=(NB,), num_pes=NPES)
    outs = run(session(kernel), data)
    for p in range(NPES):
        np.testing.assert_array_equal(outs[(p + 1) % NPES][0], data[p][0])


def test_reuse_after_the_receivers_acknowledgement_is_fine() -> None:
    """The receiver saw the put's signal (so its data had arrived, the source read) and answers
    with a signal of its own; the sender reuses its source after that answer, without a quiet."""

    def acknowledged(a, recv, scratch):
        bx = T.program_id(0)
        rows = T.ds(bx * BM, BM)
        got = T.alloc_signal(NB)
        ack = T.alloc_signal(NB)
        me, npes = T.get_pe(), T.get_pe_num()
        src = T.alloc_symmetric((M, N), F32)
        T.copy(a[rows, :], scratch[rows, :])
        T.copy(scratch[rows, :], src[rows, :])
        T.putmem_signal_nbi_block(recv[rows, :], src[rows, :], sig=got[bx], value=1, op=T.SignalOp.SET,
                                  pe=(me + 1) % npes)
        T.signal_wait_until(got[bx], T.Cmp.EQ, 1)  # my predecessor's data is here
        T.signal_op(ack[bx], 1, T.SignalOp.SET, pe=(me + npes - 1) % npes)
        T.signal_wait_until(ack[bx], T.Cmp.EQ, 1)  # my successor has my data
        T.copy(recv[rows, :], src[rows, :])  # reuse of the source, ordered by the acknowledgement

    data = inputs(3)
    kernel = build(acknowledged, inputs=[((M, N), F32)], outputs=[((M, N), F32), ((M, N), F32)], grid=(NB,),
                   num_pes=NPES)
    outs = run(session(kernel), data)
    for p in range(NPES):
        np.testing.assert_array_equal(outs[(p + 1) % NPES][0], data[p][0])
