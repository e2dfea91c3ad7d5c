"""CUDA rules of the cluster statements (ir/cluster.py): the cluster barrier and copies to or from a
peer block's shared tile through its distributed-shared-memory mapping (`mapa`).

The kernel's frame puts `__cluster_dims__` on the entry and meets the cluster at the kernel's start
and end (cuda.py `_frame_body`); a warp-specialised frame's producer warpgroup meets it as often as
the statements do. A copy whose local side is a register fragment of a tensor-core plan is the
plan's (gemm_emit.TensorCorePlan.lines), through `peer_base` below.
"""

from __future__ import annotations

from ..ir.cluster import ClusterCopy, ClusterSync
from ..ir.ranges import value_range
from .body import EMIT
from .compute import copy_lines
from .context import Ctx
from .expr_printer import WHERE_NAME, c_expr
from .tile_ops import enclosing_ranges

PEER_NAME = "ts_peer"  # the peer block's mapping of the remote tile's buffer (bytes)


@EMIT.register(ClusterSync)
def emit_cluster_sync(s: ClusterSync, ctx: Ctx) -> list[str]:
    return ["ts_cluster_sync();"]


def peer_base(s: ClusterCopy, ctx: Ctx) -> list[str]:
    """Lines that define PEER_NAME, block `s.rank`'s mapping of the remote side's buffer, after a check
    of the rank where the verifier could not prove it in range (every thread computes it: block-uniform)."""
    size = ctx.frame.cluster_blocks
    rank = c_expr(s.rank)
    lines = [f"const uint32_t ts_rank = (uint32_t)({rank});"]
    known = value_range(s.rank, enclosing_ranges(ctx.kernel, s))
    if known is None or known[0] < 0 or known[1] >= size:
        lines.append(f"if (ts_rank >= {size}u) ts_fail({WHERE_NAME}, \"cluster rank out of range\", "
                     f"(long long)({rank}), {size});")
    lines.append(f"unsigned char* const {PEER_NAME} = ts_cluster_map({ctx.pointers[s.remote.buffer]}, ts_rank);")
    return lines


@EMIT.register(ClusterCopy)
def emit_cluster_copy(s: ClusterCopy, ctx: Ctx) -> list[str]:
    remote = {"dst_base": PEER_NAME} if s.remote_dst else {"src_base": PEER_NAME}
    return [*peer_base(s, ctx), *copy_lines(ctx, s.src, s.dst, s.loc, **remote)]
