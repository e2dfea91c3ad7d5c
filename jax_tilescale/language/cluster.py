"""Thread-block clusters (`ts.kernel(cluster=...)`, ir/cluster.py): a block's rank in its cluster,
a peer block's shared tile as one side of `T.copy`, and the cluster barrier.

    @ts.kernel(out_shape=..., grid=(n, 2), cluster=(1, 2))
    def k(A, C):
        S = T.alloc_shared((64, 128), jnp.float32)
        ...
        if T.cluster_rank() == 1:
            T.copy(C_f, T.cluster_tile(S, 0))   # into block 0's S
        T.cluster_sync()                        # block 1's stores happen before block 0's reads
        if T.cluster_rank() == 0:
            ...S...
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import KernelTraceError
from ..ir.cluster import ClusterCopy, ClusterSync, cluster_size
from ..ir.expr import Expr, IntLike, program_id_var
from ..ir.nodes import Region, SourceLoc
from ._common import RefLike, expr, region
from .source import user_source_loc
from .state import TraceState, current_trace


def _cluster_of(state: TraceState, op: str, loc: SourceLoc) -> tuple[int, ...]:
    if cluster_size(state.cluster) == 1:
        raise KernelTraceError(
            f"T.{op}: the kernel has no cluster; give ts.kernel(cluster=...) a shape of more than one block "
            "(e.g. cluster=(2, 1, 1) pairs neighbouring blocks along grid axis 0)", loc)
    return state.cluster


def cluster_rank() -> Expr:
    """This block's rank in its cluster, 0 .. blocks per cluster - 1: x % cx + cx * (y % cy + cy *
    (z % cz)) for block (x, y, z) and cluster (cx, cy, cz) (the GPU's %cluster_ctarank)."""
    loc = user_source_loc()
    cl = _cluster_of(current_trace("cluster_rank"), "cluster_rank", loc)
    terms: list[Expr] = []
    stride = 1  # x varies fastest
    for axis, blocks in enumerate(cl):
        if blocks > 1:
            coord = program_id_var(axis) % blocks
            terms.append(coord if stride == 1 else coord * stride)
        stride *= blocks
    rank = terms[0]  # a cluster of more than one block has at least one axis of more than one
    for term in terms[1:]:
        rank = rank + term
    return rank


def cluster_sync() -> None:
    """Every thread of every block of this block's cluster meets here; the cluster's shared-memory
    accesses before it (to its own tiles and to peers') happen before those after it. Stands at
    the top level of the kernel's body (not in a loop or a branch)."""
    state = current_trace("cluster_sync")
    loc = user_source_loc()
    _cluster_of(state, "cluster_sync", loc)
    state.emit(ClusterSync(loc=loc))


@dataclass(frozen=True)
class ClusterTile:
    """`T.cluster_tile(tile, rank)`: shared tile `tile` (or a slice of it) as held by block `rank`
    of this block's cluster; one side of a `T.copy`."""

    region: Region
    rank: Expr


def cluster_tile(tile: RefLike, rank: IntLike) -> ClusterTile:
    """The shared tile `tile` (an `T.alloc_shared` ref or a slice of one) of block `rank` of this
    block's cluster (distributed shared memory: every block of the kernel has the tile at the same
    place). Use it as `T.copy`'s source or destination; the other side is this block's own shared
    or fragment tile. Order the accesses of different blocks with `T.cluster_sync()`."""
    loc = user_source_loc()
    _cluster_of(current_trace("cluster_tile"), "cluster_tile", loc)
    return ClusterTile(region(tile, "cluster_tile", "tile", loc), expr(rank, "cluster_tile", "rank", loc))


def cluster_copy(src: Any, dst: Any) -> None:
    """`T.copy` with a `T.cluster_tile` on one side (called by memory.copy)."""
    state = current_trace("copy")
    loc = user_source_loc()
    if isinstance(src, ClusterTile) and isinstance(dst, ClusterTile):
        raise KernelTraceError("copy: at most one side may be a T.cluster_tile (the other is this block's own tile)",
                               loc)
    if isinstance(dst, ClusterTile):
        state.emit(ClusterCopy(region(src, "copy", "src", loc), dst.region, dst.rank, True, loc=loc))
    else:
        state.emit(ClusterCopy(src.region, region(dst, "copy", "dst", loc), src.rank, False, loc=loc))
