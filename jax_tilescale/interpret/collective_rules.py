"""Interpreter rules of the team collectives: barrier_all_block/_warp, sync_all_block/_warp,
broadcast* and fcollect* (collectives.py keeps their instances). Data moves when a PE arrives, as
the generated code does (it puts first, then meets): broadcast's root writes `dst` on every PE,
fcollect's caller writes its rows of `dst` on every PE. The barrier forms first complete the PE's
puts (quiet); the sync forms do not.
"""

from __future__ import annotations

import numpy as np

from ..ir.nodes import Broadcast, Fcollect, Stmt, TeamBarrier
from .block import INTERPRET, BlockContext
from .collectives import Call
from .memory import AccessKind, ResolvedRegion
from .waits import Wait


@INTERPRET.register(TeamBarrier)
def team_barrier(ctx: BlockContext, s: TeamBarrier) -> Wait:
    if s.quiet:
        ctx.world.quiet(ctx.pe, ctx.block)
    return ctx.world.team_arrive(ctx.pe, Call(ctx.block, s, ()))


def _write_everywhere(ctx: BlockContext, s: Stmt, region: ResolvedRegion, data: np.ndarray) -> None:
    memory = ctx.world.memory
    for q in range(ctx.world.num_pes):
        memory.write(ctx.access(AccessKind.WRITE, region, s, owner=q), data)


@INTERPRET.register(Broadcast)
def broadcast(ctx: BlockContext, s: Broadcast) -> Wait:
    root = ctx.target_pe(s.root, s, "root")
    dst = ctx.resolve(s.dst, "dst", s)  # a symmetric address: the same on every PE (checked)
    if ctx.pe == root:
        src = ctx.resolve(s.src, "src", s)
        _write_everywhere(ctx, s, dst, ctx.read(src, s).reshape(dst.sizes))
    return ctx.world.team_arrive(ctx.pe, Call(ctx.block, s, (root, dst.starts)))


@INTERPRET.register(Fcollect)
def fcollect(ctx: BlockContext, s: Fcollect) -> Wait:
    src = ctx.resolve(s.src, "src", s)
    dst = ctx.resolve(s.dst, "dst", s)
    rows = src.sizes[0]
    mine = ResolvedRegion(dst.buffer, (dst.starts[0] + ctx.pe * rows, *dst.starts[1:]), (rows, *dst.sizes[1:]))
    _write_everywhere(ctx, s, mine, ctx.read(src, s).reshape(mine.sizes))
    return ctx.world.team_arrive(ctx.pe, Call(ctx.block, s, (dst.starts,)))
