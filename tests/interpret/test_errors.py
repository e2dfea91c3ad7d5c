"""Planted bugs: each must fail on every PE, promptly, with a message that names what went wrong."""

from __future__ import annotations

import numpy as np
import pytest

from jax_tilescale import language as T
from jax_tilescale.errors import DeadlockError, InterpreterTimeoutError, KernelRuntimeError
from jax_tilescale.interpret import InterpretOptions
from jax_tilescale.ir.nodes import BarrierAll, Copy, Put, SignalWait

from .harness import build, launch, random_inputs, session, stmt_loc

F32 = np.float32
M, N, BM = 64, 8, 16
NB = M // BM


def inputs(npes: int, seed: int = 0) -> list[list[np.ndarray]]:
    x = random_inputs(np.random.default_rng(seed), npes, (M, N))
    return [[x[p]] for p in range(npes)]


@pytest.mark.parametrize("npes", [2, 4, 8])
def test_wait_for_a_signal_nobody_sends_is_a_deadlock(npes: int) -> None:
    def lonely(a, b):
        sig = T.alloc_signal(2)
        T.copy(a, b)
        T.signal_wait_until(sig[1], T.Cmp.EQ, 1)

    kernel = build(lonely, inputs=[((M, N), F32)], outputs=[((M, N), F32)], grid=(1,), num_pes=npes)
    res = launch(session(kernel), inputs(npes))
    loc = stmt_loc(kernel, SignalWait)
    messages = set()
    for err in res.errors:
        assert isinstance(err, DeadlockError)
        messages.add(str(err))
    assert len(messages) == 1, "every PE reports the same deadlock"
    msg = messages.pop()
    for pe in range(npes):
        assert f"PE {pe} block (0,) waits for signal_wait_until(sig[1] == 1): sig[1] is 0, at {loc}" in msg
    assert "no put is in flight" in msg


@pytest.mark.parametrize("npes", [2, 4, 8])
def test_signal_off_by_one_is_a_deadlock(npes: int) -> None:
    """Every PE receives one SET to 1 but waits for 2: the report shows the value that did arrive."""

    def off_by_one(a, recv):
        sig = T.alloc_signal(1)
        rows = T.ds(T.program_id(0) * BM, BM)
        T.putmem_signal_nbi_block(recv[rows, :], a[rows, :], sig=sig[0], value=1, op=T.SignalOp.SET,
                                  pe=(T.get_pe() + 1) % T.get_pe_num())
        T.signal_wait_until(sig[0], T.Cmp.EQ, 2)

    kernel = build(off_by_one, inputs=[((M, N), F32)], outputs=[((M, N), F32)], grid=(NB,), num_pes=npes)
    res = launch(session(kernel), inputs(npes))
    loc = stmt_loc(kernel, SignalWait)
    for err in res.errors:
        assert isinstance(err, DeadlockError)
        msg = str(err)
        for pe in range(npes):
            assert f"PE {pe} blocks (0,), (1,), (2,), (3,) wait for signal_wait_until(sig[0] == 2): " \
                f"sig[0] is 1, at {loc}" in msg


def test_dynamic_pe_out_of_range() -> None:
    """(me * 3) % 5 is not affine, so the verifier cannot see that PE 3 targets PE 4 of 0..3."""

    def bad_target(a, b):
        rows = T.ds(T.program_id(0) * BM, BM)
        T.putmem_nbi_block(b[rows, :], a[rows, :], pe=(T.get_pe() * 3) % 5)

    kernel = build(bad_target, inputs=[((M, N), F32)], outputs=[((M, N), F32)], grid=(NB,), num_pes=4)
    res = launch(session(kernel), inputs(4))
    err = res.errors[3]
    assert type(err) is KernelRuntimeError
    msg = str(err)
    assert "putmem_nbi_block: target PE 4" in msg and "(0..3)" in msg
    assert "(PE 3, block (0,)" in msg and stmt_loc(kernel, Put) in msg
    for pe in range(3):  # the others stop too, naming the PE that failed
        assert isinstance(res.errors[pe], KernelRuntimeError)
        assert str(res.errors[pe]).startswith("PE 3 failed: ") and "target PE 4" in str(res.errors[pe])


def test_dynamic_region_out_of_bounds() -> None:
    def bad_rows(a, b):
        tile = T.alloc_shared((BM, N), F32)
        T.copy(a[T.ds((T.get_pe() * 3) % 5 * BM, BM), :], tile)
        T.copy(tile, b[T.ds(T.program_id(0) * BM, BM), :])  # each block its own rows: no race to report first

    kernel = build(bad_rows, inputs=[((4 * BM, N), F32)], outputs=[((M, N), F32)], grid=(2,), num_pes=4)
    res = launch(session(kernel), inputs(4))
    msg = str(res.errors[3])
    assert "copy: out-of-bounds src a[" in msg and "along dimension 0 of a (extent 64)" in msg
    assert f"is {4 * BM}, and [{4 * BM}, {5 * BM}) leaves [0, {4 * BM})" in msg
    assert "PE 3, block (0,)" in msg and stmt_loc(kernel, Copy) in msg
    assert all(str(res.errors[pe]).startswith("PE 3 failed") for pe in range(3))


def test_a_failing_pe_releases_peers_that_wait_for_it() -> None:
    """PEs 0-2 wait for a signal PE 3 would send; PE 3 fails instead. They must not wait for the timeout."""

    def waits_on_failed_peer(a, recv):
        sig = T.alloc_signal(1)
        me = T.get_pe()
        T.copy(a[T.ds((me * 3) % 5 * BM, BM), :], recv[0:BM, :])  # fails on PE 3 only (row 64 of 64)
        T.putmem_signal_nbi_block(recv[0:BM, :], a[0:BM, :], sig=sig[0], value=1, op=T.SignalOp.SET,
                                  pe=(me + 1) % T.get_pe_num())
        T.signal_wait_until(sig[0], T.Cmp.EQ, 1)

    kernel = build(waits_on_failed_peer, inputs=[((4 * BM, N), F32)], outputs=[((M, N), F32)], grid=(1,), num_pes=4)
    res = launch(session(kernel, timeout_s=30), inputs(4))
    assert res.elapsed_s < 5
    assert "out-of-bounds" in str(res.errors[3])
    assert all(type(res.errors[pe]) is KernelRuntimeError for pe in range(3))


def test_missing_pe_times_out_and_a_late_arrival_fails_fast() -> None:
    def copy_only(a, b):
        T.copy(a, b)

    kernel = build(copy_only, inputs=[((M, N), F32)], outputs=[((M, N), F32)], grid=(1,), num_pes=4)
    sess = session(kernel, timeout_s=0.3)
    data = inputs(4)
    res = launch(sess, data, pes=[0, 1, 2])
    for pe in range(3):
        msg = str(res.errors[pe])
        assert "timed out after 0.3 s" in msg and "PE 3: has not started launch 0" in msg
        assert "PE 0: waits at the start of the launch" in msg
    assert sess.live_launches() == 1
    late = launch(sess, data, pes=[3])
    # The late arrival gets the same report (a timeout concerns the launch, not the PE that noticed it).
    assert isinstance(late.errors[3], InterpreterTimeoutError) and str(late.errors[3]) == str(res.errors[0])
    assert "PE 3 never started the launch" in str(late.errors[3])
    assert late.elapsed_s < 0.3
    assert sess.live_launches() == 0


def test_wrong_inputs_fail_every_pe() -> None:
    def copy_only(a, b):
        T.copy(a, b)

    kernel = build(copy_only, inputs=[((M, N), F32)], outputs=[((M, N), F32)], grid=(1,), num_pes=2)
    data = inputs(2)
    data[1] = [data[1][0].astype(np.float64)]
    res = launch(session(kernel, timeout_s=30), data)
    assert "input a must be float32[64, 8], PE 1 passed float64[64, 8]" in str(res.errors[1])
    assert str(res.errors[0]).startswith("PE 1 failed")
    assert res.elapsed_s < 5


def test_run_rejects_a_pe_outside_the_kernel() -> None:
    def copy_only(a, b):
        T.copy(a, b)

    kernel = build(copy_only, inputs=[((M, N), F32)], outputs=[((M, N), F32)], grid=(1,), num_pes=2)
    with pytest.raises(KernelRuntimeError, match=r"run\(pe=2\)"):
        session(kernel).run(2, 0, inputs(1)[0])


@pytest.mark.parametrize("then", ["barrier", "end"])
def test_deadlock_report_names_barrier_and_kernel_end_waiters(then: str) -> None:
    """Everyone signals PE 0 only: PE 0 gets past its wait, the others never do."""

    def only_pe0_signalled(a, recv):
        sig = T.alloc_signal(1)
        rows = T.ds((T.get_pe() * 2 + T.program_id(0)) * (BM // 2), BM // 2)  # distinct rows: no race on PE 0
        T.putmem_signal_nbi_block(recv[rows, :], a[0:BM // 2, :], sig=sig[0], value=1, op=T.SignalOp.ADD, pe=0)
        T.signal_wait_until(sig[0], T.Cmp.GE, 1)
        if then == "barrier":
            T.barrier_all()

    kernel = build(only_pe0_signalled, inputs=[((M, N), F32)], outputs=[((M, N), F32)], grid=(2,), num_pes=4)
    res = launch(session(kernel), inputs(4))
    msg = str(res.errors[0])
    assert all(isinstance(e, DeadlockError) and str(e) == msg for e in res.errors)
    wait_loc = stmt_loc(kernel, SignalWait)
    if then == "barrier":
        assert f"PE 0 blocks (0,), (1,) wait for barrier_all (2 of 8 arrived), at {stmt_loc(kernel, BarrierAll)}" in msg
    else:
        assert "PE 0 waits for the end of the kernel (all PEs finish, then every put is delivered) (1 of 4 arrived)" \
            in msg
    for pe in (1, 2, 3):
        assert f"PE {pe} blocks (0,), (1,) wait for signal_wait_until(sig[0] >= 1): sig[0] is 0, at {wait_loc}" \
            in msg


def test_options_are_validated() -> None:
    with pytest.raises(ValueError, match="delivery"):
        InterpretOptions(delivery="lazy")
    with pytest.raises(ValueError, match="timeout_s"):
        InterpretOptions(timeout_s=0)


def test_single_pe_runs_on_the_calling_thread() -> None:
    def copy_only(a, b):
        T.copy(a, b)

    kernel = build(copy_only, inputs=[((M, N), F32)], outputs=[((M, N), F32)], grid=(1,), num_pes=1)
    x = inputs(1)[0]
    sess = session(kernel)
    (out,) = sess.run(np.int32(0), np.int32(0), x)
    np.testing.assert_array_equal(out, x[0])
    assert out is not x[0]
