"""Where a kernel's allocations live: shared-memory offsets and the symmetric scratch layout.

Scratch layout (all of it zero when the kernel starts, per the calling convention):

    [signal, symmetric and global buffers, in allocation order: signals at 8-byte-aligned offsets
     (uint64 words), T.alloc_symmetric and T.alloc(level="global") buffers at 128-byte-aligned
     offsets; a kernel without NVSHMEM gets a plain (not symmetric) scratch from the handler]
    [grid barrier: uint32 arrival count, uint32 generation]   (barrier_all/sync_all, several blocks)
    [PE barrier: TsTeamBarrier, 16 bytes]                      (barrier_all/sync_all)
    [team barrier: TsTeamBarrier, 16 bytes]                    (team collectives: barrier_all_block,
                                                                sync_all_*, broadcast*, fcollect*)
    [padding up to a multiple of 256 bytes]

Every PE runs the same kernel, so a word is at the same scratch offset on every PE; with the
scratch at the same symmetric address everywhere (the runtime guarantees it), the local address
of a word is the symmetric address that NVSHMEM translates for a peer. The two barrier states
are separate so that barrier_all (made by block 0 of each PE) never pairs with a team
collective made by another block.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from ..errors import KernelTraceError
from ..ir.kernel_ir import KernelIR
from ..ir.nodes import BarrierAll, Buffer, BufferKind

SHARED_ALIGN = 128
SIGNAL_ALIGN = 8
SYMMETRIC_ALIGN = 128
TEAM_BARRIER_BYTES = 16  # sizeof(TsTeamBarrier)
SCRATCH_ROUND = 256
# Per-block shared memory a block can have on request (cudaFuncAttributeMaxDynamicSharedMemorySize), by
# compute capability (CUDA programming guide, "Technical Specifications per Compute Capability").
SHARED_BYTES_PER_BLOCK = {70: 96 * 1024, 75: 64 * 1024, 80: 163 * 1024, 86: 99 * 1024, 87: 163 * 1024,
                          89: 99 * 1024, 90: 227 * 1024, 100: 227 * 1024, 120: 99 * 1024}
MAX_SHARED_BYTES = SHARED_BYTES_PER_BLOCK[90]  # Hopper's, the default target
# Shared memory of one SM (the same table's "per SM" row); the system takes 1 KiB of it per resident block
# from sm_80 on, which is why the per-block figure is 1 KiB less there.
SHARED_BYTES_PER_SM = {70: 96 * 1024, 75: 64 * 1024, 80: 164 * 1024, 86: 100 * 1024, 87: 164 * 1024,
                       89: 100 * 1024, 90: 228 * 1024, 100: 228 * 1024, 120: 100 * 1024}
RESERVED_SHARED_PER_BLOCK = 1024


def max_shared_bytes(arch: str) -> int:
    """Shared memory one block may use on `arch` ("sm_80", "sm_90a", ...); an unlisted one gets the
    entry of the nearest listed capability below it (the lowest listed for anything older)."""
    return SHARED_BYTES_PER_BLOCK[_capability(arch)]


def _capability(arch: str) -> int:
    """The listed compute capability whose limits `arch` has (module tables)."""
    digits = "".join(ch for ch in arch.removeprefix("sm_") if ch.isdigit())
    cc = int(digits) if digits else 90
    known = [c for c in sorted(SHARED_BYTES_PER_BLOCK) if c <= cc] or [min(SHARED_BYTES_PER_BLOCK)]
    return known[-1]


def _reserved(cc: int) -> int:
    return RESERVED_SHARED_PER_BLOCK if cc >= 80 else 0


def blocks_fitting(smem_bytes: int, arch: str) -> int:
    """How many blocks of `smem_bytes` dynamic shared memory one SM of `arch` holds at once."""
    cc = _capability(arch)
    return SHARED_BYTES_PER_SM[cc] // (smem_bytes + _reserved(cc))


def shared_budget(arch: str, blocks_per_sm: int = 1) -> int:
    """Shared memory one block may use on `arch` when `blocks_per_sm` of them must fit in an SM."""
    cc = _capability(arch)
    return min(max_shared_bytes(arch), SHARED_BYTES_PER_SM[cc] // blocks_per_sm - _reserved(cc))


def _round_up(n: int, to: int) -> int:
    return -(-n // to) * to


@dataclass(frozen=True)
class Layout:
    shared_offsets: dict[Buffer, int]  # byte offset into ts_smem
    smem_bytes: int
    signal_offsets: dict[Buffer, int]  # into the scratch (ts_scratch): SIGNAL, SYMMETRIC, GLOBAL buffers
    barrier_offset: int | None  # byte offset of the grid barrier's two uint32 words
    scratch_bytes: int
    pe_barrier_offset: int | None = None  # TsTeamBarrier of barrier_all / sync_all
    team_barrier_offset: int | None = None  # TsTeamBarrier of the team collectives
    mbarrier_offset: int | None = None  # the GEMM plan's mbarrier words (8 bytes each), in shared memory
    register_buffers: frozenset[Buffer] = field(default_factory=frozenset)  # fragments kept in registers
    copy_in_offset: int | None = None  # two uint64 counters of the kernel's copy-in (codegen/stage_in.py)


class PlanMemory(Protocol):
    """What the layout asks of a tensor-core GEMM plan (part of context.GemmPlan)."""

    def register_buffers(self) -> frozenset[Buffer]:
        """The fragments kept in registers (no shared memory)."""
        ...

    def stage_buffers(self) -> dict[Buffer, int]:
        """Shared tiles -> bytes of all their stages (placed first, at 1024-byte boundaries)."""
        ...

    def barrier_words(self) -> int:
        """8-byte mbarrier words in shared memory (`Layout.mbarrier_offset`)."""
        ...


def needs_grid_barrier(kernel: KernelIR) -> bool:
    """A grid barrier is generated when blocks of one PE must meet (BarrierAll, several blocks)."""
    blocks = 1
    for g in kernel.grid:
        blocks *= g
    return blocks > 1 and any(isinstance(s, BarrierAll) for s in kernel.body)


def plan_layout(kernel: KernelIR, plan: PlanMemory | None, arch: str, copy_in_counters: bool = False) -> Layout:
    """Offsets of every allocation. `plan` (the kernel's GEMM plan) keeps its accumulators in
    registers, gives its pipelined tiles their stages at 1024-byte boundaries and may want
    mbarrier words. Fragments not kept in registers live in shared memory, row-major, like shared
    tiles. The whole must fit the shared memory a block may have on `arch` (`max_shared_bytes`).
    `copy_in_counters`: two scratch words for the kernel's own copy of its staged inputs."""
    shared: dict[Buffer, int] = {}
    signals: dict[Buffer, int] = {}
    smem = scratch = 0
    registers = plan.register_buffers() if plan is not None else frozenset()
    staged = plan.stage_buffers() if plan is not None else {}
    for buf in staged:  # first: their alignment then costs nothing
        smem = _round_up(smem, 1024)
        shared[buf] = smem
        smem += staged[buf]
    for buf in kernel.allocs:
        if buf in staged or buf in registers:
            continue
        if buf.kind in (BufferKind.SHARED, BufferKind.FRAGMENT):
            smem = _round_up(smem, SHARED_ALIGN)
            shared[buf] = smem
            smem += buf.nbytes
        elif buf.kind in (BufferKind.SIGNAL, BufferKind.SYMMETRIC, BufferKind.GLOBAL):
            scratch = _round_up(scratch, SIGNAL_ALIGN if buf.kind is BufferKind.SIGNAL else SYMMETRIC_ALIGN)
            signals[buf] = scratch
            scratch += buf.nbytes
        elif buf.kind is getattr(BufferKind, "LOCAL", None):
            continue  # per-thread registers: declared where the statements that use them are emitted
        else:
            raise KernelTraceError(f"internal: {buf} is not an allocation kind the code generator knows", kernel.loc)
    barrier = pe_barrier = team_barrier = None
    if needs_grid_barrier(kernel):
        barrier = _round_up(scratch, SIGNAL_ALIGN)
        scratch = barrier + 8
    if any(isinstance(s, BarrierAll) for s in kernel.body):
        pe_barrier = _round_up(scratch, SIGNAL_ALIGN)
        scratch = pe_barrier + TEAM_BARRIER_BYTES
    if any(s.team_collective for s in kernel.body):
        team_barrier = _round_up(scratch, SIGNAL_ALIGN)
        scratch = team_barrier + TEAM_BARRIER_BYTES
    copy_in = None
    if copy_in_counters:
        copy_in = _round_up(scratch, SIGNAL_ALIGN)
        scratch = copy_in + 16
    mbarriers = None
    if plan is not None:
        mbarriers = _round_up(smem, 8)
        smem = mbarriers + 8 * plan.barrier_words()
    smem_bytes = _round_up(smem, SHARED_ALIGN)
    if plan is not None:
        smem_bytes += 1024  # the prologue aligns the dynamic shared memory's base to 1024 bytes
    limit = max_shared_bytes(arch)
    if smem_bytes > limit:
        allocs = ", ".join(str(b) for b in shared)
        raise KernelTraceError(
            f"kernel {kernel.name} needs {smem_bytes} bytes of shared memory per block ({allocs}); "
            f"a block can have at most {limit} on {arch}",
            kernel.loc,
        )
    bps = kernel.blocks_per_sm
    if bps > 1 and smem_bytes > shared_budget(arch, bps):
        raise KernelTraceError(
            f"kernel {kernel.name} asks for blocks_per_sm={bps} but needs {smem_bytes} bytes of shared memory "
            f"per block; {bps} blocks fit in an SM of {arch} with at most {shared_budget(arch, bps)} each: use "
            f"fewer pipeline stages or smaller tiles, or blocks_per_sm={max(1, blocks_fitting(smem_bytes, arch))}",
            kernel.loc,
        )
    return Layout(shared, smem_bytes, signals, barrier, _round_up(scratch, SCRATCH_ROUND), pe_barrier, team_barrier,
                  mbarriers, registers, copy_in)
