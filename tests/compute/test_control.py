"""Per-thread code (issue 6): the thread index, conditions, `if` on kernel values (rewritten
Python and `T.If`), registers, the verifier's thread rules, and the interpreter's per-thread
semantics (one issue per thread that takes a branch; waits and deadlocks inside branches)."""

from __future__ import annotations

import numpy as np
import pytest

from jax_tilescale import language as T
from jax_tilescale.ast_rewrite import rewrite_kernel_function
from jax_tilescale.errors import DeadlockError, KernelRuntimeError, KernelTraceError
from jax_tilescale.ir.control import If, LocalStore
from jax_tilescale.ir.evaluate import evaluate
from jax_tilescale.ir.expr import Compare, CompareKind, Var, VarKind, format_expr
from jax_tilescale.ir.nodes import Put, Scope, walk_stmts
from jax_tilescale.language import control
from tests.interpret.harness import build, launch, run, session

I32 = np.int32
TX = Var(VarKind.THREAD)
PE = Var(VarKind.PE)


def kernel_of(fn, *, inputs, outputs, num_pes=2, grid=(1,)):
    """Traces `fn` as `@ts.kernel` does (with the rewrite of Python control flow)."""
    return build(rewrite_kernel_function(fn, control), inputs=inputs, outputs=outputs, grid=grid, num_pes=num_pes)


# ---- conditions as expressions -----------------------------------------------------------------


def test_comparisons_and_combinations_evaluate_like_python() -> None:
    rng = np.random.default_rng(0)
    exprs = {
        "tx == 3": lambda t, p: t == 3,
        "tx != pe": lambda t, p: t != p,
        "(tx < 4) & (pe >= 1)": lambda t, p: (t < 4) & (p >= 1),
        "(tx > 5) | (pe <= 0)": lambda t, p: (t > 5) | (p <= 0),
        "(tx == 0) + 2": lambda t, p: (t == 0) + 2,
    }
    for text, build_it in exprs.items():
        e = build_it(TX, PE)
        for t, p in rng.integers(0, 10, (20, 2)):
            expected = build_it(int(t), int(p))
            assert evaluate(e, {TX: int(t), PE: int(p)}) == int(expected), (text, t, p)
    # `~` of a condition is logical (numpy's bools), not Python's `~True == -2`.
    for t in range(8):
        assert evaluate(~(TX < 4), {TX: t}) == int(not t < 4)
        assert evaluate(~((TX < 4) & (TX > 1)), {TX: t}) == int(not (1 < t < 4))
    for text, build_it in exprs.items():
        e = build_it(TX, PE)
        for t, p in rng.integers(0, 10, (20, 2)):
            expected = build_it(int(t), int(p))
            assert evaluate(e, {TX: int(t), PE: int(p)}) == int(expected), (text, t, p)
    assert format_expr(~(TX < 4)) == "(tx >= 4)"  # a negated comparison is the opposite comparison


def test_equality_is_structural_in_containers_and_constants_fold() -> None:
    assert isinstance(TX == 0, Compare) and (TX == 0).op is CompareKind.EQ
    assert {TX + 1: "a"}[Var(VarKind.THREAD) + 1] == "a"  # hashing and dict lookup still work
    assert (TX == Var(VarKind.THREAD)) is True and (T.ds(0, 1) is not None)
    assert bool(TX == PE) is False  # outside a trace: "not the same expression"
    from jax_tilescale.ir.expr import Const

    assert (Const(3) < 4) is True and (Const(3) == 4) is False


def test_bitwise_ops_on_index_values_are_refused() -> None:
    with pytest.raises(TypeError, match="combines conditions"):
        _ = (TX + 1) & (PE < 2)
    with pytest.raises(TypeError, match="negates a condition"):
        _ = ~(TX + 1)


# ---- tracing: rewritten Python, explicit forms ---------------------------------------------------


def test_python_if_on_kernel_values_traces_both_branches_and_keeps_plain_ifs() -> None:
    flag = [0]

    def k(x, out):
        tx = T.get_thread_binding(0)
        if flag[0]:  # a plain value: Python semantics (this side is never traced)
            T.fence()
        if tx == 0 and T.get_pe() == 0:
            T.putmem(out, x, pe=1)
        elif 0 < tx < 3:
            T.quiet()
        else:
            T.fence()
        v = T.alloc_var("int32", init=1)
        v = 7 if T.get_pe() == 1 else 9  # a store into the register (TileLang's meaning)
        if not (v > 8):
            T.quiet()

    ir = kernel_of(k, inputs=[((4,), I32)], outputs=[((4,), I32)])
    top = ir.body
    assert [type(s).__name__ for s in top] == ["If", "LocalStore", "LocalStore", "If"]
    first = top[0]
    assert format_expr(first.cond) == "((tx == 0) and (pe == 0))"
    assert isinstance(first.then_body[0], Put) and isinstance(first.else_body[0], If)
    assert format_expr(first.else_body[0].cond) == "((tx > 0) and (tx < 3))"
    assert format_expr(top[2].value) == "if_then_else((pe == 1), 7, 9)"
    assert format_expr(top[3].cond).startswith("(v[0] <= 8)")
    # Source locations are the user's lines (the rewrite keeps line numbers).
    import inspect

    lines, start = inspect.getsourcelines(k)
    put_line = next(i for i, text in enumerate(lines) if "T.putmem(out, x, pe=1)" in text) + start
    assert first.then_body[0].loc.lineno == put_line and first.loc.lineno == put_line - 1


def test_explicit_if_else_and_if_then_else() -> None:
    def k(x, out):
        tx = T.thread_id()
        with T.If(tx < 2):
            T.putmem(out[T.if_then_else(tx == 0, 0, 2):T.if_then_else(tx == 0, 0, 2) + 2], x[0:2], pe=0)
        with T.Else():
            T.quiet()
        with T.If(T.all(T.get_pe() == 0, True)):
            T.fence()

    ir = build(k, inputs=[((4,), I32)], outputs=[((4,), I32)], grid=(1,), num_pes=2)
    assert isinstance(ir.body[0], If) and ir.body[0].else_body and isinstance(ir.body[1], If)
    assert format_expr(ir.body[1].cond) == "(pe == 0)"


def test_python_if_in_a_helper_is_an_error_not_a_silent_branch() -> None:
    def helper(tx):
        if tx == 0:  # not rewritten (a helper): must not silently take the else side
            T.quiet()

    def k(x, out):
        helper(T.thread_id())

    with pytest.raises(TypeError, match="kernel condition known only at run time"):
        kernel_of(k, inputs=[((4,), I32)], outputs=[((4,), I32)])


# ---- verifier -----------------------------------------------------------------------------------


@pytest.mark.parametrize("stmt, what", [
    (lambda x, out: T.putmem_block(out, x, pe=0), "needs the whole block"),
    (lambda x, out: T.putmem_nbi_warp(out, x, pe=0), "needs its warp"),
    (lambda x, out: T.barrier_all(), "needs the whole block"),
    (lambda x, out: T.copy(x, out), "needs the whole block"),
    (lambda x, out: T.barrier_all_block(), "needs the whole block"),
])
def test_block_and_warp_operations_under_a_thread_condition_are_refused(stmt, what) -> None:
    def k(x, out):
        with T.If(T.thread_id() == 0):
            stmt(x, out)

    with pytest.raises(KernelTraceError, match=what) as err:
        build(k, inputs=[((4,), I32)], outputs=[((4,), I32)], grid=(1,), num_pes=2)
    assert "thread-dependent `if (tx == 0)`" in str(err.value) and "test_control.py" in str(err.value)


def test_block_uniform_condition_keeps_block_operations() -> None:
    """A condition on the PE (the same for every thread of the block) may hold a block-wide put: it
    stays one BLOCK-scope put under the if, and runs (PE 0's input lands on PE 1)."""

    def k(x, out):
        with T.If(T.get_pe() == 0):
            T.putmem_block(out, x, pe=1)

    ir = build(k, inputs=[((4,), I32)], outputs=[((4,), I32)], grid=(1,), num_pes=2)
    assert [type(s) for s in walk_stmts(ir.body)] == [If, Put]
    (branch,) = ir.body
    assert format_expr(branch.cond) == "(pe == 0)" and branch.else_body == ()
    (put,) = branch.then_body
    assert put.scope is Scope.BLOCK and put.blocking and put.op_name == "putmem_block"
    x = np.random.default_rng(3).integers(-1000, 1000, size=(2, 4)).astype(I32)
    outs = launch(session(ir, check_coverage=False), [[x[0]], [x[1]]]).check()
    np.testing.assert_array_equal(outs[1][0], x[0])


def test_thread_dependent_operands_outside_a_thread_branch_are_refused() -> None:
    def k(x, out):
        T.putmem(out[T.thread_id() % 4:T.thread_id() % 4 + 1], x[0:1], pe=0)

    with pytest.raises(KernelTraceError, match="depends on the thread"):
        build(k, inputs=[((4,), I32)], outputs=[((4,), I32)], grid=(1,), num_pes=2)


def test_condition_narrows_the_thread_range_for_bounds_checks() -> None:
    def ok(x, out):
        tx = T.thread_id()
        with T.If(tx < 4):
            T.putmem(out[tx:tx + 1], x[tx:tx + 1], pe=0)

    def bad(x, out):
        tx = T.thread_id()
        with T.If(tx < 5):
            T.putmem(out[tx:tx + 1], x[tx:tx + 1], pe=0)

    build(ok, inputs=[((4,), I32)], outputs=[((4,), I32)], grid=(1,), num_pes=2)
    with pytest.raises(KernelTraceError, match=r"starts at tx, which can be 4; with size 1 it leaves \[0, 4\)"):
        build(bad, inputs=[((4,), I32)], outputs=[((4,), I32)], grid=(1,), num_pes=2)


def test_registers_cannot_be_transferred_and_hold_integers() -> None:
    def k(x, out):
        T.alloc_var("float32")

    with pytest.raises(KernelTraceError, match="registers hold integers"):
        build(k, inputs=[((4,), I32)], outputs=[((4,), I32)], grid=(1,), num_pes=2)
    with pytest.raises(KernelTraceError, match="one-dimensional"):
        build(lambda x, out: T.get_thread_binding(1), inputs=[((4,), I32)], outputs=[((4,), I32)], grid=(1,),
              num_pes=2)


# ---- interpreter --------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 3, 4])
def test_one_put_per_thread_that_takes_the_branch(n: int) -> None:
    """`if tx < n: putmem_signal(row tx, ADD 1)`: the peer's signal counts n puts, rows 0..n-1
    arrive, the rest of the output stays as the peer's own copy wrote it."""
    rows = 4

    def k(x, out):
        tx = T.thread_id()
        me, npes = T.get_pe(), T.get_pe_num()
        sig = T.alloc_signal(1)
        T.copy(x, out)
        T.barrier_all()
        if tx < n:
            T.putmem_signal_nbi(out[tx, :], x[tx, :], 32, sig[0], 1, T.SignalOp.ADD, pe=(me + 1) % npes)
        if tx == 0:
            T.signal_wait_until(sig[0], T.Cmp.EQ, n)
        v = T.alloc_var("int32", init=0)
        if tx < 2:
            v = tx + 5
        if v == 6:
            T.quiet()

    ir = kernel_of(k, inputs=[((rows, 8), I32)], outputs=[((rows, 8), I32)], num_pes=3)
    rng = np.random.default_rng(n)
    x = [rng.integers(-1000, 1000, (rows, 8)).astype(I32) for _ in range(3)]
    outs = run(session(ir), [[a] for a in x])
    for p in range(3):
        src = x[(p - 1) % 3]
        np.testing.assert_array_equal(outs[p][0][:n], src[:n])
        np.testing.assert_array_equal(outs[p][0][n:], x[p][n:])


def test_unsatisfied_wait_inside_a_thread_branch_is_a_deadlock_naming_pe_word_and_value() -> None:
    def k(x, out):
        tx = T.thread_id()
        sig = T.alloc_signal(2)
        T.copy(x, out)
        if tx == 0:
            T.signal_op(sig[1], 3, T.SignalOp.SET, pe=T.get_pe())
        if tx == 1:
            T.wait_eq(sig[1], 4)

    ir = kernel_of(k, inputs=[((4,), I32)], outputs=[((4,), I32)], num_pes=2)
    res = launch(session(ir), [[np.arange(4, dtype=I32)]] * 2)
    assert all(isinstance(e, DeadlockError) for e in res.errors)
    msg = str(res.errors[0])
    assert "PE 0" in msg and "PE 1" in msg and "wait_eq(sig[1] == 4) (thread 1)" in msg and "sig[1] is 3" in msg


def test_reading_an_unwritten_register_is_an_error() -> None:
    def k(x, out):
        tx = T.thread_id()
        r = T.alloc_local((2,), "int32")
        if tx == 0:
            r[0] = 1
        if r[0] == 1:
            T.quiet()

    ir = kernel_of(k, inputs=[((4,), I32)], outputs=[((4,), I32)], num_pes=1)
    res = launch(session(ir, check_coverage=False), [[np.arange(4, dtype=I32)]])
    assert isinstance(res.errors[0], KernelRuntimeError) and "thread 1 reads the register r[0]" in str(res.errors[0])


def test_register_stores_wrap_like_c() -> None:
    from jax_tilescale.interpret.registers import wrap_int

    assert wrap_int(2**31, np.dtype(np.int32)) == -(2**31)
    assert wrap_int(-1, np.dtype(np.uint8)) == 255
    assert wrap_int(300, np.dtype(np.int8)) == 44


def test_stmt_types_in_walk() -> None:
    def k(x, out):
        with T.If(T.thread_id() == 0):
            r = T.alloc_local((1,), "int32")
            r[0] = 2

    ir = build(k, inputs=[((4,), I32)], outputs=[((4,), I32)], grid=(1,), num_pes=1)
    assert [type(s) for s in walk_stmts(ir.body)] == [If, LocalStore]


# ---- loop trip counts known when tracing --------------------------------------------------------


@pytest.mark.parametrize("npes", [2, 3])
def test_a_loop_over_the_pe_count_visits_every_pe(npes: int) -> None:
    """`for p in T.serial(T.get_pe_num())`: the PE count is a kernel value, but known when tracing, so it
    is a trip count (it was refused as "not a Python int"). Each PE gathers every PE's row by gets."""

    def gather_rows(x, out):
        for p in T.serial(T.get_pe_num()):
            T.getmem_block(out[T.ds(p, 1), :], x, pe=p)

    kern = build(gather_rows, inputs=[((1, 8), np.float32)], outputs=[((npes, 8), np.float32)], grid=(1,),
                 num_pes=npes)
    x = np.random.default_rng(npes).standard_normal((npes, 1, 8)).astype(np.float32)
    outs = run(session(kern), [[x[pe]] for pe in range(npes)])
    for pe in range(npes):
        np.testing.assert_array_equal(outs[pe][0], x[:, 0, :])


def test_a_run_time_trip_count_is_refused_naming_it() -> None:
    def by_pe(x, out):
        for _ in T.serial(T.get_pe() + 1):
            T.copy(x, out)

    with pytest.raises(KernelTraceError, match="known when the kernel is traced"):
        build(by_pe, inputs=[((1, 8), np.float32)], outputs=[((1, 8), np.float32)], grid=(1,), num_pes=2)
