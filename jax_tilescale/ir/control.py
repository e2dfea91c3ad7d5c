"""Per-thread code: the thread index, conditionals, per-thread registers, and their invariants.

The rest of the IR describes a block as a unit: a statement runs once per block (THREAD scope:
thread 0 issues it, WARP: warp 0, BLOCK: all threads together). This module adds what runs per
thread:

- `THREAD_VAR` (`T.thread_id()` / `T.get_thread_binding(0)`): threadIdx.x, in [0, threads).
- `If(cond, then_body, else_body)`. `cond` is an index condition (an `Expr`: comparisons of
  `tx`, PEs, block and loop indices, `T.load` values) or a bool element value (a `Value` of
  values.py: `x[i, j] > 0`, `(j < n) & (x[i, j] != 0)`, reading any memory the block may read).
  A condition that depends on the thread (on `tx` or on a register read) makes a
  *thread-dependent* branch: each statement in it runs once for each thread of the block that
  took the branch, in thread order, with `tx` bound to that thread (so `if tx == 0:
  putmem_signal(...)` issues one put, `if tx < 4:` four). Any other condition (PE, block index,
  loop variables, `T.load` values, elements read at block level such as `flag[0] > 0`) is
  *block-uniform*: the block evaluates it once, takes one branch, and its statements keep their
  block-level meaning (the GPU's threads each evaluate it; they agree because a read that another
  agent's write could change under them is a race, which the interpreter reports).
  Inside a `T.Parallel` body an `If` is *per iteration* (tile_ops.py): whatever its condition
  reads (loop variables, element values), its statements run for the iterations where it holds.
- `LocalStore(dst, value)`: one element of a per-thread register buffer (`T.alloc_local`,
  `T.alloc_var`, BufferKind.LOCAL) := an index expression, for every thread that runs it (every
  thread of the block outside thread-dependent branches). Registers are read with `Load`s of the
  LOCAL buffer in any expression.

What may stand in a thread-dependent branch (`check_thread_context`): thread-scope transfers and
signals, waits, quiet, fence, register stores, loops and nested ifs. Operations that need the
whole warp or block (`_warp`/`_block` forms, copies, fill, gemm, barriers, collectives) are
rejected: on the GPU the threads that did not take the branch never reach them (a deadlock or
missing data). Outside thread-dependent branches, statements issued once per block must not
depend on the thread (which thread's value would they use?).
"""

from __future__ import annotations

import contextlib
import contextvars
import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass, fields

import numpy as np

from ..errors import KernelTraceError
from .expr import (
    BinOp,
    BinOpKind,
    Compare,
    CompareKind,
    Const,
    Expr,
    Load,
    Logic,
    LogicKind,
    Not,
    Select,
    Var,
    VarKind,
    children,
    evaluate,
    format_expr,
    is_condition,
    loads,
    logical_not,
    variables,
)
from .nodes import (
    BufferKind,
    Fence,
    Get,
    KernelIR,
    Loop,
    Put,
    Quiet,
    Region,
    RemoteSignal,
    Scope,
    SignalUpdate,
    SignalWait,
    Stmt,
    WaitUntil,
    stmt_exprs,
)
from .tile_ops import THREAD_STMTS
from .values import (
    BOOL,
    Binary,
    BinaryKind,
    ElementRead,
    IndexValue,
    Literal,
    Unary,
    UnaryKind,
    Value,
    ValueSelect,
    format_value,
)
from .values import children as value_children

THREAD_VAR = Var(VarKind.THREAD)
Ranges = dict[Var, tuple[int, int]]
# Narrowing a variable's range by a condition evaluates it for every value up to this many.
MAX_NARROWING_VALUES = 1 << 16
# A bounds check under enclosing conditions evaluates them at every point of their variables'
# ranges, up to this many points (numpy, a few milliseconds).
MAX_GUARD_POINTS = 1 << 20
# Local registers hold integers (index values); the element-wise value expressions bring floats.
LOCAL_DTYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32")


@dataclass(frozen=True)
class If(Stmt):
    """`if cond: then_body else: else_body` (the Python `if` of a kernel, or `with T.If(cond):`).
    `cond`: an index condition (`is_condition`) or an element value of dtype bool."""

    cond: Expr | Value
    then_body: tuple[Stmt, ...]
    else_body: tuple[Stmt, ...] = ()
    op_name = "if"

    @property
    def bodies(self) -> tuple[tuple[Stmt, ...], ...]:
        return (self.then_body, self.else_body)


@dataclass(frozen=True)
class LocalStore(Stmt):
    """`reg[i] = value` of a per-thread register buffer (wrapped to its integer dtype, as C's
    conversion does)."""

    dst: Region
    value: Expr
    op_name = "store"


# Statements that mean something per thread: they may depend on the thread anywhere.
PER_THREAD_STMTS = (If, LocalStore)
# Statements a thread may issue on its own (in a thread-dependent branch); scoped ones only in
# thread scope.
THREAD_SAFE_STMTS = (Put, Get, RemoteSignal, SignalWait, WaitUntil, Quiet, Fence, LocalStore, If, Loop)
THREAD_SAFE_STMTS += THREAD_STMTS  # element stores and atomics (tile_ops.py): one thread runs each


def thread_dependent(e: Expr | Value) -> bool:
    """Whether `e` (an index expression, or an element value: its indices) can differ between the
    threads of a block: it reads `tx` or a register."""
    if isinstance(e, Value):
        return any(thread_dependent(x) for x in e.index_exprs())
    return THREAD_VAR in variables(e) or any(ld.buffer.kind is BufferKind.LOCAL for ld in loads(e))


def format_cond(cond: Expr | Value) -> str:
    return format_value(cond) if isinstance(cond, Value) else format_expr(cond)


def stmt_regions(s: Stmt) -> list[Region]:
    """Every region a statement names (data, signal words)."""
    out = []
    for f in fields(s):
        value = getattr(s, f.name)
        if isinstance(value, Region):
            out.append(value)
        elif isinstance(value, SignalUpdate):
            out.append(value.word)
    return out


# The thread-dependent ifs enclosing the statements being verified (innermost last).
_DIVERGENT: contextvars.ContextVar[tuple[If, ...]] = contextvars.ContextVar("tilescale_divergent", default=())


def _describe(cond: If) -> str:
    return f"`if {format_cond(cond.cond)}` (at {cond.loc})"


def check_thread_context(s: Stmt, kernel: KernelIR, ranges: Ranges) -> None:
    """The verifier's per-thread rules for any statement `s` (called before its own rule)."""
    for r in stmt_regions(s):
        if r.buffer.kind is BufferKind.LOCAL and not isinstance(s, LocalStore):
            raise KernelTraceError(
                f"{s.op_name}: {r.buffer.name} is a per-thread register buffer (T.alloc_local/T.alloc_var); registers "
                "are read and written element by element (x[i] = ..., x[i] in expressions), not copied or transferred",
                s.loc,
            )
    enclosing = _DIVERGENT.get()
    if enclosing:
        scope = getattr(s, "scope", Scope.THREAD)
        if not isinstance(s, THREAD_SAFE_STMTS) or scope is not Scope.THREAD:
            whole = "its warp" if scope is Scope.WARP else "the whole block"
            raise KernelTraceError(
                f"{s.op_name} needs {whole}, but it is inside the thread-dependent {_describe(enclosing[-1])}: on "
                "the GPU the threads that did not take the branch never reach it (a deadlock, or missing data). Move "
                "it out of the `if`, or use a thread-scope form (e.g. putmem instead of putmem_block) issued by the "
                "threads of the branch",
                s.loc,
            )
        return
    if isinstance(s, PER_THREAD_STMTS):
        return
    for e in stmt_exprs(s):
        if thread_dependent(e):
            raise KernelTraceError(
                f"{s.op_name}: `{format_expr(e)}` depends on the thread (tx or a register), but outside a "
                "thread-dependent `if` the statement is issued once for the block (by thread 0, warp 0 or all "
                "threads together, per its scope); put it under a condition on the thread, e.g. `if tx == 0:` or "
                "`if tx < n:`",
                s.loc,
            )


def _narrow(cond: Expr, ranges: Ranges) -> Ranges | None:
    """`ranges` with the range of the condition's one variable cut to the values that satisfy it
    (by evaluation: `tx < 4` -> tx in [0, 3]); None when that does not apply (several variables,
    loads, too many values, nothing satisfies it). `&` / `and` narrow by both sides."""
    if isinstance(cond, Logic) and cond.op in (LogicKind.AND, LogicKind.LAND):
        first = _narrow(cond.lhs, ranges)
        base = ranges if first is None else first
        return _narrow(cond.rhs, base) or first
    if not isinstance(cond, (Compare, Logic)) or loads(cond):
        return None
    vs = variables(cond)
    if len(vs) != 1:
        return None
    (v,) = vs
    if v not in ranges:
        return None
    lo, hi = ranges[v]
    if hi - lo + 1 > MAX_NARROWING_VALUES:
        return None
    try:
        ok = [x for x in range(lo, hi + 1) if evaluate(cond, {v: x})]
    except ZeroDivisionError:
        return None
    if not ok:
        return None
    return {**ranges, v: (min(ok), max(ok))}


def known_conditions(cond: Expr | Value, holds: bool) -> list[Expr]:
    """Index conditions that hold wherever `cond` is `holds` (what a branch may assume): the
    condition itself or its negation for an index condition; for an element value, the index
    parts of its conjunction (`(j < n) & (x[i, j] > 0)`, `j < n and x[i, j] > 0` hold -> j < n)
    or of the negated disjunction. Possibly fewer than all (never wrong)."""
    if isinstance(cond, Expr):
        c = cond if holds else logical_not(cond)
        return [] if isinstance(c, bool) else [c]
    if isinstance(cond, IndexValue) and cond.dtype == BOOL:
        return known_conditions(cond.expr, holds)
    if isinstance(cond, Unary) and cond.op is UnaryKind.NOT:
        return known_conditions(cond.x, not holds)
    if isinstance(cond, Binary) and cond.op is (BinaryKind.AND if holds else BinaryKind.OR):
        return known_conditions(cond.lhs, holds) + known_conditions(cond.rhs, holds)
    if isinstance(cond, ValueSelect):  # `a and b` is where(a, b, False), `a or b` is where(a, True, b)
        decided = cond.if_false if holds else cond.if_true
        if isinstance(decided, Literal) and decided.dtype == BOOL and decided.value is (not holds):
            other = cond.if_true if holds else cond.if_false
            return known_conditions(cond.cond, holds) + known_conditions(other, holds)
    return []


def narrowed(conds: list[Expr], ranges: Ranges) -> Ranges:
    """`ranges` cut by every condition of `conds` that narrows one variable (`_narrow`)."""
    for c in conds:
        ranges = _narrow(c, ranges) or ranges
    return ranges


def branch_ranges(cond: Expr | Value, ranges: Ranges) -> tuple[Ranges, Ranges]:
    """The variable ranges inside the `then` and the `else` side of a condition on `cond`."""
    return narrowed(known_conditions(cond, True), ranges), narrowed(known_conditions(cond, False), ranges)


# Index conditions known to hold where the statements being verified run (the enclosing ifs'
# sides, the chosen side of a T.where): a bounds check the ranges alone cannot prove evaluates
# them (`guards_keep_in_bounds`), so `if bx * 16 + i < n: y[bx * 16 + i] = x[bx * 16 + i]` passes.
_GUARDS: contextvars.ContextVar[tuple[Expr, ...]] = contextvars.ContextVar("tilescale_guards", default=())


@contextlib.contextmanager
def guarded(conds: list[Expr]) -> Iterator[None]:
    """The statements verified inside run only where `conds` hold."""
    token = _GUARDS.set((*_GUARDS.get(), *conds))
    try:
        yield
    finally:
        _GUARDS.reset(token)


_NP_BINOPS = {
    BinOpKind.ADD: np.add, BinOpKind.SUB: np.subtract, BinOpKind.MUL: np.multiply,
    BinOpKind.FLOORDIV: np.floor_divide, BinOpKind.MOD: np.mod,  # numpy rounds as Python does
    BinOpKind.MIN: np.minimum, BinOpKind.MAX: np.maximum,
}
_NP_COMPARE = {CompareKind.EQ: np.equal, CompareKind.NE: np.not_equal, CompareKind.LT: np.less,
               CompareKind.LE: np.less_equal, CompareKind.GT: np.greater, CompareKind.GE: np.greater_equal}


def _np_eval(e: Expr, env: dict[Var, np.ndarray]) -> np.ndarray | None:
    """`e` at every point of `env` (arrays that broadcast); None where that is not decidable here
    (a load, a division by zero)."""
    if isinstance(e, Const):
        return np.int64(e.value)
    if isinstance(e, Var):
        return env.get(e)
    parts = [_np_eval(c, env) for c in children(e)] if not isinstance(e, Load) else [None]
    if any(p is None for p in parts):
        return None
    if isinstance(e, BinOp):
        if e.op in (BinOpKind.FLOORDIV, BinOpKind.MOD) and np.any(parts[1] == 0):
            return None
        return _NP_BINOPS[e.op](*parts)
    if isinstance(e, Compare):
        return _NP_COMPARE[e.op](*parts).astype(np.int64)
    if isinstance(e, Logic):  # both sides are defined everywhere here, so short-circuiting changes nothing
        a, b = parts[0] != 0, parts[1] != 0
        return ((a & b) if e.op in (LogicKind.AND, LogicKind.LAND) else (a | b)).astype(np.int64)
    if isinstance(e, Not):
        return (parts[0] == 0).astype(np.int64)
    if isinstance(e, Select):
        return np.where(parts[0] != 0, parts[1], parts[2])
    return None


def guards_keep_in_bounds(start: Expr, size: int, extent: int, ranges: Ranges) -> bool:
    """Whether [start, start + size) may stay in [0, extent) where the enclosing conditions
    (`guarded`) hold: True when it does at every point of the variables' ranges where they hold
    (all evaluated, at most MAX_GUARD_POINTS points), or when a condition on the start's variables
    reads memory (`if j < T.load(n[0]):`, only known when the kernel runs: its run-time checks
    decide, as for any index the verifier cannot evaluate). False without such conditions."""
    own = variables(start)
    guards = [g for g in _GUARDS.get() if variables(g) & own]
    names = sorted(own.union(*(variables(g) for g in guards)), key=repr)
    if not guards or any(v not in ranges for v in own):
        return False
    if any(loads(g) for g in guards):
        return True
    names = [v for v in names if v in ranges]
    guards = [g for g in guards if variables(g) <= set(names)]
    points = math.prod(ranges[v][1] - ranges[v][0] + 1 for v in names)
    if points > MAX_GUARD_POINTS:
        return False
    env = {v: np.arange(ranges[v][0], ranges[v][1] + 1, dtype=np.int64).reshape(
        (1,) * k + (-1,) + (1,) * (len(names) - k - 1)) for k, v in enumerate(names)}
    shape = tuple(ranges[v][1] - ranges[v][0] + 1 for v in names)
    with np.errstate(all="ignore"):
        where_run = np.ones(shape, bool)
        for g in guards:
            value = _np_eval(g, env)
            if value is not None:
                where_run &= np.broadcast_to(value != 0, shape)
        s = _np_eval(start, env)
    if s is None:
        return False
    s = np.broadcast_to(s, shape)[where_run]
    return s.size == 0 or (int(s.min()) >= 0 and int(s.max()) + size <= extent)


def _expr_loads(e: Expr, known: tuple[Expr, ...]) -> Iterator[tuple[Load, tuple[Expr, ...]]]:
    """Every load in `e` with the conditions known where it is read: `and`/`or` read their right
    side only where the left one leaves it open, `if_then_else` only the chosen side."""
    if isinstance(e, Logic) and e.op in (LogicKind.LAND, LogicKind.LOR):
        yield from _expr_loads(e.lhs, known)
        yield from _expr_loads(e.rhs, (*known, *known_conditions(e.lhs, e.op is LogicKind.LAND)))
        return
    if isinstance(e, Select):
        yield from _expr_loads(e.cond, known)
        yield from _expr_loads(e.if_true, (*known, *known_conditions(e.cond, True)))
        yield from _expr_loads(e.if_false, (*known, *known_conditions(e.cond, False)))
        return
    if isinstance(e, Load):
        yield e, known
    for c in children(e):
        yield from _expr_loads(c, known)


def _value_loads(v: Value, known: tuple[Expr, ...]) -> Iterator[tuple[Load, tuple[Expr, ...]]]:
    if isinstance(v, ValueSelect):
        yield from _value_loads(v.cond, known)
        yield from _value_loads(v.if_true, (*known, *known_conditions(v.cond, True)))
        yield from _value_loads(v.if_false, (*known, *known_conditions(v.cond, False)))
        return
    if isinstance(v, IndexValue):
        yield from _expr_loads(v.expr, known)
    elif isinstance(v, ElementRead):
        for start in v.region.starts:
            yield from _expr_loads(start, known)
    for c in value_children(v):
        yield from _value_loads(c, known)


def guarded_loads(s: Stmt) -> Iterator[tuple[Load, tuple[Expr, ...]]]:
    """The loads of `s` (those of `stmt_exprs(s)`), each with the index conditions known where it
    is read: `if j < n and x[i, j] > 0:` reads x[i, j] only where j < n holds."""
    if isinstance(s, Loop):  # its variable is bound, not read; its body's statements have their own
        return
    for f in fields(s):
        value = getattr(s, f.name)
        if isinstance(value, Value):
            yield from _value_loads(value, ())
        elif isinstance(value, Expr):
            yield from _expr_loads(value, ())
        else:
            regions = [value] if isinstance(value, Region) else [value.word] if isinstance(value, SignalUpdate) else []
            exprs = [e for r in regions for e in r.starts]
            exprs += [value.value] if isinstance(value, SignalUpdate) else []
            for e in exprs:
                yield from _expr_loads(e, ())


def verify_if(s: If, kernel: KernelIR, ranges: Ranges) -> None:
    from .verify import _verify_body  # verify.py imports this module for its rule table

    divergent = thread_dependent(s.cond)
    if divergent and THREAD_VAR not in ranges:
        ranges = {**ranges, THREAD_VAR: (0, kernel.threads - 1)}
    if isinstance(s.cond, Value):
        from .tile_verify import check_value  # tile_verify.py builds on verify.py

        if s.cond.dtype != BOOL:
            raise KernelTraceError(f"if: the condition {format_value(s.cond)} is {s.cond.dtype.name}, not bool (the "
                                   "language turns `if x[i]:` into `x[i] != 0`)", s.loc)
        check_value(s.cond, ranges, "if", s.loc)
    elif not is_condition(s.cond):
        raise KernelTraceError(f"if: the condition {format_expr(s.cond)} is not a comparison or a combination", s.loc)
    token = _DIVERGENT.set((*_DIVERGENT.get(), s)) if divergent else None
    try:
        for holds, body in ((True, s.then_body), (False, s.else_body)):
            known = known_conditions(s.cond, holds)
            with guarded(known):
                _verify_body(body, kernel, narrowed(known, ranges))
    finally:
        if token is not None:
            _DIVERGENT.reset(token)


def verify_local_store(s: LocalStore, kernel: KernelIR, ranges: Ranges) -> None:
    from .verify import _check_region

    buf = s.dst.buffer
    if buf.kind is not BufferKind.LOCAL:
        raise KernelTraceError(f"store: {buf.name} is a {buf.kind.value} buffer; element stores write registers", s.loc)
    if s.dst.size != 1:
        raise KernelTraceError(f"store: writes one element of {buf.name}, got {s.dst}", s.loc)
    if THREAD_VAR not in ranges:
        ranges = {**ranges, THREAD_VAR: (0, kernel.threads - 1)}
    _check_region(s.dst, ranges, "store", s.loc)


def local_buffers(kernel: KernelIR) -> list:
    """The register buffers a kernel uses (stored or read), in order of first use."""
    from .nodes import walk_stmts

    seen: dict = {}
    for st in walk_stmts(kernel.body):
        regions = stmt_regions(st)
        for buf in itertools.chain(
            (r.buffer for r in regions), (ld.buffer for e in stmt_exprs(st) for ld in loads(e))
        ):
            if buf.kind is BufferKind.LOCAL:
                seen.setdefault(buf, None)
    return list(seen)


def is_local_load(e: Expr) -> bool:
    return isinstance(e, Load) and e.buffer.kind is BufferKind.LOCAL
