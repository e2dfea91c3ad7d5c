"""Planted bugs in kernels that use issue 3's primitives: each must fail on every PE, promptly,
with a message that names what went wrong (or, without race detection, show poison)."""

from __future__ import annotations

import numpy as np
import pytest

from jax_tilescale import language as T
from jax_tilescale.errors import DeadlockError, KernelRuntimeError, RaceError
from jax_tilescale.ir.nodes import Get, WaitUntil
from tests.interpret.harness import build, launch, random_inputs, session, stmt_loc

F32 = np.float32
M, N = 16, 8


def inputs(npes: int, seed: int = 0, extra: tuple[np.ndarray, ...] = ()) -> list[list[np.ndarray]]:
    x = random_inputs(np.random.default_rng(seed), npes, (M, N))
    return [[x[p], *extra] for p in range(npes)]


def missing_quiet(a, recv, out):
    T.getmem_nbi_block(recv, a, pe=(T.get_pe() + 1) % T.get_pe_num())
    T.copy(recv, out)  # bug: reads the get's destination before a quiet


@pytest.mark.parametrize("npes", [2, 4])
def test_missing_quiet_after_getmem_nbi_reads_poison(npes: int) -> None:
    """Without race detection the read before the quiet sees poison (NaN): the get has not landed."""
    kernel = build(missing_quiet, inputs=[((M, N), F32)], outputs=[((M, N), F32)] * 2, grid=(1,), num_pes=npes)
    data = inputs(npes, npes)
    outs = launch(session(kernel, detect_races=False), data).check()
    for p in range(npes):
        assert np.isnan(outs[p][1]).all(), "what was copied before the quiet must be poison"
        np.testing.assert_array_equal(outs[p][0], data[(p + 1) % npes][0])  # landed at the end of the kernel


def test_missing_quiet_after_getmem_nbi_is_a_race() -> None:
    """With race detection (the default) the same kernel is reported as a race between the get's
    completion and the early read, naming both lines."""
    kernel = build(missing_quiet, inputs=[((M, N), F32)], outputs=[((M, N), F32)] * 2, grid=(1,), num_pes=2)
    res = launch(session(kernel), inputs(2))
    msg = str(res.errors[0])
    assert all(isinstance(e, RaceError) for e in res.errors)
    assert "getmem_nbi_block" in msg and stmt_loc(kernel, Get) in msg and "read of recv[0:16, 0:8]" in msg


def test_getmem_nbi_into_shared_memory_must_land_before_the_block_ends() -> None:
    def lost(a, out):
        tile = T.alloc_shared((M, N), F32)
        T.copy(a, out)
        T.getmem_nbi(tile, a, pe=(T.get_pe() + 1) % T.get_pe_num())

    kernel = build(lost, inputs=[((M, N), F32)], outputs=[((M, N), F32)], grid=(1,), num_pes=2)
    res = launch(session(kernel), inputs(2))
    msg = str(res.errors[0]) + str(res.errors[1])
    assert "getmem_nbi into the shared tile tile" in msg and "T.quiet()" in msg and stmt_loc(kernel, Get) in msg


@pytest.mark.parametrize("npes", [2, 4])
def test_remote_wait_on_the_wrong_peer_deadlocks_naming_peer_word_and_value(npes: int) -> None:
    """Every PE sets a flag on the next PE but polls the flag of the PE after that (a wrong peer):
    the flag it polls was set by ... nobody waits correctly; the report names the PE polled."""

    def wrong_peer(a, ones, out):
        me, n = T.get_pe(), T.get_pe_num()
        flag = T.alloc_symmetric((2,), np.int32)
        T.copy(a, out)
        T.putmem(flag[0:1], ones, pe=(me + 1) % n)  # tells the next PE: its flag[0] becomes 1
        T.wait_eq(flag[1], 1, pe=(me + 1) % n)  # bug: polls flag[1], which nobody sets

    kernel = build(wrong_peer, inputs=[((M, N), F32), ((1,), np.int32)], outputs=[((M, N), F32)], grid=(1,),
                   num_pes=npes)
    res = launch(session(kernel), inputs(npes, extra=(np.ones(1, np.int32),)))
    loc = stmt_loc(kernel, WaitUntil)
    msg = str(res.errors[0])
    assert all(isinstance(e, DeadlockError) and str(e) == msg for e in res.errors)
    for pe in range(npes):
        nxt = (pe + 1) % npes
        assert f"PE {pe} block (0,) waits for wait_eq(flag[1] == 1 on PE {nxt}): flag[1] is 0, at {loc}" in msg


@pytest.mark.parametrize("npes", [2, 4])
def test_signal_op_value_off_by_one_deadlocks_naming_word_comparison_and_value(npes: int) -> None:
    def off_by_one(a, out):
        me, n = T.get_pe(), T.get_pe_num()
        sig = T.alloc_signal(1)
        inbox = T.alloc_symmetric((M, N), F32)
        T.putmem_nbi_block(inbox, a, pe=(me + 1) % n)
        T.fence()
        T.signal_op(sig[0], 1, T.SignalOp.ADD, (me + 1) % n)
        T.wait_ge(sig[0], 2)  # bug: one signal arrives, not two
        T.copy(inbox, out)

    kernel = build(off_by_one, inputs=[((M, N), F32)], outputs=[((M, N), F32)], grid=(1,), num_pes=npes)
    res = launch(session(kernel), inputs(npes))
    msg = str(res.errors[0])
    assert all(isinstance(e, DeadlockError) for e in res.errors)
    loc = stmt_loc(kernel, WaitUntil)
    for pe in range(npes):
        assert f"PE {pe} block (0,) waits for wait_ge(sig[0] >= 2): sig[0] is 1, at {loc}" in msg


def test_mismatched_team_collectives_name_each_pes_call() -> None:
    """The k-th team collective call of each PE must be the same statement: a broadcast whose
    root depends on the PE pairs different arguments."""

    def bad_root(a, out):
        T.broadcast(out, a, T.get_pe() % 2)

    kernel = build(bad_root, inputs=[((M, N), F32)], outputs=[((M, N), F32)], grid=(1,), num_pes=2)
    res = launch(session(kernel, detect_races=False), inputs(2))
    msg = " ".join(str(e) for e in res.errors)
    assert "team collective call 1 of each PE pairs the same statement with different arguments" in msg
    assert "PE 0 (block (0,)): broadcast" in msg and "root 0" in msg and "root 1" in msg


def test_a_pe_that_skips_a_team_barrier_is_a_deadlock_report() -> None:
    """Two blocks per PE each call barrier_all_block once, except that PE 1 has one block too few
    calls ... modelled by a barrier that only block 0 of each PE reaches after a wait nobody
    satisfies on PE 1."""

    def stuck(a, out):
        me = T.get_pe()
        sig = T.alloc_signal(1)
        T.copy(a, out)
        T.signal_wait_until(sig[0], T.Cmp.EQ, me)  # PE 0: 0 == 0 holds; PE 1 waits forever
        T.barrier_all_block()

    kernel = build(stuck, inputs=[((M, N), F32)], outputs=[((M, N), F32)], grid=(1,), num_pes=2)
    res = launch(session(kernel), inputs(2))
    msg = str(res.errors[0])
    assert isinstance(res.errors[0], DeadlockError)
    assert "PE 0 block (0,) waits for barrier_all_block (team collective call 1 of each PE: 1 of 2 PEs arrived)" in msg
    assert "PE 1 block (0,) waits for signal_wait_until(sig[0] == 1): sig[0] is 0" in msg


def test_run_time_size_past_the_buffer_is_reported() -> None:
    def too_big(a, counts, out):
        T.copy(a, out)
        T.putmem_nbi_block(out[4, :], a[0, :], counts[0] * N * 4, (T.get_pe() + 1) % T.get_pe_num())

    kernel = build(too_big, inputs=[((M, N), F32), ((1,), np.int32)], outputs=[((M, N), F32)], grid=(1,),
                   num_pes=2)
    res = launch(session(kernel), inputs(2, extra=(np.array([13], np.int32),)))
    msg = str(res.errors[0]) + str(res.errors[1])
    assert "is 13 rows from row 4 of the destination out, past its 16 rows" in msg


def test_load_out_of_bounds_at_run_time() -> None:
    def bad_load(a, idx, out):
        T.copy(a[T.ds(idx[(T.get_pe() * 3) % 5], 1), :], out[0:1, :])  # not affine: checked when it runs
        T.copy(a[1:M, :], out[1:M, :])

    kernel = build(bad_load, inputs=[((M, N), F32), ((4,), np.int32)], outputs=[((M, N), F32)], grid=(1,),
                   num_pes=4)
    res = launch(session(kernel), inputs(4, extra=(np.zeros(4, np.int32),)))
    assert isinstance(res.errors[3], KernelRuntimeError)
    assert "T.load idx[((pe * 3) % 5)] is out of bounds: index 4 along dimension 0 of idx (extent 4)" in str(
        res.errors[3]
    )
