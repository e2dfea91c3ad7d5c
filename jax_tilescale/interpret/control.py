"""Control in the interpreter: ifs and register stores (ir/control.py), tile queues (ir/tile_queue.py).

A block still runs as one generator, one statement at a time (so waits, races and deadlocks work
as everywhere else: the block is the race detector's agent). Per-thread meaning comes from the
set of active threads (`BlockContext.threads`): None at block level; inside a thread-dependent
branch, the threads that took it. There every statement runs once per active thread, in thread
order, with `tx` bound (`if tx < 4: putmem(...)` issues four puts; a wait inside waits for each of
those threads in turn; block.run_stmt), and a nested if splits the set. The `then` side runs for
its threads first, then the `else` side for the others; the block continues after the if when all
are done (the CUDA code ends a thread-dependent if with __syncthreads(), so it means the same
there). Register stores outside thread-dependent branches run for every thread of the block; the
registers are registers.py's.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable

from ..ir.control import THREAD_VAR, If, LocalStore, thread_dependent
from ..ir.nodes import full_region
from ..ir.tile_queue import TileQueue
from ..ir.values import Value
from .block import INTERPRET, BlockContext, Body, RunKind, run_body
from .memory import AccessKind
from .tile_ops import block_condition


@INTERPRET.register(LocalStore)
def local_store(ctx: BlockContext, s: LocalStore) -> None:
    thread = ctx.thread(s)
    dst = ctx.resolve(s.dst, "register", s)
    value = ctx.eval(s.value, "the stored value", s)
    ctx.registers.store(s.dst.buffer, thread, dst.starts, value)


def _taken(ctx: BlockContext, s: If) -> bool:
    """The condition, for the block or for the thread bound in ctx.env: an index condition, or an
    element value read (a block access of the memory it reads, seen by the race detector)."""
    if isinstance(s.cond, Value):
        return block_condition(ctx, s)
    return bool(ctx.eval(s.cond, "the condition", s))


@INTERPRET.register(If, kind=RunKind.BODY)
def run_if(ctx: BlockContext, s: If) -> Body:
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


def _static_ticket(ctx: BlockContext, s: TileQueue, round_: int) -> int:
    """Round `round_`'s tile in the queue's static rounds: `round * blocks + block`, the block's linear number
    counting axis 0 fastest (CUDA's blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z))."""
    grid = ctx.world.kernel.grid
    block = sum(b * math.prod(grid[:i]) for i, b in enumerate(ctx.block))
    return round_ * math.prod(grid) + block


def _draw(ctx: BlockContext, s: TileQueue) -> int:
    """The block's next ticket from the queue's counter: an atomic add (it orders no other memory: two tiles'
    accesses to one element race as they would in any two blocks), the counter set back to zero by the launch's
    last ticket (ir/tile_queue.py)."""
    word = ctx.resolve(full_region(s.counter), "tile queue counter", s)
    view = ctx.world.memory.access(ctx.access(AccessKind.ATOMIC, word, s))
    ticket = int(view.reshape(-1)[0])
    blocks = math.prod(ctx.world.kernel.grid)
    view[...] = 0 if ticket == s.last_ticket(blocks) else ticket + 1
    return s.static_tiles(blocks) + ticket


@INTERPRET.register(TileQueue, kind=RunKind.BODY)
def run_tile_queue(ctx: BlockContext, s: TileQueue) -> Body:
    """The body for each ticket the block draws below the queue's extent; the other blocks draw between the
    rounds (each draw is a step of the block, so the scheduler deals the tiles among the blocks that run)."""
    ctx.loops.append(s)
    try:
        for round_ in itertools.count():
            ctx.stmt = s
            ticket = _static_ticket(ctx, s, round_) if round_ < s.static_rounds else _draw(ctx, s)
            if ticket >= s.extent:
                return
            yield None  # another block may draw before this one runs its tile
            ctx.env[s.var] = ticket
            yield from run_body(ctx, s.body)
    finally:
        ctx.env.pop(s.var, None)
        ctx.loops.pop()
