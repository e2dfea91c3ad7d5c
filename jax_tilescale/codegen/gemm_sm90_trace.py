"""A diagnostic of the Hopper GEMM's consumers: where they wait (gemm_sm90.STAGE_TRACE, off;
`tools/stage_trace.py` turns it on and reads the result).

Per run of a pipelined loop and consumer warpgroup, the warpgroup's first thread counts the cycles
it waited for each stage's operands (the "full" barrier), the loop's cycles, its start (%globaltimer
and the SM's clock64: their ratio is the SM's clock, and the cycles from one loop's end to the next's
start on an SM are what the loops leave idle) and the SM. After the loop it writes them over its first
accumulators, in place of the product, as base-256 digits so that a bfloat16 or float16 output holds
them exactly. The layout is `FIELDS`, read by both sides. (A count of k-steps whose
`wgmma.wait_group 1` returned at once, meant to show the tensor pipe running dry, read 15 of 16 in
loops running at the pipe's rate: ptxas does not wait where the instruction stands. Left out.)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class TraceField:
    name: str
    value: str  # a C expression of an unsigned integer
    digits: int  # base-256 digits written (low first), one accumulator each


FIELDS: tuple[TraceField, ...] = (
    TraceField("wait", "ts_dg_wait", 3),  # cycles waiting for stages, all k-steps
    TraceField("longest", "ts_dg_longest", 2),  # the longest wait of one k-step
    TraceField("waited", "ts_dg_waited", 1),  # k-steps that waited more than 64 cycles
    TraceField("first", "ts_dg_first", 2),  # the wait at k-step 0 (the pipeline's fill)
    TraceField("mask", "ts_dg_mask", 4),  # which k-steps (% 32) waited more than 64 cycles
    TraceField("start", "(uint32_t)ts_dg_g0", 4),  # %globaltimer (ns) at the loop's start, low 32 bits
    TraceField("cycles", "ts_dg_cyc", 3),  # the loop's cycles, from before its first wait to after its last products
    TraceField("clock", "(uint32_t)ts_dg_c0", 4),  # the SM's clock64 at the loop's start, low 32 bits
    TraceField("sm", "ts_dg_sm", 1),
    # %globaltimer ns from the loop's start to its end: with `cycles`, the SM's clock over the loop itself (one
    # loop per SM, as in a one-wave product, leaves no two starts on an SM to measure it between)
    TraceField("ns", "ts_dg_ns", 3),
    # cycles the warpgroup waited for its turn before this loop (ping-pong: the other warpgroup's last stage
    # waited for; 0 without ping-pong and before a warpgroup's first tile)
    TraceField("turn", "ts_dg_turn", 3),
)
SLOTS = sum(f.digits for f in FIELDS)


def slot_position(r: int) -> tuple[int, int]:
    """(row, column) within the warpgroup's first 64-row slab of its first thread's accumulator `r`
    (wgmma's m64nN layout: four registers per 8-column group, rows 0 and 8, columns 0 and 1)."""
    return 8 * ((r // 2) % 2), (r // 4) * 8 + r % 2


def min_columns() -> int:
    return slot_position(SLOTS - 1)[1] + 1


TURN_WAIT = "ts_dg_turn_wait"  # the ping-pong tile loop's count of the cycles its turn's barrier took


def loop_start(pingpong: bool = False) -> list[str]:
    turn = TURN_WAIT if pingpong else "0u"
    return ["uint32_t ts_dg_wait = 0, ts_dg_longest = 0, ts_dg_waited = 0, ts_dg_mask = 0, ts_dg_first = 0;",
            f"const uint32_t ts_dg_turn = {turn};",
            "uint64_t ts_dg_g0; asm volatile(\"mov.u64 %0, %globaltimer;\" : \"=l\"(ts_dg_g0));",
            "const long long ts_dg_c0 = clock64();"]


def before_stage_wait() -> list[str]:
    return ["const long long ts_dg_t0 = clock64();"]


def after_stage_wait(i: str) -> list[str]:
    return [f"{{ const uint32_t ts_dw = (uint32_t)(clock64() - ts_dg_t0); ts_dg_wait += ts_dw; "
            "if (ts_dw > ts_dg_longest) ts_dg_longest = ts_dw; "
            f"if (ts_dw > 64) {{ ++ts_dg_waited; ts_dg_mask |= 1u << ({i} & 31); }} "
            f"if ({i} == 0) ts_dg_first = ts_dw; }}"]


def loop_end(acc: str, columns: int) -> list[str]:
    """The fields over accumulators 0.. of slab 0 of the warpgroup's first thread."""
    if columns < min_columns():
        raise ValueError(f"the stage trace needs tiles of at least {min_columns()} columns, not {columns}")
    out = ["if ((threadIdx.x & 127) == 0) {",
           "  const uint32_t ts_dg_cyc = (uint32_t)(clock64() - ts_dg_c0);",
           "  uint64_t ts_dg_g1; asm volatile(\"mov.u64 %0, %globaltimer;\" : \"=l\"(ts_dg_g1));",
           "  const uint32_t ts_dg_ns = (uint32_t)(ts_dg_g1 - ts_dg_g0);",
           "  uint32_t ts_dg_sm; asm volatile(\"mov.u32 %0, %smid;\" : \"=r\"(ts_dg_sm));"]
    r = 0
    for f in FIELDS:
        for d in range(f.digits):
            out.append(f"  {acc}[0][{r}] = (float)(({f.value} >> {8 * d}) & 255u);")
            r += 1
    return [*out, "}"]


def decode_slab(get: Callable[[int, int], int]) -> dict[str, int]:
    """The fields of one warpgroup's trace; `get(row, column)` reads the output within its slab."""
    out, r = {}, 0
    for f in FIELDS:
        value = 0
        for d in range(f.digits):
            value |= round(float(get(*slot_position(r)))) << (8 * d)
            r += 1
        out[f.name] = value
    return out


def timed_turn(sync: str) -> list[str]:
    """The ping-pong turn's barrier (`sync`, a statement) with the cycles it took kept in TURN_WAIT (declared before
    the tile loop: turn_declaration).

    Hopper's `bar.sync` (SASS `BAR.SYNC.DEFER_BLOCKING`) lets the warp issue on past it until an instruction
    that must see the barrier's effect (a memory access, a branch): a clock read right after it returns at once, and
    the wait lands on the next such instruction, in the queue's kernel the first stage's wait (benchmarks/NOTES.md,
    forty-eighth session). So the second clock is read after a `nanosleep` of 0-1 ns taken from a shared-memory load
    that follows the barrier: the load waits for the barrier, the sleep for the load (a branch on the load, or a trap,
    spilled the ping-pong kernel; a `__syncwarp` with a mask ptxas can fold was dropped)."""
    settled = ('__nanosleep(*reinterpret_cast<volatile uint32_t*>(ts_smem) & 1u); '
               f'{TURN_WAIT} = (uint32_t)(clock64() - ts_dg_tt);')
    return [f"{{ const long long ts_dg_tt = clock64(); {sync} {settled} }}"]


def turn_declaration() -> list[str]:
    return [f"uint32_t {TURN_WAIT} = 0;  // diagnostic (gemm_sm90_trace): the last turn's wait, in cycles"]
