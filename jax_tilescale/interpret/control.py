"""Per-thread code in the interpreter: ifs, register stores and reads (ir/control.py).

A block still runs as one generator, one statement at a time (so waits, races and deadlocks work
as everywhere else: the block is the race detector's agent). Per-thread meaning comes from the
set of active threads (`BlockContext.threads`): None at block level; inside a thread-dependent
branch, the threads that took it. There every statement runs once per active thread, in thread
order, with `tx` bound (`if tx < 4: putmem(...)` issues four puts; a wait inside waits for each of
those threads in turn), and a nested if splits the set. The `then` side runs for its threads
first, then the `else` side for the others; the block continues after the if when all are done
(the CUDA code ends a thread-dependent if with __syncthreads(), so it means the same there).
Register stores outside thread-dependent branches run for every thread of the block.

Registers live here, per block, not in the launch memory: no other thread can see them, so they
take no part in race detection. Reading an element the thread never wrote is an error (the GPU
would read garbage); stores wrap to the register's integer type, as a C conversion does.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import KernelRuntimeError
from ..ir.control import THREAD_VAR, If, LocalStore, thread_dependent
from ..ir.expr import Load, format_expr
from ..ir.nodes import Buffer, Stmt
from ..ir.values import Value
from .memory import where
from .tile_ops import block_condition

if TYPE_CHECKING:
    from .evaluator import BlockContext
    from .waits import Wait

Body = Generator["Wait | None", None, None]
RunBody = Callable[["BlockContext", tuple[Stmt, ...]], Body]


def wrap_int(value: int, dtype: np.dtype) -> int:
    """`value` converted to the integer `dtype` as C does (modulo 2**bits, two's complement)."""
    bits = 8 * dtype.itemsize
    value &= (1 << bits) - 1
    if dtype.kind == "i" and value >= 1 << (bits - 1):
        value -= 1 << bits
    return value


class Registers:
    """The registers of one block: per buffer, one array per thread and what each thread wrote."""

    def __init__(self, threads: int):
        self.threads = threads
        self.values: dict[Buffer, np.ndarray] = {}
        self.written: dict[Buffer, np.ndarray] = {}

    def _arrays(self, buf: Buffer) -> tuple[np.ndarray, np.ndarray]:
        if buf not in self.values:
            self.values[buf] = np.zeros((self.threads, *buf.shape), buf.dtype)
            self.written[buf] = np.zeros((self.threads, *buf.shape), bool)
        return self.values[buf], self.written[buf]

    def store(self, buf: Buffer, thread: int, index: tuple[int, ...], value: int) -> None:
        values, written = self._arrays(buf)
        values[(thread, *index)] = wrap_int(value, buf.dtype)
        written[(thread, *index)] = True

    def read(self, buf: Buffer, thread: int, index: tuple[int, ...]) -> int | None:
        """The element, or None when this thread has not written it."""
        values, written = self._arrays(buf)
        return int(values[(thread, *index)]) if written[(thread, *index)] else None


def current_thread(ctx: BlockContext, stmt: Stmt) -> int:
    thread = ctx.env.get(THREAD_VAR)
    if thread is None:
        raise KernelRuntimeError(
            f"internal: {stmt.op_name} needs a thread but runs at block level {where(ctx.pe, ctx.block, stmt.loc)}"
        )
    return thread


def read_register(ctx: BlockContext, ld: Load, indices: tuple[int, ...], stmt: Stmt) -> int:
    """A register read in an expression of `stmt` (Load of a LOCAL buffer), bounds-checked."""
    buf = ld.buffer
    for dim, (i, extent) in enumerate(zip(indices, buf.shape)):
        if not 0 <= i < extent:
            raise KernelRuntimeError(
                f"{stmt.op_name}: register read {format_expr(ld)} is out of bounds: index {i} along dimension {dim} of "
                f"{buf.name} (extent {extent}) {where(ctx.pe, ctx.block, stmt.loc)}"
            )
    thread = current_thread(ctx, stmt)
    value = ctx.registers.read(buf, thread, indices)
    if value is None:
        shown = f"{buf.name}[{', '.join(map(str, indices))}]"
        raise KernelRuntimeError(
            f"{stmt.op_name}: thread {thread} reads the register {shown} before writing it (T.alloc_local/alloc_var "
            f"registers start undefined; give alloc_var an init=) {where(ctx.pe, ctx.block, stmt.loc)}"
        )
    return value


def local_store(ctx: BlockContext, s: LocalStore) -> None:
    thread = current_thread(ctx, s)
    dst = ctx.resolve(s.dst, "register", s)
    value = ctx.eval(s.value, "the stored value", s)
    ctx.registers.store(s.dst.buffer, thread, dst.starts, value)


def _taken(ctx: BlockContext, s: If) -> bool:
    """The condition, for the block or for the thread bound in ctx.env: an index condition, or an
    element value read (a block access of the memory it reads, seen by the race detector)."""
    if isinstance(s.cond, Value):
        return block_condition(ctx, s)
    return bool(ctx.eval(s.cond, "the condition", s))


def run_if(ctx: BlockContext, s: If, run_body: RunBody) -> Body:
    """A block-uniform if runs one side at the current thread set; a thread-dependent one splits
    the active threads by the condition (each evaluates it) and runs each side for its threads.
    (An if inside a T.Parallel body is per iteration: interpret/tile_ops.py runs it.)"""
    if not thread_dependent(s.cond):
        yield from run_body(ctx, s.then_body if _taken(ctx, s) else s.else_body)
        return
    active: Iterable[int] = ctx.threads if ctx.threads is not None else range(ctx.world.kernel.threads)
    then_threads, else_threads = [], []
    try:
        for t in active:
            ctx.env[THREAD_VAR] = t
            (then_threads if _taken(ctx, s) else else_threads).append(t)
    finally:
        ctx.env.pop(THREAD_VAR, None)
    outer = ctx.threads
    try:
        for threads, body in ((then_threads, s.then_body), (else_threads, s.else_body)):
            if threads and body:
                ctx.threads = tuple(threads)
                yield from run_body(ctx, body)
    finally:
        ctx.threads = outer


def run_stmt(ctx: BlockContext, stmt: Stmt, rule: Callable[[BlockContext, Any], Wait | None]) -> Body:
    """Runs an ordinary statement: once for the block, or once per active thread (in a
    thread-dependent branch; register stores: every thread at block level), `tx` bound."""
    threads: Iterable[int] | None = ctx.threads
    if threads is None and isinstance(stmt, LocalStore):
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


# Statements with nested bodies: (context, statement, the body runner) -> the body's generator.
NESTED_RULES: dict[type, Callable[[BlockContext, Any, RunBody], Body]] = {If: run_if}
RULES: dict[type, Callable[[BlockContext, Any], None]] = {LocalStore: local_store}
