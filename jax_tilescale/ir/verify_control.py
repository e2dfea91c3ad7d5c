"""Verifier rules of control: ifs (thread-dependent or block-uniform, with element-value conditions),
register stores (ir/control.py has the model) and tile queues (ir/tile_queue.py); registered in
verify_base.VERIFY."""

from __future__ import annotations

import contextlib
import math

from ..errors import KernelTraceError
from .buffers import BufferKind
from .cluster import cluster_size
from .control import THREAD_VAR, If, LocalStore, thread_dependent
from .expr import format_expr, is_condition
from .guards import guarded, known_conditions, narrowed
from .kernel_ir import KernelIR
from .nodes import walk_stmts
from .ranges import Ranges
from .tile_queue import TileQueue, needs_every_block
from .values import BOOL, Value, format_value
from .verify_base import VERIFY, check_region, thread_branch, verify_body
from .verify_tile_ops import check_value


@VERIFY.register(If)
def verify_if(s: If, kernel: KernelIR, ranges: Ranges) -> None:
    divergent = thread_dependent(s.cond)
    if divergent and THREAD_VAR not in ranges:
        ranges = {**ranges, THREAD_VAR: (0, kernel.threads - 1)}
    if isinstance(s.cond, Value):
        if s.cond.dtype != BOOL:
            raise KernelTraceError(f"if: the condition {format_value(s.cond)} is {s.cond.dtype.name}, not bool (the "
                                   "language turns `if x[i]:` into `x[i] != 0`)", s.loc)
        check_value(s.cond, ranges, "if", s.loc)
    elif not is_condition(s.cond):
        raise KernelTraceError(f"if: the condition {format_expr(s.cond)} is not a comparison or a combination", s.loc)
    with thread_branch(s) if divergent else contextlib.nullcontext():
        for holds, body in ((True, s.then_body), (False, s.else_body)):
            known = known_conditions(s.cond, holds)
            with guarded(known):
                verify_body(body, kernel, narrowed(known, ranges))


@VERIFY.register(LocalStore)
def verify_local_store(s: LocalStore, kernel: KernelIR, ranges: Ranges) -> None:
    buf = s.dst.buffer
    if buf.kind is not BufferKind.LOCAL:
        raise KernelTraceError(f"store: {buf.name} is a {buf.kind.value} buffer; element stores write registers", s.loc)
    if s.dst.size != 1:
        raise KernelTraceError(f"store: writes one element of {buf.name}, got {s.dst}", s.loc)
    if THREAD_VAR not in ranges:
        ranges = {**ranges, THREAD_VAR: (0, kernel.threads - 1)}
    check_region(s.dst, ranges, "store", s.loc)


@VERIFY.register(TileQueue)
def verify_tile_queue(s: TileQueue, kernel: KernelIR, ranges: Ranges) -> None:
    """Once per launch, every block's own number of rounds: the conditions of ir/tile_queue.py."""
    if not any(top is s for top in kernel.body):
        raise KernelTraceError("tile_queue: it stands at the top level of the kernel's body (one queue per launch: "
                               "inside a loop or an if the blocks would run its rounds out of step)", s.loc)
    if cluster_size(kernel.cluster) > 1:
        raise KernelTraceError(f"tile_queue: not in a kernel with clusters ({kernel.cluster}): the blocks of a "
                               "cluster would take different numbers of tiles", s.loc)
    blocks = math.prod(kernel.grid)
    if s.static_rounds < 0 or s.static_tiles(blocks) > s.extent:
        raise KernelTraceError(
            f"tile_queue: static_rounds={s.static_rounds} deals {s.static_tiles(blocks)} tiles statically over "
            f"{blocks} blocks, more than the queue's {s.extent} (or fewer than none): take static_rounds from 0 to "
            f"{s.extent // blocks}, so that every block reaches the drawn rounds", s.loc)
    for inner in walk_stmts(s.body):
        if needs_every_block(inner):
            raise KernelTraceError(
                f"tile_queue: {inner.op_name} (at {inner.loc}) cannot stand in its body: every block must reach it "
                "the same number of times, and the blocks of a queue run different numbers of tiles "
                "(a deadlock on the GPU)", s.loc)
    verify_body(s.body, kernel, {**ranges, s.var: (0, s.extent - 1)})
