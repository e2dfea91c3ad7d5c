"""Runs all blocks of one PE on the calling thread, interleaved.

Blocks are generators (see `evaluator.block_program`). Each pass advances every block whose
wait (if any) is ready by one statement, under the world's lock, and releases the lock between
passes so other PEs progress. When no block of the PE can move, the PE hands its waits to the
world, which blocks the thread until one is ready (or detects a deadlock). After the last block
the PE takes part in the end-of-kernel quiet + barrier, then returns its outputs.
"""

from __future__ import annotations

import time
from collections.abc import Generator
from dataclasses import dataclass

import numpy as np

from ..ir.tile_queue import TileQueue
from .evaluator import BlockContext, block_program
from .memory import Block
from .waits import Wait
from .world import World


@dataclass
class _BlockRun:
    ctx: BlockContext
    program: Generator[Wait | None, None, None]
    wait: Wait | None = None

    @property
    def block(self) -> Block:
        return self.ctx.block

    def progress(self) -> str:
        """Where the block is (timeout reports): its statement and the iterations of its loops."""
        ctx = self.ctx
        if ctx.stmt is None:
            return "has not started"
        where = f"at {ctx.stmt.op_name} ({ctx.stmt.loc})"
        loops = [f"tile {ctx.env.get(loop.var, '(drawing)')} of {loop.extent} of the tile queue at {loop.loc}"
                 if isinstance(loop, TileQueue) else
                 f"iteration {ctx.env[loop.var]} of {loop.extent} of the loop at {loop.loc}" for loop in ctx.loops]
        return where + (", " + ", ".join(reversed(loops)) if loops else "")


def run_pe(world: World, pe: int, deadline: float) -> list[np.ndarray]:
    """Executes the kernel for `pe` (already joined to `world`) and returns its outputs.

    An error marks the world failed before the lock is released, so no other PE starts a pass
    (and, say, reports a second race) before it knows: the first error is the one all PEs report.
    `deadline` bounds the whole call: checked before every pass (one statement per block), so a
    PE that computes without ever waiting stops too (InterpreterTimeoutError, world.py).
    """
    body = world.kernel.body
    contexts = [BlockContext(world, pe, b) for b in world.blocks]
    live = [_BlockRun(ctx, block_program(ctx, body)) for ctx in contexts]
    world.running[pe] = live  # updated in place, under the lock: the timeout report reads it
    while live:
        with world.lock:
            try:
                if time.monotonic() > deadline:
                    world.raise_timeout(pe)
                live[:] = _advance(world, pe, live, deadline)
            except BaseException as err:
                world.fail(pe, err)
                raise
    with world.lock:
        try:
            world.check_failed(pe)
            world.memory.check_left_zero(pe)  # every block of this PE is done: its scratch is final
            end = world.arrive_at_end(pe)
            world.wait_any(pe, [end], deadline)
            world.check_replicated(pe)
        except BaseException as err:
            world.fail(pe, err)
            raise
        return world.memory.outputs(pe)


def _advance(world: World, pe: int, live: list[_BlockRun], deadline: float) -> list[_BlockRun]:
    """One pass (under the lock): every block whose wait is ready runs one statement; when none
    can, the PE waits for one. Returns the blocks still running."""
    world.check_failed(pe)
    progressed = False
    still = []
    for run in live:
        if run.wait is not None:
            if not run.wait.ready():
                still.append(run)
                continue
            world.resumed(run.wait)  # the block is now ordered after what it waited for
        progressed = True
        try:
            run.wait = next(run.program)
        except StopIteration:
            world.block_done(pe, run.block)
            continue
        still.append(run)
    if still and not progressed:
        world.wait_any(pe, [run.wait for run in still if run.wait is not None], deadline)
    return still
