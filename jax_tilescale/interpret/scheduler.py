"""Runs all blocks of one PE on the calling thread, interleaved.

Blocks are generators (see `evaluator.block_program`). Each pass advances every block whose
wait (if any) is ready by one statement, under the world's lock, and releases the lock between
passes so other PEs progress. When no block of the PE can move, the PE hands its waits to the
world, which blocks the thread until one is ready (or detects a deadlock). After the last block
the PE takes part in the end-of-kernel quiet + barrier, then returns its outputs.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass

import numpy as np

from .evaluator import BlockContext, block_program
from .memory import Block
from .waits import Wait
from .world import World


@dataclass
class _BlockRun:
    block: Block
    program: Generator[Wait | None, None, None]
    wait: Wait | None = None


def run_pe(world: World, pe: int, deadline: float) -> list[np.ndarray]:
    """Executes the kernel for `pe` (already joined to `world`) and returns its outputs."""
    body = world.kernel.body
    live = [_BlockRun(b, block_program(BlockContext(world, pe, b), body)) for b in world.blocks]
    while live:
        with world.lock:
            world.check_failed(pe)
            progressed = False
            still = []
            for run in live:
                if run.wait is not None and not run.wait.ready():
                    still.append(run)
                    continue
                progressed = True
                try:
                    run.wait = next(run.program)
                except StopIteration:
                    world.memory.release_block(pe, run.block)
                    continue
                still.append(run)
            live = still
            if live and not progressed:
                world.wait_any(pe, [run.wait for run in live if run.wait is not None], deadline)
    with world.lock:
        world.check_failed(pe)
        end = world.arrive_at_end(pe)
        world.wait_any(pe, [end], deadline)
        return world.memory.outputs(pe)
