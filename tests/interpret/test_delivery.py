"""Delivery schedules: late delivery makes missing synchronisation visible as poison (NaN).

Late mode delivers a `_nbi` put only at quiet / barrier / kernel end / when nothing else can
progress, so a kernel that reads remote data without the synchronisation that guarantees it
reads poison, every time. `reorder_unfenced` also delivers unfenced puts to one PE newest first.
The racy kernels here run with `detect_races=False` (the race detector would stop them first; it is
tested on the same bugs in test_races.py): these tests are about what the schedules do to them.
"""

from __future__ import annotations

import numpy as np
import pytest

from jax_tilescale import language as T

from .harness import build, random_inputs, run, session

F32 = np.float32
M, N, BM = 64, 8, 16
NB = M // BM


def exchange_kernel(npes: int, sync: bool):
    """Puts rows to the next PE, then (with `sync`: after a barrier) copies what it received."""

    def exchange(a, recv, result):
        rows = T.ds(T.program_id(0) * BM, BM)
        T.putmem_nbi_block(recv[rows, :], a[rows, :], pe=(T.get_pe() + 1) % T.get_pe_num())
        if sync:
            T.barrier_all()
        T.copy(recv[rows, :], result[rows, :])

    return build(exchange, inputs=[((M, N), F32)], outputs=[((M, N), F32)] * 2, grid=(NB,), num_pes=npes)


@pytest.mark.parametrize("npes", [2, 4])
def test_late_delivery_exposes_a_missing_barrier(npes: int) -> None:
    x = random_inputs(np.random.default_rng(npes), npes, (M, N))
    expected = np.roll(x, 1, axis=0)
    buggy = run(session(exchange_kernel(npes, sync=False), detect_races=False), [[x[p]] for p in range(npes)])
    # The puts do complete by the end of the kernel, but the unsynchronised read saw none of them.
    np.testing.assert_array_equal(np.stack([o[0] for o in buggy]), expected)
    assert all(np.isnan(o[1]).all() for o in buggy)
    fixed = run(session(exchange_kernel(npes, sync=True)), [[x[p]] for p in range(npes)])
    np.testing.assert_array_equal(np.stack([o[1] for o in fixed]), expected)


def flagged_kernel(npes: int, between: str):
    """Data put, then `between` (nothing / fence / quiet), then a put-with-signal of a flag row; the
    receiver waits for the flag and reads the data. Without a fence NVSHMEM may deliver the flag first."""

    def flagged(a, recv, flag, result):
        bx = T.program_id(0)
        rows = T.ds(bx * BM, BM)
        sig = T.alloc_signal(NB)
        nxt = (T.get_pe() + 1) % T.get_pe_num()
        T.putmem_nbi_block(recv[rows, :], a[rows, :], pe=nxt)
        if between == "fence":
            T.fence()
        elif between == "quiet":
            T.quiet()
        T.putmem_signal_nbi_block(flag[T.ds(bx, 1), :], a[T.ds(bx * BM, 1), :], sig=sig[bx], value=1,
                                  op=T.SignalOp.SET, pe=nxt)
        T.signal_wait_until(sig[bx], T.Cmp.EQ, 1)
        T.copy(recv[rows, :], result[rows, :])

    shapes = [((M, N), F32), ((NB, N), F32), ((M, N), F32)]
    return build(flagged, inputs=[((M, N), F32)], outputs=shapes, grid=(NB,), num_pes=npes)


@pytest.mark.parametrize(
    ("between", "reorder", "correct"),
    [
        ("none", False, True),  # issue order per PE pair hides the missing fence ...
        ("none", True, False),  # ... reordering unfenced puts exposes it
        ("fence", True, True),
        ("quiet", True, True),
    ],
)
@pytest.mark.parametrize("npes", [2, 4])
def test_reorder_unfenced_exposes_a_missing_fence(npes: int, between: str, reorder: bool, correct: bool) -> None:
    x = random_inputs(np.random.default_rng(7 * npes), npes, (M, N))
    racy = between == "none"  # the flag may overtake the data: a race, whatever the schedule shows
    sess = session(flagged_kernel(npes, between), reorder_unfenced=reorder, detect_races=not racy)
    outs = run(sess, [[x[p]] for p in range(npes)])
    result = np.stack([o[2] for o in outs])
    if correct:
        np.testing.assert_array_equal(result, np.roll(x, 1, axis=0))
    else:
        assert np.isnan(result).all()
    # Whatever the schedule, every put has landed by the end of the kernel.
    np.testing.assert_array_equal(np.stack([o[0] for o in outs]), np.roll(x, 1, axis=0))
    np.testing.assert_array_equal(np.stack([o[1] for o in outs]), np.roll(x, 1, axis=0)[:, ::BM])


def test_eager_delivery_lets_the_unsynchronised_read_see_data_issued_before_it() -> None:
    """With eager delivery, a PE's own put to itself is visible to its next statement (no NaN)."""

    def self_put(a, recv, result):
        rows = T.ds(T.program_id(0) * BM, BM)
        T.putmem_nbi_block(recv[rows, :], a[rows, :], pe=T.get_pe())
        T.copy(recv[rows, :], result[rows, :])

    kernel = build(self_put, inputs=[((M, N), F32)], outputs=[((M, N), F32)] * 2, grid=(NB,), num_pes=2)
    x = random_inputs(np.random.default_rng(3), 2, (M, N))
    eager = run(session(kernel, delivery="eager", detect_races=False), [[x[0]], [x[1]]])
    late = run(session(kernel, detect_races=False), [[x[0]], [x[1]]])
    for p in range(2):
        np.testing.assert_array_equal(eager[p][1], x[p])
        assert np.isnan(late[p][1]).all()
        np.testing.assert_array_equal(late[p][0], x[p])
