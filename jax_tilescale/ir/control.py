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

What may stand in a thread-dependent branch (`Stmt.in_thread_branch`, checked by
verify_base.check_thread_context): thread-scope transfers and signals, waits, quiet, fence,
register stores, element stores and atomics, loops and nested ifs. Operations that need the
whole warp or block (`_warp`/`_block` forms, copies, fill, gemm, barriers, collectives) are
rejected: on the GPU the threads that did not take the branch never reach them (a deadlock or
missing data). Outside thread-dependent branches, statements issued once per block must not
depend on the thread (which thread's value would they use?).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, fields
from typing import ClassVar

from .buffers import Buffer, BufferKind
from .expr import Expr, Load, Var, VarKind, format_expr, loads, variables
from .kernel_ir import KernelIR
from .nodes import Region, SignalUpdate, Stmt, stmt_exprs, walk_stmts
from .values import Value, format_value

THREAD_VAR = Var(VarKind.THREAD)
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
    # Its condition may depend on the thread (that makes the branch thread-dependent); its bodies'
    # statements say for themselves where they may stand.
    per_thread: ClassVar[bool] = True
    in_thread_branch: ClassVar[bool] = True
    in_parallel: ClassVar[bool] = True

    @property
    def bodies(self) -> tuple[tuple[Stmt, ...], ...]:
        return (self.then_body, self.else_body)


@dataclass(frozen=True)
class LocalStore(Stmt):
    """`reg[i] = value` of a per-thread register buffer (wrapped to its integer dtype, as C's
    conversion does); every thread that runs it stores its own value."""

    dst: Region
    value: Expr
    op_name = "store"
    per_thread: ClassVar[bool] = True
    in_thread_branch: ClassVar[bool] = True


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


def local_buffers(kernel: KernelIR) -> list[Buffer]:
    """The register buffers a kernel uses (stored or read), in order of first use."""
    seen: dict[Buffer, None] = {}
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
