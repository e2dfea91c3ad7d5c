"""InterpretOptions.timeout_s bounds the whole call of every PE, compute included, and tells a
slow kernel (InterpreterTimeoutError: still running, where each PE was, how to raise the limit)
from a blocked one (DeadlockError, at once)."""

from __future__ import annotations

import numpy as np

from jax_tilescale import language as T
from jax_tilescale.errors import DeadlockError, InterpreterTimeoutError
from jax_tilescale.ir.nodes import Fill, Loop, SignalWait

from .harness import build, launch, random_inputs, run, session, stmt_loc

F32 = np.float32
M, N = 16, 8
LONG = 10**9  # iterations no test waits for


def inputs(npes: int, seed: int = 0) -> list[list[np.ndarray]]:
    x = random_inputs(np.random.default_rng(seed), npes, (M, N))
    return [[x[p]] for p in range(npes)]


def one_message(res) -> str:
    messages = {str(e) for e in res.errors}
    assert all(isinstance(e, InterpreterTimeoutError) for e in res.errors), [repr(e) for e in res.errors]
    assert len(messages) == 1, "every PE reports the same timeout"
    return messages.pop()


def test_every_pe_in_a_long_compute_loop_times_out_as_still_running() -> None:
    def spin(a, b):
        tile = T.alloc_shared((M, N), F32)
        rows = T.ds(T.program_id(0) * (M // 2), M // 2)
        T.copy(a[rows, :], b[rows, :])
        for _ in T.serial(LONG):
            T.fill(tile, 1.0)

    kernel = build(spin, inputs=[((M, N), F32)], outputs=[((M, N), F32)], grid=(2,), num_pes=2)
    res = launch(session(kernel, timeout_s=0.5), inputs(2))
    assert res.elapsed_s < 5
    msg = one_message(res)
    assert "timed out after 0.5 s" in msg and "the kernel was still running" in msg
    assert "deadlock" not in msg.replace("not a deadlock", "")
    loop_loc = str(kernel.body[-1].loc)
    assert isinstance(kernel.body[-1], Loop)
    for pe in range(2):
        line = next(ln for ln in msg.splitlines() if ln.startswith(f"  PE {pe} "))
        assert f"blocks (0,), (1,) running, at fill ({kernel.body[-1].body[0].loc}), iteration " in line
        assert f" of {LONG} of the loop at {loop_loc}" in line
    assert "InterpretOptions(timeout_s=...)" in msg


def test_a_pe_that_finished_early_and_one_still_looping() -> None:
    def uneven(a, b):
        tile = T.alloc_shared((M, N), F32)
        T.copy(a, b)
        with T.If(T.get_pe() == 1):
            for _ in T.serial(LONG):
                T.fill(tile, 2.0)

    kernel = build(uneven, inputs=[((M, N), F32)], outputs=[((M, N), F32)], grid=(1,), num_pes=2)
    res = launch(session(kernel, timeout_s=0.5), inputs(2))
    assert res.elapsed_s < 5
    msg = one_message(res)
    assert "the kernel was still running" in msg
    assert "  PE 0 waits for the end of the kernel" in msg
    fill = [s for s in kernel.body if not isinstance(s, Fill)][-1].then_body[0].body[0]
    assert f"  PE 1 block (0,) running, at fill ({fill.loc}), iteration " in msg


def test_a_deadlock_after_a_loop_is_still_reported_at_once() -> None:
    def loop_then_stuck(a, b):
        sig = T.alloc_signal(1)
        tile = T.alloc_shared((M, N), F32)
        T.copy(a, b)
        for _ in T.serial(200):
            T.fill(tile, 3.0)
        T.signal_wait_until(sig[0], T.Cmp.EQ, 1)  # nobody signals

    kernel = build(loop_then_stuck, inputs=[((M, N), F32)], outputs=[((M, N), F32)], grid=(1,), num_pes=2)
    res = launch(session(kernel, timeout_s=60), inputs(2))
    assert res.elapsed_s < 10  # not the 60 s limit
    assert all(isinstance(e, DeadlockError) for e in res.errors)
    assert f"waits for signal_wait_until(sig[0] == 1): sig[0] is 0, at {stmt_loc(kernel, SignalWait)}" \
        in str(res.errors[0])


def test_a_slow_kernel_that_progresses_finishes_within_the_limit() -> None:
    """PE 1 waits for PE 0, which computes for a while before it sends: waiting on a PE that is
    running is neither a deadlock nor (within the limit) a timeout."""

    def slow_sender(a, b):
        sig = T.alloc_signal(1)
        tile = T.alloc_shared((M, N), F32)
        with T.If(T.get_pe() == 0):
            for _ in T.serial(3000):
                T.fill(tile, 4.0)
            T.putmem_signal_nbi_block(b, a, sig=sig[0], value=1, op=T.SignalOp.SET, pe=1)
            T.copy(a, b)
        with T.Else():
            T.signal_wait_until(sig[0], T.Cmp.EQ, 1)

    kernel = build(slow_sender, inputs=[((M, N), F32)], outputs=[((M, N), F32)], grid=(1,), num_pes=2)
    data = inputs(2)
    outs = run(session(kernel, timeout_s=15), data)
    np.testing.assert_array_equal(outs[1][0], data[0][0])
    np.testing.assert_array_equal(outs[0][0], data[0][0])
