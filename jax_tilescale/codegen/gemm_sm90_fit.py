"""What a Hopper GEMM tile needs of an SM's registers and warpgroups, and the advice a refusal gives: which
threads or tile the wgmma lowering would take instead (issue 16: a configuration that cannot be lowered says which
one can)."""

from __future__ import annotations

from .gemm_sm90_load import WARPGROUP

REGISTER_FILE = 65536  # 32-bit registers of an SM
# Registers one wgmma instruction takes besides its N / 2 accumulators (descriptors, predicate, addresses): ptxas asks
# for 154 to compile an m64n256 (128 accumulators) and takes an m64n192 (96) in 128 (2026-12-04, CUDA 13.0)
WGMMA_OPERAND_REGS = 26
MAX_CONSUMER_REGS = 240  # the most a consumer thread is given (setmaxnreg): every accumulator of its slabs lives there
PRODUCER_REGS = 40  # the producer issues a few TMA instructions: it gives its registers to the consumers


def launch_register_cap(consumers: int, blocks_per_sm: int) -> int:
    """Registers per thread that ptxas compiles the kernel for (its launch bounds: the consumers and the producer
    warpgroup, `blocks_per_sm` blocks an SM). One instruction's operands must fit in it even where `setmaxnreg`
    gives the consumers more registers for the rest of their code (ptxas's C7602)."""
    return REGISTER_FILE // (blocks_per_sm * (consumers + 1) * WARPGROUP) // 8 * 8


def wgmma_fits_launch(n: int, consumers: int, blocks_per_sm: int) -> bool:
    """Whether one m64nN wgmma's operands fit the launch bounds' registers per thread (launch_register_cap)."""
    return n // 2 + WGMMA_OPERAND_REGS <= launch_register_cap(consumers, blocks_per_sm)


def consumer_registers(consumers: int, blocks_per_sm: int) -> int:
    """Registers a consumer thread gets (`setmaxnreg`): the register file (one block per SM) or the block's launch
    share (the launch bounds' registers per thread, in units of 8), less the producer warpgroup's."""
    threads = consumers * WARPGROUP
    if blocks_per_sm == 1:
        per_thread = (REGISTER_FILE - WARPGROUP * PRODUCER_REGS) // threads
    else:
        total = threads + WARPGROUP
        launched = REGISTER_FILE // (blocks_per_sm * total) // 8 * 8
        per_thread = (launched * total - WARPGROUP * PRODUCER_REGS) // threads
    return min(MAX_CONSUMER_REGS, per_thread // 8 * 8)


def accumulators_fit(slabs: int, n: int, consumers: int, blocks_per_sm: int) -> bool:
    """Whether a consumer thread's `slabs` x n/2 accumulators leave it room for the rest (else ptxas spills)."""
    return slabs * n // 2 + WGMMA_OPERAND_REGS <= consumer_registers(consumers, blocks_per_sm)


def threads_that_fit(m: int, n: int, blocks_per_sm: int) -> list[int]:
    """Consumer threads (ts.kernel's `threads`) whose warpgroups split an m x n tile into m64 slabs, each warpgroup's
    accumulators fitting its registers and one m64nN wgmma fitting the kernel's launch bounds."""
    return [WARPGROUP * c for c in range(1, 5)
            if m % (64 * c) == 0 and wgmma_fits_launch(n, c, blocks_per_sm)
            and accumulators_fit(m // 64 // c, n, c, blocks_per_sm)]


def _threads_first(m: int, n: int, blocks_per_sm: int, separator: str) -> str:
    """"threads=A or B" and `separator` (ahead of the advice's other alternative) where thread counts fit
    (threads_that_fit), nothing where none does."""
    fits = threads_that_fit(m, n, blocks_per_sm)
    return f"threads={' or '.join(map(str, fits))}{separator}" if fits else ""


def register_advice(m: int, n: int, consumers: int, blocks_per_sm: int) -> str:
    """Why one m64nN wgmma does not fit the kernel's launch bounds, and which threads or N tile would."""
    cap = launch_register_cap(consumers, blocks_per_sm)
    widest = (cap - WGMMA_OPERAND_REGS) * 2 // 8 * 8
    alone = " or blocks_per_sm=1" if blocks_per_sm > 1 and consumers * WARPGROUP in threads_that_fit(m, n, 1) else ""
    return (f"one m64n{n} wgmma needs {n // 2 + WGMMA_OPERAND_REGS} registers, more than the {cap} a thread has "
            f"at threads={consumers * WARPGROUP} (+ the producer's 128, blocks_per_sm={blocks_per_sm}): take "
            f"{_threads_first(m, n, blocks_per_sm, ', or ')}block_n <= {widest}{alone}")


def tile_advice(m: int, n: int, consumers: int, blocks_per_sm: int) -> str:
    """Why an M tile of `m` rows does not split into m64 slabs over `consumers` warpgroups, and what would."""
    why = f"M tile {m} is not a multiple of 64 x {consumers} consumer warpgroups"
    if m % 64:
        return f"{why}: wgmma takes 64-row slabs, so take block_m a multiple of 64"
    threads = _threads_first(m, n, blocks_per_sm, ", or ")
    return f"{why}: at block_m={m} take {threads}block_m a multiple of {64 * consumers}"


def spill_note(m: int, n: int, slabs: int, consumers: int, blocks_per_sm: int) -> str:
    """A note (the kernel's PerformanceWarning) for a tile whose warpgroups hold more accumulators than registers:
    ptxas spills them around the wgmma instructions, and the kernel runs, slowly."""
    return (f"wgmma, spilling: each consumer thread holds {slabs} x {n // 2} accumulators of an {m} x {n} tile at "
            f"threads={consumers * WARPGROUP}, more than its {consumer_registers(consumers, blocks_per_sm)} registers "
            f"leave room for: take {_threads_first(m, n, blocks_per_sm, ' or ')}a smaller tile")
