"""CUDA for barriers and collectives over the kernel's PE space.

The PE space may be a team of the mesh (a subset of the processes, numbered through
`args.pe_map`), so none of this calls NVSHMEM's world collectives: everything is built from puts,
quiet, and `ts_team_barrier` (tilescale_device.cuh), a counting barrier on signal words of the
symmetric scratch. The interpreter gives the same meaning (interpret/collective_rules.py):
- barrier_all / sync_all: every block of every PE meets (grid barrier, then block 0 of each PE
  meets the other PEs, then the grid again); barrier_all completes puts first (quiet);
- barrier_all_*/sync_all_* (team barriers), broadcast*, fcollect*: one call per PE per instance;
  thread 0 of the calling block arrives at the team barrier after the block's puts.
  broadcast: the root's block puts `src` into `dst` of every PE (itself included), then quiet and
  team barrier; fcollect: every PE puts its block into rows [pe * n, (pe + 1) * n) of `dst` on
  every PE, then quiet and team barrier. On return the local `dst` is complete everywhere.
The scope of a team barrier changes nothing here (all threads quiet, thread 0 arrives).
"""

from __future__ import annotations

from ..ir.expr import PE_VAR
from ..ir.nodes import BarrierAll, Broadcast, Fcollect, Region, TeamBarrier
from .body import EMIT
from .comm import target_pe, transfer_call
from .common import c_string, indent, scoped
from .context import Ctx
from .expr_printer import PE_VAR_NAME, WHERE_NAME, c_int64

PE_BARRIER = "ts_pe_bar"  # TsTeamBarrier* of barrier_all / sync_all (declared in the prologue)
TEAM_BARRIER = "ts_team_bar"  # TsTeamBarrier* of the team collectives


def _complete(ctx: Ctx, quiet: bool) -> list[str]:
    """Make this thread's earlier writes visible to every PE: NVSHMEM puts (quiet) and plain
    stores, e.g. put_block's (the system-scope fence; all a call-free kernel's puts need)."""
    return (["nvshmem_quiet();"] if quiet and not ctx.call_free else []) + ["__threadfence_system();"]


def _wait_site(op: str) -> str:
    """The trailing arguments of the barriers' waits: what a wait that gives up reports."""
    return f"ts_wait_ctx(args), {WHERE_NAME}, {c_string(op)}"


def _team_barrier_call(barrier: str, op: str) -> str:
    return f"ts_team_barrier({barrier}, args.pe_map, args.npes, {_wait_site(op + ' (team barrier: every PE)')});"


def _team_arrive(ctx: Ctx, barrier: str, op: str) -> list[str]:
    return [
        *ctx.block_sync(),
        f"if (threadIdx.x == 0) {_team_barrier_call(barrier, op)}",
        *ctx.block_sync(),
    ]


@EMIT.register(BarrierAll)
def emit_barrier_all(s: BarrierAll, ctx: Ctx) -> list[str]:
    lines = _complete(ctx, s.quiet)
    op = f"T.{s.op_name}"
    pe_meet = _team_barrier_call(PE_BARRIER, op)
    if ctx.layout.barrier_offset is None:  # a single block: the block barrier is the grid barrier
        return [*lines, *ctx.block_sync(), f"if (threadIdx.x == 0) {pe_meet}", *ctx.block_sync()]
    # The PE's blocks meet, block 0 meets the other PEs, and the blocks meet again to learn it.
    grid_op = f"{op} (grid barrier: every block of this PE)"
    meet = f"ts_grid_barrier(ts_bar_count, ts_bar_gen, {ctx.num_blocks}u, {_wait_site(grid_op)});"
    return [
        *lines,
        meet,
        "if (blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0 && threadIdx.x == 0) {",
        f"  {pe_meet}",
        "}",
        meet,
    ]


@EMIT.register(TeamBarrier)
def emit_team_barrier(s: TeamBarrier, ctx: Ctx) -> list[str]:
    # Every thread completes its own puts: warp-scope calls may follow block-wide puts.
    return [*_complete(ctx, s.quiet), *_team_arrive(ctx, TEAM_BARRIER, f"T.{s.op_name}")]


def _rows_of_this_pe(dst: Region, src: Region) -> Region:
    """fcollect: the rows of `dst` that hold this PE's block."""
    rows = src.sizes[0]
    start = dst.starts[0] + PE_VAR * rows
    return Region(dst.buffer, (start, *dst.starts[1:]), (rows, *dst.sizes[1:]))


def _put_to_every_pe(ctx: Ctx, s: Broadcast | Fcollect, dst: Region) -> list[str]:
    setup, issue = transfer_call(
        ctx, base="putmem", dst=dst, src=s.src, scope=s.scope, blocking=False, target="args.pe_map[ts_q]"
    )
    return [*setup, "for (int32_t ts_q = 0; ts_q < args.npes; ++ts_q) {", *indent(scoped(ctx, s.scope, issue)), "}"]


@EMIT.register(Broadcast)
def emit_broadcast(s: Broadcast, ctx: Ctx) -> list[str]:
    root_check = target_pe(s.root, s.op_name, var="ts_root_nv", what="root")
    lines = [f"const int64_t ts_root = {c_int64(s.root)};", root_check, "(void)ts_root_nv;"]
    lines += [f"if ({PE_VAR_NAME} == ts_root) {{", *indent(_put_to_every_pe(ctx, s, s.dst)), "}"]
    return [*lines, *_complete(ctx, True), *_team_arrive(ctx, TEAM_BARRIER, f"T.{s.op_name}")]


@EMIT.register(Fcollect)
def emit_fcollect(s: Fcollect, ctx: Ctx) -> list[str]:
    lines = _put_to_every_pe(ctx, s, _rows_of_this_pe(s.dst, s.src))
    return [*lines, *_complete(ctx, True), *_team_arrive(ctx, TEAM_BARRIER, f"T.{s.op_name}")]
