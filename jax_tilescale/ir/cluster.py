"""Thread-block clusters (Hopper): the statements through which the blocks of one cluster share
their shared memory (CUDA's distributed shared memory).

A kernel launched with `ts.kernel(cluster=(cx, cy, cz))` runs its blocks in groups of cx * cy * cz
neighbours along the grid (the cluster of block (x, y, z) is the blocks (x // cx * cx + i, ...));
the GPU schedules a cluster's blocks at once, each on its own SM. A block's rank in its cluster is
x % cx + cx * (y % cy + cy * (z % cz)) (`T.cluster_rank()`, the hardware's %cluster_ctarank).
Every block of a cluster starts before any block's first statement runs and none ends before all
have run their last (the generated code meets the cluster at both ends), so a block may address a
peer's shared tiles anywhere in between; `T.cluster_sync()` orders those accesses.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .expr import Expr
from .nodes import Region, Stmt


@dataclass(frozen=True)
class ClusterSync(Stmt):
    """Every thread of every block of this block's cluster arrives before any continues; the shared
    memory accesses of the cluster's blocks before it (their own tiles' and their peers') happen
    before those after it (barrier.cluster.arrive.release / wait.acquire). It stands at the top
    level of the kernel's body: every thread of the cluster must reach it the same number of
    times."""

    op_name = "cluster_sync"


@dataclass(frozen=True)
class ClusterCopy(Stmt):
    """`T.copy` where one side is a shared tile of block `rank` of this block's cluster
    (`T.cluster_tile(tile, rank)`; `rank` may be this block's own): `remote_dst` says which side.
    The other side is this block's own shared or fragment tile; shapes match as for T.copy, and a
    fragment side may cast. All threads of the block take part; the statement orders nothing
    across blocks (a `T.cluster_sync()` does)."""

    src: Region
    dst: Region
    rank: Expr
    remote_dst: bool = True
    op_name = "copy"

    @property
    def remote(self) -> Region:
        """The peer block's side."""
        return self.dst if self.remote_dst else self.src

    @property
    def local(self) -> Region:
        """This block's own side."""
        return self.src if self.remote_dst else self.dst


def cluster_size(cluster: tuple[int, ...]) -> int:
    """Blocks per cluster (1 for a kernel without clusters, `cluster == ()`)."""
    return math.prod(cluster)
