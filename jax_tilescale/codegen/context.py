"""What every statement rule receives (`Ctx`), and what the code generator may ask of the
tensor-core GEMM plan it carries (`GemmPlan`, `Frame`).

A kernel has at most one plan, chosen once by `gemm_select.select_plan` (`gemm_sm90.Sm90Plan`,
`gemm_sm80.Sm80Plan`, or None for the portable rules); from then on the code generator asks the
plan only what `GemmPlan` states and never tests its class:

- `body.emit_stmt` asks `lines` once per statement, before the rule table: the plan's own lines
  for a statement it owns (a planned loop, a statement on a fragment it keeps in registers);
- `layout.plan_layout` asks where its tiles and barriers go (`register_buffers`,
  `stage_buffers`, `barrier_words`);
- `cuda.generate_cuda` asks what the kernel around the statements needs: `arch`, `frame`,
  `device_headers`, `declarations`, `kernel_params`, `tensor_map_fields`, `setup`,
  `accumulators` and `producer`; `gemm_select` passes its `notes` on;
- every rule that ends a statement with a block barrier emits `Ctx.block_sync()`, which the
  frame decides.

They live here with `Ctx` because a rule's context names its plan and a plan's lines take the
context.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from ..ir.kernel_ir import KernelIR
from ..ir.nodes import Buffer, Stmt
from .gemm_pattern import PlannedLoop
from .layout import Layout, PlanMemory


@dataclass(frozen=True)
class Frame:
    """The block's threads: the kernel's own (`user_threads`, which run its statements) and, in a
    warp-specialised frame, a producer warpgroup on top that feeds them (`gemm_sm90`), with the
    register split between the two (setmaxnreg) and the block's cluster: blocks per cluster along
    grid x, y, z (a multicast pair's (2, 1, 1), or the kernel's own, `ts.kernel(cluster=)`)."""

    user_threads: int
    producer_threads: int = 0
    producer_regs: int = 0
    consumer_regs: int = 0
    cluster: tuple[int, int, int] = (1, 1, 1)
    # A kernel that communicates (gemm_sm90_comm): its first `head` and last `tail` top-level
    # statements run on every thread of the block, before the split and after the join; after the
    # join every thread has `join_regs` registers.
    head: int = 0
    tail: int = 0
    join_regs: int = 0
    blocks_per_sm: int = 1  # the kernel's (`ts.kernel(blocks_per_sm=)`): __launch_bounds__'s minimum
    # The consumer warpgroups run apart (gemm_sm90_pingpong): no barrier over all of them is reached by
    # every one, so a failing check pauses instead of meeting the others (TS_FAIL_SYNC).
    consumers_apart: bool = False

    @property
    def warp_specialised(self) -> bool:
        return self.producer_threads > 0

    @property
    def cluster_blocks(self) -> int:
        return math.prod(self.cluster)

    @property
    def total_threads(self) -> int:
        return self.user_threads + self.producer_threads

    @property
    def launch_bounds(self) -> str:
        """`__launch_bounds__`'s arguments: the block's threads and, when the kernel asks for several
        blocks per SM or is warp-specialised (whose setmaxnreg split assumes the register share of
        that many blocks), the minimum blocks per SM."""
        if self.warp_specialised or self.blocks_per_sm != 1:
            return f"{self.total_threads}, {self.blocks_per_sm}"
        return f"{self.total_threads}"

    def block_sync(self) -> str:
        """The barrier of the threads that run the kernel's statements: the whole block, or in a
        warp-specialised frame named barrier 1 over the kernel's own threads (`__syncthreads`
        would wait for the producer too)."""
        return f"ts_named_sync(1, {self.user_threads});" if self.warp_specialised else "__syncthreads();"


def kernel_cluster(kernel: KernelIR) -> tuple[int, int, int]:
    """The kernel's cluster shape along grid x, y, z ((1, 1, 1): none)."""
    x, y, z = (*kernel.cluster, 1, 1, 1)[:3]
    return x, y, z


class GemmPlan(PlanMemory, Protocol):
    """What the code generator may ask of a tensor-core GEMM plan (see the module doc); what the
    layout asks (`register_buffers`, `stage_buffers`, `barrier_words`) is `layout.PlanMemory`."""

    arch: str  # the target the kernel compiles for (sm_90a when it uses wgmma)
    frame: Frame
    notes: list[str]  # loops the plan took with changes, and why (the generated header prints them)
    loops: Sequence[PlannedLoop]  # the pipelined loops it lowers, each with its ring of stages

    def lines(self, stmt: Stmt, ctx: Ctx) -> list[str] | None:
        """The code of `stmt` when the plan owns it, else None (the rule table's rule runs)."""
        ...

    def device_headers(self) -> tuple[str, ...]:
        """The codegen headers (package data) the kernel includes after the common ones."""
        ...

    def declarations(self) -> list[str]:
        """Lines after those headers, before the kernel: device functions and types it calls."""
        ...

    def kernel_params(self) -> str:
        """Parameters after `args` (with their leading comma), "" for none."""
        ...

    def tensor_map_fields(self) -> tuple[int, ...]:
        """The handler's `tensor_maps` launch attribute (docs/calling_convention.md)."""
        ...

    def setup(self, ctx: Ctx) -> list[str]:
        """Lines every thread of the block runs after the prologue, before the frame splits."""
        ...

    def accumulators(self) -> list[str]:
        """Declarations at the top scope of the threads that run the statements."""
        ...

    def producer(self, ctx: Ctx) -> list[str]:
        """The program of the producer warpgroup's threads (warp-specialised frames only)."""
        ...

    def consumer_exit(self) -> list[str]:
        """Lines the kernel's own threads run after their statements, before they meet the producer
        (warp-specialised frames only)."""
        ...


@dataclass(frozen=True)
class Ctx:
    """What statement rules need besides the statement."""

    kernel: KernelIR
    layout: Layout
    pointers: dict[Buffer, str]  # C name of each buffer's `unsigned char*` base
    plan: GemmPlan | None = None
    # Inside a thread-dependent `if` (codegen/control.py): each thread that took the branch runs
    # the statements' per-thread code, without block barriers, which the threads outside would
    # never reach.
    thread_branch: bool = False
    # Generated without calls (codegen/call_free.py): the communication rules emit P2P loads, stores
    # and release atomics instead of NVSHMEM calls.
    call_free: bool = False
    # Zero-copy params of a call-free kernel (codegen/staging.py), each with its param index: a peer's copy
    # is addressed through what the peer publishes at the start of the launch (comm.peer_address).
    zero_copy: Mapping[Buffer, int] = field(default_factory=dict)
    # Staged outputs the kernel copies out itself (codegen/stage_out.py): the lines each copying wait
    # (by its id) runs after its block barrier.
    stage_out_copies: Mapping[int, tuple[str, ...]] = field(default_factory=dict)

    @property
    def num_blocks(self) -> int:
        return math.prod(self.kernel.grid)

    @property
    def frame(self) -> Frame:
        own = kernel_cluster(self.kernel)
        if self.plan is None:
            return Frame(self.kernel.threads, blocks_per_sm=self.kernel.blocks_per_sm, cluster=own)
        frame = self.plan.frame
        if frame.blocks_per_sm != self.kernel.blocks_per_sm:  # a plan that leaves the registers to ptxas
            frame = replace(frame, blocks_per_sm=self.kernel.blocks_per_sm)
        if math.prod(own) > 1:  # the kernel's clusters (a plan multicasts only without them)
            frame = replace(frame, cluster=own)
        return frame

    def block_sync(self, note: str = "") -> list[str]:
        """The block barrier of a statement (the frame's), `note` saying why; none in a thread
        branch (the barrier after the `if` does its job)."""
        if self.thread_branch:
            return []
        sync = self.frame.block_sync()
        return [f"{sync}  // {note}" if note else sync]
