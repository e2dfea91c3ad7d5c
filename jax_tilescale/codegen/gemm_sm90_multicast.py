"""Which tile two neighbouring blocks of the Hopper GEMM lowering (`gemm_sm90`) can load once for both: the check
behind a two-block cluster multicasting a tile (gemm_sm90.MULTICAST), by evaluating the tile's start on every block
pair and iteration (exact, not a guess)."""

from __future__ import annotations

import dataclasses

import numpy as np

from ..ir.control import If
from ..ir.evaluate import evaluate_array
from ..ir.expr import Expr, Var, VarKind
from ..ir.kernel_ir import KernelIR
from ..ir.nodes import Copy, Loop
from .gemm_sm90_load import GemmLoop
from .gemm_sm90_queue import queue_of

MAX_CHECKED_POINTS = 1 << 23  # (block pairs x iterations) the sharing check evaluates at most


def pair_shares(copy: Copy, gl: GemmLoop, grid: tuple[int, ...]) -> bool:
    """Whether blocks (2c, y, z) and (2c + 1, y, z) copy the same source tile at every iteration:
    checked by evaluating the tile's start on every such pair and iteration (exact, not a guess). In a
    tile loop (persistent kernels) every iteration of the loops around it counts too, and the ifs between
    must take the same branch in both blocks: a block that skips a tile would leave its peer's stage
    waiting for the half it multicasts."""
    loops = [s for s in gl.nest if isinstance(s, Loop)]  # the nest is loops and ifs (gemm_sm90_nest.nesting)
    if not all(isinstance(s.extent, int) for s in loops):
        return False
    gx, gy, gz = (*grid, 1, 1)[:3]
    extents = [s.extent for s in loops] + [gl.loop.extent]
    if gx % 2 or (gx // 2) * gy * gz * int(np.prod(extents)) > MAX_CHECKED_POINTS:
        return False
    axes = np.meshgrid(np.arange(0, gx, 2, dtype=np.int64), np.arange(gy, dtype=np.int64),
                       np.arange(gz, dtype=np.int64), *(np.arange(e, dtype=np.int64) for e in extents),
                       indexing="ij", sparse=True)
    pid = [Var(VarKind.PROGRAM_ID, a) for a in range(3)]
    even = {pid[0]: axes[0], pid[1]: axes[1], pid[2]: axes[2],
            **{s.var: axis for s, axis in zip([*loops, gl.loop], axes[3:])}}
    odd = {**even, pid[0]: axes[0] + 1}
    guards = [s.cond for s in gl.nest if isinstance(s, If)]
    for e in [*copy.src.starts, *guards]:
        if not isinstance(e, Expr):  # an element value (reads memory): not decidable here
            return False
        a, b = evaluate_array(e, even), evaluate_array(e, odd)
        if a is None or b is None or not np.array_equal(*np.broadcast_arrays(a, b)):
            return False
    return True


def with_multicast(gl: GemmLoop, kernel: KernelIR) -> GemmLoop:
    """The loop with the bigger of its tiles that a block pair shares multicast, if either is."""
    # a multicast stage's barriers count TMA bytes only; the kernel's own clusters are not pairs along x
    if gl.by_threads or kernel.cluster or queue_of(gl.nest) is not None:  # a queue's pair would draw 2 tiles
        return gl
    for role, op in sorted((("a", gl.a), ("b", gl.b)), key=lambda r: -r[1].stage_bytes):
        if pair_shares(op.copy, gl, kernel.grid):
            return dataclasses.replace(gl, multicast=role)
    return gl
