"""One block of one PE running statements: its context, the interpreter's rule table, and the
walker that runs a statement list with it.

`INTERPRET` holds the rules (ir/rules.py), of three kinds (`RunKind`):
- STATEMENT `rule(ctx, stmt) -> Wait | None`: does the statement's effect on the world and returns
  a `Wait` when the block must wait (signal_wait_until, barrier_all). It runs once for the block,
  or, in a thread-dependent branch, once per active thread in thread order with `tx` bound
  (register stores: every thread of the block);
- BODY `rule(ctx, stmt) -> generator`: a statement with nested bodies (a loop, an if) runs them
  with `run_body`, so their statements yield one at a time like the others (waits, the race
  detector and coverage work inside loops and ifs);
- ITERATION `rule(ctx, stmt, space, log, active)`: the statement for the active iterations of a
  `T.Parallel` body at once (tile_ops.py).
The rules live in evaluator.py, comm.py, collective_rules.py, control.py and tile_ops.py;
evaluator.py (the entry) imports them all. Every memory access goes through
`BlockContext.access` and from there through `LaunchMemory.access`.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Generator, Iterable
from typing import Any

import numpy as np

from ..errors import KernelRuntimeError
from ..ir.buffers import BufferKind
from ..ir.control import THREAD_VAR
from ..ir.expr import NODE_COUNT_VAR, NODE_VAR, Expr, Load, Var, VarKind, format_expr
from ..ir.nodes import Region, Stmt
from ..ir.rules import RuleTable
from .memory import Access, AccessKind, Block, ResolvedRegion, eval_index, resolve_region, where
from .registers import Registers, wrap_int
from .waits import Wait
from .world import World

Body = Generator["Wait | None", None, None]
INT64, UINT64 = np.dtype(np.int64), np.dtype(np.uint64)


class RunKind(enum.Enum):
    """The kinds of interpreter rules (see the module doc)."""

    STATEMENT = "statement"
    BODY = "body"
    ITERATION = "iteration"


INTERPRET: RuleTable[Callable[..., Any]] = RuleTable("interpret", default_kind=RunKind.STATEMENT)


class BlockContext:
    """One block of one PE: its program ids, its PE, and the world it runs in."""

    def __init__(self, world: World, pe: int, block: Block):
        self.world, self.pe, self.block = world, pe, block
        self.env: dict[Var, int] = {Var(VarKind.PROGRAM_ID, i): b for i, b in enumerate(block)}
        self.env[Var(VarKind.PE)] = pe
        self.env[NODE_VAR], self.env[NODE_COUNT_VAR] = world.options.node_of(pe, world.kernel.num_pes)
        # Per-thread code (control.py): the threads running a thread-dependent branch (None at
        # block level) and the block's registers.
        self.threads: tuple[int, ...] | None = None
        self.registers = Registers(world.kernel.threads)
        # How far the block got, for timeout reports: its current statement and enclosing loops.
        self.stmt: Stmt | None = None
        self.loops: list[Any] = []

    def eval(self, e: Expr, what: str, stmt: Stmt) -> int:
        return eval_index(e, self.env, what, stmt, self.pe, self.block, self._loader(stmt))

    def resolve(self, region: Region, role: str, stmt: Stmt, clip_dims: tuple[int, ...] = ()) -> ResolvedRegion:
        return resolve_region(region, self.env, role, stmt, self.pe, self.block, self._loader(stmt), clip_dims)

    def _loader(self, stmt: Stmt) -> Callable[[Load, tuple[int, ...]], int]:
        return lambda ld, indices: self.load(ld, indices, stmt)

    def load(self, ld: Load, indices: tuple[int, ...], stmt: Stmt) -> int:
        """T.load: one element of this PE's global memory (or a register), bounds-checked (the
        verifier checks affine indices). A read like any other: the race detector checks it against
        the writes of other blocks and of peers' transfers (and, for signal words, their updates), so
        a load that no wait orders after the write it should see is a RaceError. A uint64 signal
        word reads as int64 (C's conversion)."""
        buf = ld.buffer
        if buf.kind is BufferKind.LOCAL:  # a register of the current thread
            return self.read_register(ld, indices, stmt)
        for dim, (i, extent) in enumerate(zip(indices, buf.shape)):
            if not 0 <= i < extent:
                raise KernelRuntimeError(
                    f"{stmt.op_name}: T.load {format_expr(ld)} is out of bounds: index {i} along dimension {dim} of "
                    f"{buf.name} (extent {extent}) {where(self.pe, self.block, stmt.loc)}"
                )
        coverage = self.world.coverage
        if buf.kind is BufferKind.OUTPUT and coverage is not None and not coverage.written(self.pe, buf, indices):
            raise KernelRuntimeError(
                f"{stmt.op_name}: T.load {format_expr(ld)} reads {buf.name}[{', '.join(map(str, indices))}], which "
                f"nothing has written yet (an output starts undefined: on the GPU this reads garbage); load it after "
                f"the statement or the wait that delivers it {where(self.pe, self.block, stmt.loc)}"
            )
        region = ResolvedRegion(buf, indices, (1,) * len(indices))
        value = int(self.world.memory.access(self.access(AccessKind.READ, region, stmt)).reshape(-1)[0])
        return wrap_int(value, INT64) if buf.dtype == UINT64 else value

    def access(self, kind: AccessKind, region: ResolvedRegion, stmt: Stmt, owner: int | None = None) -> Access:
        """Describes an access by this block; `owner` defaults to this PE (and its shared memory)."""
        owner = self.pe if owner is None else owner
        owner_block = self.block if owner == self.pe else None
        return Access(kind, region, owner, owner_block, self.pe, self.block, stmt)

    def read(self, region: ResolvedRegion, stmt: Stmt) -> np.ndarray:
        return self.world.memory.read(self.access(AccessKind.READ, region, stmt))

    def write(self, region: ResolvedRegion, data: np.ndarray, stmt: Stmt) -> None:
        self.world.memory.write(self.access(AccessKind.WRITE, region, stmt), data)

    def target_pe(self, pe: Expr, stmt: Stmt, what: str = "target PE") -> int:
        """Evaluates a PE operand (a put's target, a get's source, a root) and checks it names a
        PE of the kernel's PE space."""
        value = self.eval(pe, f"the {what}", stmt)
        n = self.world.num_pes
        if not 0 <= value < n:
            k = self.world.kernel
            raise KernelRuntimeError(
                f"{stmt.op_name}: {what} {value} (pe={format_expr(pe)}) is out of range: the kernel's PE space "
                f"{k.mesh_axes} has {n} PEs (0..{n - 1}) {where(self.pe, self.block, stmt.loc)}"
            )
        return value

    def thread(self, stmt: Stmt) -> int:
        """The thread running `stmt` now (bound in a thread-dependent branch, and for register stores)."""
        thread = self.env.get(THREAD_VAR)
        if thread is None:
            at = where(self.pe, self.block, stmt.loc)
            raise KernelRuntimeError(f"internal: {stmt.op_name} needs a thread but runs at block level {at}")
        return thread

    def read_register(self, ld: Load, indices: tuple[int, ...], stmt: Stmt) -> int:
        """A register read in an expression of `stmt` (Load of a LOCAL buffer), bounds-checked."""
        buf = ld.buffer
        for dim, (i, extent) in enumerate(zip(indices, buf.shape)):
            if not 0 <= i < extent:
                raise KernelRuntimeError(
                    f"{stmt.op_name}: register read {format_expr(ld)} is out of bounds: index {i} along dimension "
                    f"{dim} of {buf.name} (extent {extent}) {where(self.pe, self.block, stmt.loc)}"
                )
        thread = self.thread(stmt)
        value = self.registers.read(buf, thread, indices)
        if value is None:
            shown = f"{buf.name}[{', '.join(map(str, indices))}]"
            raise KernelRuntimeError(
                f"{stmt.op_name}: thread {thread} reads the register {shown} before writing it (T.alloc_local/"
                f"alloc_var registers start undefined; give alloc_var an init=) {where(self.pe, self.block, stmt.loc)}"
            )
        return value


def run_body(ctx: BlockContext, body: tuple[Stmt, ...]) -> Body:
    """Runs a statement list for one block; yields after each statement (the wait, if any).

    The caller must hold the world's lock while advancing it and must not resume it before the
    yielded wait is ready."""
    for stmt in body:
        ctx.stmt = stmt
        rule = INTERPRET.lookup_entry(stmt, RunKind.BODY, RunKind.STATEMENT)
        if rule.kind is RunKind.BODY:
            yield from rule.fn(ctx, stmt)
        else:
            yield from run_stmt(ctx, stmt, rule.fn)


def run_stmt(ctx: BlockContext, stmt: Stmt, rule: Callable[[BlockContext, Any], Wait | None]) -> Body:
    """Runs an ordinary statement: once for the block, or once per active thread (in a
    thread-dependent branch; a per-thread statement such as a register store: every thread at
    block level), `tx` bound."""
    threads: Iterable[int] | None = ctx.threads
    if threads is None and stmt.per_thread:
        threads = range(ctx.world.kernel.threads)
    if threads is None:
        yield rule(ctx, stmt)
        return
    for t in threads:
        ctx.env[THREAD_VAR] = t
        try:
            wait = rule(ctx, stmt)
        finally:
            ctx.env.pop(THREAD_VAR, None)
        yield wait
