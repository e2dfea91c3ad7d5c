"""Interpreter rules of the cluster statements (ir/cluster.py); the clusters themselves: clusters.py.

The blocks of a cluster are blocks of one PE, run interleaved like all of them (scheduler.py).
`T.cluster_sync()` is a barrier of the cluster's blocks (a round of `Barrier`), and the race
detector joins their clocks when the round completes: accesses before it are ordered before those
after, in every block of the cluster. A block's end is one more round (`end_of_block`), as the
generated code meets its cluster before it exits, so a peer's tile stays in place while any block
of its cluster may still address it. A `T.cluster_tile` copy is a plain access of this block to a
peer's shared memory (owner: that block): unordered with the peer's own accesses, it is a race.
"""

from __future__ import annotations

from ..errors import KernelRuntimeError
from ..ir.cluster import ClusterCopy, ClusterSync
from ..ir.expr import format_expr
from .block import INTERPRET, BlockContext
from .memory import Access, AccessKind, where
from .waits import BarrierWait


def _arrive(ctx: BlockContext, stmt: ClusterSync | None) -> BarrierWait:
    cl = ctx.world.clusters
    barrier = cl.barrier(ctx.pe, ctx.block)
    generation, complete = barrier.arrive()
    if complete:  # every block of the cluster is here: each is ordered after all the others' accesses
        race = ctx.world.race
        race.join_all([race.block_agent(ctx.pe, b) for b in cl.members(ctx.block)])
        barrier.release()
    return BarrierWait(barrier, generation, ctx.pe, ctx.block, stmt)


def end_of_block(ctx: BlockContext) -> BarrierWait | None:
    """The cluster's meeting at a block's end (None without clusters): no block of a cluster ends
    while another may still address its tiles."""
    return _arrive(ctx, None) if ctx.world.clusters.size > 1 else None


@INTERPRET.register(ClusterSync)
def _cluster_sync(ctx: BlockContext, s: ClusterSync) -> BarrierWait:
    return _arrive(ctx, s)


@INTERPRET.register(ClusterCopy)
def _cluster_copy(ctx: BlockContext, s: ClusterCopy) -> None:
    cl = ctx.world.clusters
    rank = ctx.eval(s.rank, "the cluster rank", s)
    if not 0 <= rank < cl.size:
        raise KernelRuntimeError(
            f"copy: cluster rank {rank} (rank={format_expr(s.rank)}) is out of range: the cluster "
            f"{ctx.world.kernel.cluster} has blocks 0..{cl.size - 1} {where(ctx.pe, ctx.block, s.loc)}")
    peer = cl.member(ctx.block, rank)
    src, dst = ctx.resolve(s.src, "src", s), ctx.resolve(s.dst, "dst", s)
    src_block, dst_block = (ctx.block, peer) if s.remote_dst else (peer, ctx.block)
    memory = ctx.world.memory
    data = memory.read(Access(AccessKind.READ, src, ctx.pe, src_block, ctx.pe, ctx.block, s))
    if data.dtype != dst.buffer.dtype:  # to or from a fragment: numpy's round-to-nearest cast, as T.copy
        data = data.astype(dst.buffer.dtype)
    memory.write(Access(AccessKind.WRITE, dst, ctx.pe, dst_block, ctx.pe, ctx.block, s), data)
