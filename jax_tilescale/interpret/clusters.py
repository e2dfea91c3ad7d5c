"""The thread-block clusters of one launch (ir/cluster.py): which blocks form a cluster, the block of
each rank in it (ranks themselves are index expressions: language/cluster.py), and one barrier per
cluster of each PE (its `T.cluster_sync()` rounds and the meeting at the blocks' end: cluster_rules.py)."""

from __future__ import annotations

from ..ir.cluster import cluster_size
from .memory import Block
from .waits import Barrier


class Clusters:
    """The cluster shape of a launch and one barrier per cluster of each PE."""

    def __init__(self, shape: tuple[int, ...]):
        self.shape = shape
        self.size = cluster_size(shape)
        self._barriers: dict[tuple[int, Block], Barrier] = {}

    def origin(self, block: Block) -> Block:
        return tuple(b - b % c for b, c in zip(block, self.shape))

    def member(self, block: Block, rank: int) -> Block:
        """Block `rank` of `block`'s cluster."""
        out = []
        for o, c in zip(self.origin(block), self.shape):
            out.append(o + rank % c)
            rank //= c
        return tuple(out)

    def members(self, block: Block) -> list[Block]:
        return [self.member(block, r) for r in range(self.size)]

    def barrier(self, pe: int, block: Block) -> Barrier:
        key = (pe, self.origin(block))
        found = self._barriers.get(key)
        if found is None:
            found = self._barriers[key] = Barrier(self.size, f"the cluster of blocks {self.members(block)} (PE {pe})")
        return found
