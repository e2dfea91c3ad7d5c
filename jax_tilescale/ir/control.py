"""Per-thread code: the thread index, conditionals, per-thread registers, and their invariants.

The rest of the IR describes a block as a unit: a statement runs once per block (THREAD scope:
thread 0 issues it, WARP: warp 0, BLOCK: all threads together). This module adds what runs per
thread:

- `THREAD_VAR` (`T.thread_id()` / `T.get_thread_binding(0)`): threadIdx.x, in [0, threads).
- `If(cond, then_body, else_body)`. A condition that depends on the thread (on `tx` or on a
  register read) makes a *thread-dependent* branch: each statement in it runs once for each thread
  of the block that took the branch, in thread order, with `tx` bound to that thread (so
  `if tx == 0: putmem_signal(...)` issues one put, `if tx < 4:` four). Any other condition
  (PE, block index, loop variables, `T.load` values) is *block-uniform*: the block takes one
  branch and its statements keep their block-level meaning.
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

import contextvars
import itertools
from dataclasses import dataclass, fields

from ..errors import KernelTraceError
from .expr import (
    Compare,
    Expr,
    Load,
    Logic,
    LogicKind,
    Var,
    VarKind,
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

THREAD_VAR = Var(VarKind.THREAD)
Ranges = dict[Var, tuple[int, int]]
# Narrowing a variable's range by a condition evaluates it for every value up to this many.
MAX_NARROWING_VALUES = 1 << 16
# Local registers hold integers (index values); the element-wise value expressions bring floats.
LOCAL_DTYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32")


@dataclass(frozen=True)
class If(Stmt):
    """`if cond: then_body else: else_body` (the Python `if` of a kernel, or `with T.If(cond):`)."""

    cond: Expr
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


def thread_dependent(e: Expr) -> bool:
    """Whether `e` can differ between the threads of a block: it reads `tx` or a register."""
    return THREAD_VAR in variables(e) or any(ld.buffer.kind is BufferKind.LOCAL for ld in loads(e))


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
    return f"`if {format_expr(cond.cond)}` (at {cond.loc})"


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


def verify_if(s: If, kernel: KernelIR, ranges: Ranges) -> None:
    from .verify import _verify_body  # verify.py imports this module for its rule table

    if not is_condition(s.cond):
        raise KernelTraceError(f"if: the condition {format_expr(s.cond)} is not a comparison or a combination", s.loc)
    divergent = thread_dependent(s.cond)
    if divergent and THREAD_VAR not in ranges:
        ranges = {**ranges, THREAD_VAR: (0, kernel.threads - 1)}
    then_ranges = _narrow(s.cond, ranges) or ranges
    negated = logical_not(s.cond)
    else_ranges = (None if isinstance(negated, bool) else _narrow(negated, ranges)) or ranges
    token = _DIVERGENT.set((*_DIVERGENT.get(), s)) if divergent else None
    try:
        _verify_body(s.then_body, kernel, then_ranges)
        _verify_body(s.else_body, kernel, else_ranges)
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
