"""`T.Scale(level)`: the index and count at each scale of the HDA, thread -> node.

| level         | index                                   | count                         |
| ------------- | --------------------------------------- | ----------------------------- |
| "thread"      | the thread in its block (`tx`)          | threads per block             |
| "warp"        | the warp in its block (`tx // 32`)      | warps per block               |
| "warpgroup"   | the warpgroup in its block (`tx // 128`)| warpgroups per block          |
| "block"       | the block in the grid (x fastest)       | blocks of the grid            |
| "device"      | the PE in the kernel's PE space         | PEs (`get_pe_num()`)          |
| "node"        | this device's node in the launch layout | nodes of the launch           |

Thread, warp and warpgroup indices are built on `tx`, so conditions on them are thread-dependent
(per-thread branches, ir/control.py) and a statement issued once per block may not depend on them
(the verifier names the line). The node index and count are run-time values: on the GPU NVSHMEM's
node team gives them (ranks placed node-major on nodes of equal size, as the launcher does); in
the interpreter `InterpretOptions(pes_per_node=k)` places kernel PEs node-major, k per node.
"""

from __future__ import annotations

import math

from ..errors import KernelTraceError
from ..ir.control import THREAD_VAR
from ..ir.expr import NODE_COUNT_VAR, NODE_VAR, PE_VAR, Const, Expr, program_id_var
from .source import user_source_loc
from .state import TraceState, current_trace

WARP_THREADS = 32
WARPGROUP_THREADS = 128


class ScaleAxis(tuple):
    """`(index, count)` of a scale; also a context manager: `with T.Scale("device") as (pe, n):`."""

    def __enter__(self) -> ScaleAxis:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def _block(state: TraceState) -> tuple[Expr, Expr]:
    index: Expr = Const(0)
    stride = 1
    for axis, extent in enumerate(state.grid):
        index = index + program_id_var(axis) * stride if axis else program_id_var(axis)
        stride *= extent
    return index, Const(math.prod(state.grid))


def _threads(state: TraceState, per: int) -> tuple[Expr, Expr]:
    if per == 1:
        return THREAD_VAR, Const(state.threads)
    return THREAD_VAR // per, Const(-(-state.threads // per))


_LEVELS = {
    "thread": lambda s: _threads(s, 1),
    "warp": lambda s: _threads(s, WARP_THREADS),
    "warpgroup": lambda s: _threads(s, WARPGROUP_THREADS),
    "block": _block,
    "device": lambda s: (PE_VAR, Const(s.num_pes)),
    "node": lambda s: (NODE_VAR, NODE_COUNT_VAR),
}


def Scale(level: str) -> ScaleAxis:
    """`(index, count)` at a scale of the HDA: "thread", "warp", "warpgroup", "block", "device"
    (this PE and the PE count along the kernel's mesh axes) or "node" (this device's node and the
    node count of the launch), e.g. `with T.Scale("warp") as (warp, warps):` or
    `node, nodes = T.Scale("node")`. See the module doc for each level's meaning."""
    state = current_trace("Scale")
    rule = _LEVELS.get(level) if isinstance(level, str) else None
    if rule is None:
        raise KernelTraceError(
            f"T.Scale({level!r}) is not a scale; use one of {', '.join(repr(k) for k in _LEVELS)}",
            user_source_loc(),
        )
    return ScaleAxis(rule(state))


__all__ = ["Scale", "ScaleAxis"]
