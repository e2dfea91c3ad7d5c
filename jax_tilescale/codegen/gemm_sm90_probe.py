"""Diagnostics of the Hopper GEMM (all off by default; each a bench_gemm.py --configs suffix). Kernels built with
`NO_OUTPUT_STORES` or `FIRST_K_STEP_ONLY` do not compute the product: they are for timing what a part of the kernel
costs (tools/cycle_rank.py profiles them unchecked, saying so), never for results.

- `EXTRA_SMEM_READS` (`/smemxN`): after issuing a stage's wgmma instructions, each consumer warpgroup reads the
  stage's A tile N more times with 16-byte shared-memory loads whose values go nowhere (volatile asm keeps them).
  Whether a block's main loop is bound by its shared memory's bandwidth (benchmarks/NOTES.md, twenty-ninth and
  forty-second sessions: it is not).
- `NO_OUTPUT_STORES` (`/nostore`): the epilogue writes its staging boxes and waits as it does, but issues no TMA
  store: what the output's 2 bytes an element through L2 to HBM cost the other warpgroup's loop.
- `FIRST_K_STEP_ONLY` (`/fixk`; `/fixka`, `/fixkb` for one operand: "a" or "b"): the producer loads every k-step's
  boxes from the first k-step's place (the same bytes per stage, the same tile order, but each tile's operands a
  few KiB of rows that stay in L2): what reading the operands from HBM, and the L2 misses of the tile order, cost.
"""

from __future__ import annotations

from ..ir.expr import Var
from .expr_printer import with_loop_var

EXTRA_SMEM_READS = 0  # times each consumer warpgroup re-reads a stage's A tile (0: no probe)
NO_OUTPUT_STORES = False
FIRST_K_STEP_ONLY: bool | str = False  # True: both operands; "a" or "b": that one
# the switches above whose kernels do not compute the product
NOT_THE_PRODUCT = ("NO_OUTPUT_STORES", "FIRST_K_STEP_ONLY")


def extra_reads_lines(a_stage: str, stage_bytes: int, warpgroup: int) -> list[str]:
    """Lines after a stage's products are issued: the A tile at shared-memory address `a_stage` (a C expression of
    the stage's start) read EXTRA_SMEM_READS more times by each of a consumer warpgroup's `warpgroup` threads."""
    if not EXTRA_SMEM_READS:
        return []
    loads = EXTRA_SMEM_READS * stage_bytes // 16
    per_thread = -(-loads // warpgroup)
    return [
        f"{{  // diagnostic (gemm_sm90_probe.EXTRA_SMEM_READS = {EXTRA_SMEM_READS}): the stage's A tile read again",
        f"  const uint32_t ts_pa = {a_stage};",
        "  uint32_t ts_px = 0;",
        "  #pragma unroll",
        f"  for (int ts_pr = 0; ts_pr < {per_thread}; ++ts_pr) {{",
        "    uint32_t ts_p0, ts_p1, ts_p2, ts_p3;",
        f"    const uint32_t ts_po = ((uint32_t)(ts_pr * {warpgroup}) + threadIdx.x % {warpgroup}) "
        f"* 16u % {stage_bytes}u;",
        '    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(ts_p0), "=r"(ts_p1), "=r"(ts_p2), '
        '"=r"(ts_p3) : "r"(ts_pa + ts_po));',
        "    ts_px ^= ts_p0 ^ ts_p1 ^ ts_p2 ^ ts_p3;",
        "  }",
        '  asm volatile("" :: "r"(ts_px));',
        "}",
    ]


def output_store(line: str) -> str:
    """An epilogue's TMA store statement, or with NO_OUTPUT_STORES a comment in its place (its bulk group is still
    committed and waited for: an empty one)."""
    return "/* diagnostic (gemm_sm90_probe.NO_OUTPUT_STORES): no store */" if NO_OUTPUT_STORES else line


def box_coordinate(text: str, k_var: Var, operand: str) -> str:
    """A TMA load box's coordinate (C text) of `operand` ("a" or "b"), or where FIRST_K_STEP_ONLY takes that operand
    the same with the k-loop's variable `k_var` at 0: every k-step's box loaded from the first k-step's place."""
    if FIRST_K_STEP_ONLY is True or FIRST_K_STEP_ONLY == operand:
        return with_loop_var(text, k_var, "0")
    return text
