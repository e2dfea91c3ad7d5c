"""Ping-pong consumers for the Hopper GEMM lowering's tile loop (`gemm_sm90`, `gemm_sm90_nest`).

In the persistent form (examples/gemm.py's `persistent_kernel`),

    for w in T.serial(waves):
        tile = w * blocks + T.program_id(0)
        if tile < tiles:
            T.clear(C_f)
            for ko in T.Pipelined(...): copy, copy, gemm
            T.copy(C_f, C[...])

the cooperative schedule splits each tile's rows over the two consumer warpgroups, so both store
the tile at the same time and the tensor cores idle through every epilogue (6-9% of a 16-step tile
at 16384 x 8192 x 1024: benchmarks/NOTES.md). The ping-pong schedule gives each warpgroup whole
tiles instead: warpgroup g runs the iterations w with w % 2 == g, each on a fragment of its own
(all of the tile's m64 slabs, so 128 x N tiles need N accumulators per thread), and stores its
tile while the other warpgroup's main loop keeps the tensor cores busy. cuBLAS builds its kernel
for that shape this way (`nvjet_..._128x160_..._v_bz_NNT`, no "coop" in the name).

The stage ring stays one ring in the producer's order (tile after tile), and a warpgroup passes
over the other's tiles by advancing its count of the loop's iterations. Turns: warpgroup g starts
a tile's main loop only after the other one has waited for every stage of its own tile (named
barrier `TURN_BARRIER + g`, arrived at by the other warpgroup): the main loops then follow each
other on the tensor cores, and no warpgroup waits for a stage's "full" barrier more than one phase
ahead of it (a parity wait two phases ahead would pass at once). A tile the `if` skips passes the
turn on at once. The epilogue meets only the warpgroup's own threads (`WARPGROUP_BARRIER + g`), and
each warpgroup has a staging tile of its own.

Conditions (`plan_pingpong`): the kernel asks for it (`ts.kernel(pingpong=True)`, KernelIR.pingpong;
examples/gemm.py's GemmConfig.pingpong, the tile table's pick at 16384 x 8192 x 1024), it does not
communicate, two consumer warpgroups, one planned loop, in a serial tile loop either directly or in the `then`
branch (no `else`) of the if that is the tile loop's whole body, or directly in a tile queue (`T.tile_queue`: the
warpgroups take its rounds in turn, gemm_sm90_queue); the innermost body holds only the
accumulator's clear folded into the loop (gemm_sm90._with_folded_clear), the loop, element-wise
epilogues on the accumulator and its final whole copy (not into shared memory: both warpgroups' tiles
would meet in the one shared tile, in flight at once); a whole tile fits in one warpgroup's
registers (PINGPONG_MAX_ACCUMULATORS per thread).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..ir.control import If
from ..ir.kernel_ir import KernelIR
from ..ir.nodes import BufferKind, Copy, Fill, Loop, Stmt
from ..ir.tile_ops import Parallel
from ..ir.tile_queue import TileQueue
from . import gemm_sm90_trace as trace
from .body import emit_body
from .common import INDENT, indent
from .context import Ctx
from .expr_printer import var_name
from .gemm_pattern import register_epilogue, shared_with_others
from .gemm_sm90_load import WARPGROUP, GemmLoop
from .gemm_sm90_nest import counter, inner_body
from .gemm_sm90_queue import ROUND, read_ticket, round_head
from .tile_ops import ValuePrinter, condition, enclosing_ranges

# Where a warpgroup passes the turn: after the loop's last `wgmma.wait_group 1` (False: the other
# warpgroup's first products queue behind one stage in the tensor pipe), or right after its tile's last
# stage's products are issued (True, bench_gemm's `/earlyturn`: behind two). Measured level (NOTES,
# 2026-12-04, twenty-second session): the next loop starts 65 cycles sooner and each loop takes 59 more.
EARLY_TURN = False
PINGPONG_MAX_ACCUMULATORS = 192  # per thread: 128 x 192 tiles, as the cooperative 256x192 holds per thread
# Named barriers (bar.sync ids; 0 is __syncthreads, 1 the consumers' barrier: Frame.block_sync)
TURN_BARRIER = 2  # + g: warpgroup g's turn to run a main loop (both warpgroups, 256 threads)
WARPGROUP_BARRIER = 4  # + g: warpgroup g's own threads (its epilogue)
WG = f"(threadIdx.x / {WARPGROUP})"  # this consumer warpgroup, 0 or 1


@dataclass(frozen=True)
class PingPong:
    """The tile loop whose iterations the two consumer warpgroups take in turn: a serial loop over the waves of a
    static deal, or a tile queue's rounds (gemm_sm90_queue: every warp reads every round's ticket)."""

    tile_loop: Loop | TileQueue
    guard: If | None  # the if around the tile's statements (the last wave has fewer tiles than blocks)
    loop_index: int  # the planned loop's index (its iteration count `counter(index)`)
    loop_extent: int  # the planned loop's iterations per tile

    def _round(self) -> str:
        """The C name of the tile loop's iteration: the wave, or the queue's round."""
        return ROUND if isinstance(self.tile_loop, TileQueue) else var_name(self.tile_loop.var)

    def turn_lines(self, ctx: Ctx) -> list[str]:
        """After a tile's main loop has waited for its last stage: the other warpgroup's turn, if it has a next tile
        (the next wave's: static; the next round's ticket, which the producer published a round ahead: a queue)."""
        arrive = f"ts_named_arrive({TURN_BARRIER} + 1 - {WG}, {2 * WARPGROUP});  // the other warpgroup's turn"
        q = self.tile_loop
        if isinstance(q, TileQueue):
            return ["{  // the next round's ticket, looked at (read again in that round)",
                    *indent(read_ticket(q, f"{ROUND} + 1u", ctx, "ts_qnext_tile", release=False)),
                    f"{INDENT}if (ts_qnext_tile < {q.extent}) {arrive}",
                    "}"]
        return [f"if ({self._round()} + 1 < {q.extent}) {arrive}"]

    def early_turn_lines(self, i: str, extent: int, ctx: Ctx) -> list[str]:
        """In the main loop, after a stage's products are committed: the turn, at the tile's last stage."""
        if not EARLY_TURN:
            return []
        return [f"if ({i} == {extent - 1}) {{  // every stage of this tile waited for, its products issued",
                *indent(self.turn_lines(ctx)), "}"]

    def late_turn_lines(self, ctx: Ctx) -> list[str]:
        """After the main loop (its last `wait_group 1`): the turn, where EARLY_TURN is off."""
        return [] if EARLY_TURN else self.turn_lines(ctx)

    def tile_loop_lines(self, ctx: Ctx, traced: bool = False) -> list[str]:
        """The tile loop as each consumer warpgroup runs it (the module doc); `traced`: the turn's wait counted for
        the stage trace (gemm_sm90_trace)."""
        w = self._round()
        inner = self.guard.then_body if self.guard is not None else self.tile_loop.body
        taken = self._condition(ctx)
        count = f"{counter(self.loop_index)} += {self.loop_extent};"
        skip = [count if taken == "true" else f"if ({taken}) {count}"]
        no_tile = ([f"if (!({taken})) {{  // no tile: the turn passes on at once",
                    *indent(self.turn_lines(ctx)), f"{INDENT}continue;", "}"] if taken != "true" else [])
        sync = f"ts_named_sync({TURN_BARRIER} + {WG}, {2 * WARPGROUP});"
        wait = ([f"if ({w} > 0) {line}" for line in trace.timed_turn(sync)] if traced
                else [f"if ({w} > 0) {sync}  // the other warpgroup has waited for all its stages"])
        q = self.tile_loop
        head = (round_head(q, ctx) if isinstance(q, TileQueue)
                else [f"for (int64_t {w} = 0; {w} < {q.extent}; ++{w}) {{"])
        return [
            *(trace.turn_declaration() if traced else []),
            *head,
            f"{INDENT}if ((int)({w} % 2) != {WG}) {{  // the other warpgroup's tile: its stages pass by",
            *indent(skip, 2),
            f"{INDENT * 2}continue;",
            f"{INDENT}}}",
            *indent(wait),
            *indent(no_tile),
            *indent(emit_body(inner, ctx)),
            "}",
        ]

    def _condition(self, ctx: Ctx) -> str:
        if self.guard is None:
            return "true"
        printer = ValuePrinter(ctx, enclosing_ranges(ctx.kernel, self.guard))
        return condition(self.guard.cond, printer, self.guard.loc)


def asks_pingpong_it_may_take(kernel: KernelIR, consumers: int, communicates: bool) -> bool:
    """Whether the kernel asks for ping-pong with its block's first conditions met (two consumer warpgroups, no
    communication): the loops are then planned with whole tiles a warpgroup, and plan_pingpong says the rest."""
    return bool(kernel.pingpong) and consumers == 2 and not communicates


def plan_pingpong(kernel: KernelIR, loops: list[GemmLoop], consumers: int, communicates: bool) -> PingPong | str | None:
    """The ping-pong schedule of the kernel's tile loop when the kernel asks for it and every condition
    of the module doc holds; None when not asked, else why not (a note in the generated header)."""
    if not kernel.pingpong:
        return None
    no = "pingpong=True not taken: "
    if not asks_pingpong_it_may_take(kernel, consumers, communicates) or len(loops) != 1:
        return no + "it needs a kernel that does not communicate, 256 threads and one pipelined loop"
    gl = loops[0]
    tile_loop = gl.nest[0] if gl.nest else None
    queue = isinstance(tile_loop, TileQueue)
    if not (queue or (isinstance(tile_loop, Loop) and tile_loop.num_stages is None)):
        return no + "the pipelined loop is not inside a serial tile loop or a tile queue"
    if not isinstance(tile_loop.extent, int):
        return no + "the tile loop's trip count is not a constant"
    if queue and len(gl.nest) != 1:
        return no + "the pipelined loop is not right in the tile queue's body (each round's statements run as one tile)"
    if gl.m * gl.n // WARPGROUP > PINGPONG_MAX_ACCUMULATORS:
        return (no + f"a {gl.m} x {gl.n} tile needs {gl.m * gl.n // WARPGROUP} accumulators per thread in one "
                f"warpgroup, more than {PINGPONG_MAX_ACCUMULATORS} (at most 128 x 192)")
    guard = None
    if len(gl.nest) == 2:
        guard = gl.nest[1]
        if not isinstance(guard, If) or guard.else_body or tile_loop.body != (guard,):
            return no + "the tile loop's body is not one `if` without `else`"
    elif len(gl.nest) != 1:
        return no + "the pipelined loop is nested more than a tile loop and an `if` deep"
    inner = inner_body(gl.nest)
    if not all(_tile_statement(s, gl, kernel) for s in inner) or not isinstance(inner[-1], Copy):
        return no + ("a tile's statements must be the accumulator's clear, the loop, element-wise epilogues "
                     "and its whole copy, last")
    return PingPong(tile_loop, guard, gl.index, gl.loop.extent)


def _tile_statement(s: Stmt, gl: GemmLoop, kernel: KernelIR) -> bool:
    """Whether one warpgroup can run `s` alone: nothing that meets the other warpgroup's threads, nor a buffer
    another statement uses (the barrier after it would wait for both warpgroups: gemm_pattern.shared_with_others),
    nor a copy into shared memory (the two warpgroups' tiles would meet in the one tile)."""
    if s is gl.loop:
        return True
    if isinstance(s, Fill):
        return s is gl.folded_clear
    if shared_with_others(s, {gl.acc}, kernel.body):
        return False
    if isinstance(s, Parallel):
        return register_epilogue(s, {gl.acc}) is not None
    if isinstance(s, Copy):
        return s.src.buffer is gl.acc and s.dst.buffer.kind is not BufferKind.SHARED
    return False
