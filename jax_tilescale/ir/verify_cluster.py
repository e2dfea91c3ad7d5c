"""Verifier rules of the cluster statements (ir/cluster.py), registered in verify_base.VERIFY, and
the kernel-level checks of a cluster shape (`check_cluster`, called by verify.py)."""

from __future__ import annotations

from ..errors import KernelTraceError
from .buffers import BufferKind
from .cluster import ClusterCopy, ClusterSync, cluster_size
from .kernel_ir import KernelIR
from .nodes import BLOCK_LOCAL, walk_stmts
from .ranges import Ranges, value_range
from .verify_base import VERIFY, check_kind, check_region, check_same_shape

# Hopper's portable limit on blocks per cluster (more needs a non-portable launch attribute).
MAX_CLUSTER_BLOCKS = 8


def check_cluster(kernel: KernelIR) -> None:
    """The cluster shape against the grid, and where the cluster statements stand."""
    cl, grid, loc = kernel.cluster, kernel.grid, kernel.loc
    if cl:
        if len(cl) != len(grid) or any(isinstance(c, bool) or not isinstance(c, int) or c < 1 for c in cl):
            raise KernelTraceError(f"cluster must give one positive int per grid axis {grid}, got {cl!r}", loc)
        if any(g % c for g, c in zip(grid, cl)):
            raise KernelTraceError(
                f"cluster {cl} must divide the grid {grid} along every axis (a cluster is a box of whole blocks)", loc)
        if cluster_size(cl) > MAX_CLUSTER_BLOCKS:
            raise KernelTraceError(
                f"cluster {cl} has {cluster_size(cl)} blocks; a cluster holds at most {MAX_CLUSTER_BLOCKS}", loc)
    top = {id(s) for s in kernel.body}
    for s in walk_stmts(kernel.body):
        if isinstance(s, (ClusterSync, ClusterCopy)) and cluster_size(cl) == 1:
            raise KernelTraceError(
                f"{s.op_name}: the kernel has no cluster; give ts.kernel(cluster=...) a shape of more than one block "
                "(e.g. cluster=(2, 1, 1) pairs neighbouring blocks along grid axis 0)", s.loc)
        if isinstance(s, ClusterSync) and id(s) not in top:
            raise KernelTraceError(
                "cluster_sync: must stand at the top level of the kernel's body, outside loops and branches (every "
                "thread of every block of the cluster reaches it the same number of times)", s.loc)


@VERIFY.register(ClusterSync)
def _verify_cluster_sync(s: ClusterSync, kernel: KernelIR, ranges: Ranges) -> None:
    return None  # no operands; where it stands: check_cluster


@VERIFY.register(ClusterCopy)
def _verify_cluster_copy(s: ClusterCopy, kernel: KernelIR, ranges: Ranges) -> None:
    check_region(s.src, ranges, "copy src", s.loc)
    check_region(s.dst, ranges, "copy dst", s.loc)
    check_kind(s.remote, frozenset({BufferKind.SHARED}), "copy", "cluster tile",
               "a peer block's tile is one of its shared tiles (T.alloc_shared)", s.loc)
    check_kind(s.local, BLOCK_LOCAL, "copy", "local side of a cluster copy",
               "the other side is this block's own tile", s.loc)
    cast = s.local.buffer.kind is BufferKind.FRAGMENT
    check_same_shape(s.src, s.dst, "copy", s.loc, cast=cast)
    size = cluster_size(kernel.cluster)
    rng = value_range(s.rank, ranges)
    if rng is not None and (rng[0] < 0 or rng[1] >= size):
        raise KernelTraceError(
            f"copy: cluster rank {rng[0] if rng[0] < 0 else rng[1]} is out of range: the cluster {kernel.cluster} has "
            f"blocks 0..{size - 1}", s.loc)
