"""A diagnostic of the Hopper GEMM's main loop: extra shared-memory traffic (`EXTRA_SMEM_READS`, 0: off; bench_gemm.py's
`/smemxN` configs). After issuing a stage's wgmma instructions, each consumer warpgroup reads the stage's A tile N more
times with 16-byte shared-memory loads whose values go nowhere (volatile asm keeps them).

What it answers (benchmarks/NOTES.md, twenty-ninth session): whether a block's main loop is bound by its shared
memory's bandwidth (TMA's writes of the operands plus wgmma's reads of them). A 64x128x64 stage moves ~48 KiB
through shared memory; one more read of its 8 KiB A tile slows such a loop by ~1/6 if that is its bound, and by
little if something else (latency, the TMA unit, the tensor pipe) is.
"""

from __future__ import annotations

from .gemm_sm90_load import WARPGROUP

EXTRA_SMEM_READS = 0  # times each consumer warpgroup re-reads a stage's A tile (0: no probe)


def extra_reads_lines(a_stage: str, stage_bytes: int) -> list[str]:
    """Lines after a stage's products are issued: the A tile at shared-memory address `a_stage` (a C expression of
    the stage's start) read EXTRA_SMEM_READS more times by each consumer warpgroup's threads."""
    if not EXTRA_SMEM_READS:
        return []
    loads = EXTRA_SMEM_READS * stage_bytes // 16
    per_thread = -(-loads // WARPGROUP)
    return [
        f"{{  // diagnostic (gemm_sm90_probe.EXTRA_SMEM_READS = {EXTRA_SMEM_READS}): the stage's A tile read again",
        f"  const uint32_t ts_pa = {a_stage};",
        "  uint32_t ts_px = 0;",
        "  #pragma unroll",
        f"  for (int ts_pr = 0; ts_pr < {per_thread}; ++ts_pr) {{",
        "    uint32_t ts_p0, ts_p1, ts_p2, ts_p3;",
        f"    const uint32_t ts_po = ((uint32_t)(ts_pr * {WARPGROUP}) + threadIdx.x % {WARPGROUP}) "
        f"* 16u % {stage_bytes}u;",
        '    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(ts_p0), "=r"(ts_p1), "=r"(ts_p2), '
        '"=r"(ts_p3) : "r"(ts_pa + ts_po));',
        "    ts_px ^= ts_p0 ^ ts_p1 ^ ts_p2 ^ ts_p3;",
        "  }",
        '  asm volatile("" :: "r"(ts_px));',
        "}",
    ]
