"""The Hopper GEMM lowering (`gemm_sm90`) for kernels that communicate: where the block's threads
meet NVSHMEM, and what the producer warpgroup does before it loads a tile a peer wrote.

The plain Hopper frame splits the block at once: a producer warpgroup issues the TMA copies, the
kernel's own threads (the consumers) run every statement. NVSHMEM's block-scoped calls
(`nvshmemx_*_block`) synchronise the whole block (`__syncthreads` inside), so a consumer-only call
would wait for the producer forever. A kernel that communicates is therefore cut in three at its
top level:

- the head: the statements before the first one that touches the plan (a planned loop, an `if`
  holding one, a statement on a pipelined tile or a register accumulator). Every thread of the
  block runs them, the producer's too, as if the kernel had that many threads: block puts, waits
  for a tile's signal (thread 0 acquires, then the whole block meets), element copies;
- the split: from that statement to the last one that touches the plan. The producer warpgroup
  runs the planned loops' copies (mirroring the top-level `if`s around them, whose conditions it
  evaluates itself), the consumers every statement. Here only statements the consumers can issue
  alone may communicate: thread- or warp-scoped ones (thread 0 / warp 0 are consumers), waits;
- the tail: the rest, every thread again, after the producer and the consumers meet
  (`__syncthreads`), each warpgroup first setting its register budget back to an even share
  (`setmaxnreg`), since code after the join runs on every thread.

A tile a peer wrote is read by TMA, which is the async proxy; the peer's writes (NVLink stores or
NVSHMEM puts) are generic-proxy writes that the head's wait acquired for the block. Before its
first bulk copy the producer thread issues `fence.proxy.async.global`, which orders the generic
view it acquired (through the block barrier after the wait) before its async-proxy reads of
global memory. Tiles written by this PE's earlier kernels need no fence (kernel boundaries
order proxies).

Planned loops may stand at the top level or directly in the bodies of a top-level `if` (a tile
read from one buffer or another: the local shard from the input, a peer's from where it
landed); each such loop has its own ring barriers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..ir.control import If, LocalStore, thread_dependent
from ..ir.kernel_ir import KernelIR
from ..ir.nodes import Buffer, Loop, Scope, Stmt, stmt_exprs, walk_stmts
from .common import c_string, indent
from .context import Ctx
from .expr_printer import WHERE_NAME
from .gemm_pattern import buffers_of
from .gemm_sm90_fit import REGISTER_FILE
from .tile_ops import ValuePrinter, condition, enclosing_ranges

MAX_REGS = 256


@dataclass(frozen=True)
class CommRegions:
    """How many top-level statements the whole block runs before the split (`head`) and after it
    (`tail`); see the module doc."""

    head: int
    tail: int


def candidate_loops(kernel: KernelIR) -> list[Loop]:
    """The pipelined loops a communicating kernel's plan may take: at the top level, or directly in
    the then/else body of a top-level `if`."""
    out: list[Loop] = []
    for s in kernel.body:
        if isinstance(s, Loop) and s.num_stages is not None:
            out.append(s)
        elif isinstance(s, If) and not thread_dependent(s.cond):
            out += [t for body in s.bodies for t in body if isinstance(t, Loop) and t.num_stages is not None]
    return out


def _touches(s: Stmt, loops: set[int], plan_buffers: set[Buffer]) -> bool:
    return any(id(t) in loops or buffers_of(t) & plan_buffers for t in walk_stmts((s,)))


def _thread_dependent_stmt(s: Stmt) -> bool:
    if isinstance(s, LocalStore):
        return True
    if isinstance(s, If) and thread_dependent(s.cond):
        return True
    return any(thread_dependent(e) for e in stmt_exprs(s))


def plan_regions(kernel: KernelIR, loops: list[Loop], plan_buffers: set[Buffer]) -> CommRegions | str:
    """Head and tail of a communicating kernel whose plan took `loops` and keeps `plan_buffers`
    (pipelined tiles, register accumulators); or why the plan cannot take it."""
    ids = {id(lp) for lp in loops}
    body = kernel.body
    touching = [i for i, s in enumerate(body) if _touches(s, ids, plan_buffers)]
    first, last = touching[0], touching[-1]
    for s in body[:first] + body[last + 1:]:
        for t in walk_stmts((s,)):
            if _thread_dependent_stmt(t):
                return (f"{t.op_name} at {t.loc} depends on the thread, and the statements before and after the "
                        "GEMM run on every thread of the block, producer warpgroup included")
    for s in body[first:last + 1]:
        for t in walk_stmts((s,)):
            scope = getattr(t, "scope", None)
            if t.team_collective or (t.communicates and scope is Scope.BLOCK):
                return (f"{t.op_name} at {t.loc} needs every thread of the block, but stands between the GEMM's "
                        "first and last statements, where the producer warpgroup runs its own program: move it "
                        "before or after them, or use its thread- or warp-scoped form")
    return CommRegions(first, len(body) - 1 - last)


def join_registers(consumer_regs: int, total_threads: int) -> int:
    """Registers per thread after the producer and the consumers meet: an even share of the file
    (a multiple of 8), at most what the consumers had."""
    return min(consumer_regs, MAX_REGS, REGISTER_FILE // total_threads // 8 * 8)


def nested_producer(kernel: KernelIR, regions: CommRegions, ctx: Ctx,
                    program: Callable[[Loop], list[str] | None]) -> list[str]:
    """The producer's program over the split's statements: `program(loop)` for each planned loop
    (None for a loop the plan did not take), inside the top-level `if`s that hold them, whose
    conditions the producer evaluates itself (they depend on the block and the PE, never on the
    thread)."""
    lines = ["ts_fence_proxy_async_global();  // peers' generic-proxy writes, acquired by the head's waits, "
             "before TMA (async proxy) reads them"]
    for s in kernel.body[regions.head:len(kernel.body) - regions.tail]:
        if isinstance(s, Loop):
            lines += program(s) or []
        elif isinstance(s, If):
            then = [x for t in s.then_body if isinstance(t, Loop) for x in (program(t) or [])]
            other = [x for t in s.else_body if isinstance(t, Loop) for x in (program(t) or [])]
            if not then and not other:
                continue
            printer = ValuePrinter(ctx, enclosing_ranges(ctx.kernel, s))
            branch = [f"if ({condition(s.cond, printer, s.loc)}) {{", *indent(then)]
            branch += ["} else {", *indent(other), "}"] if other else ["}"]
            where = f"const char* const {WHERE_NAME} = {c_string(str(s.loc))}; (void){WHERE_NAME};"
            lines += [f"{{  // the `if` at {s.loc}", *indent([where, *branch]), "}"]
    return lines


__all__ = ["CommRegions", "candidate_loops", "join_registers", "nested_producer", "plan_regions"]
