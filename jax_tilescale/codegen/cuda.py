"""Kernel IR -> CUDA C++ source that obeys docs/calling_convention.md.

`generate_cuda(kernel)` returns a `CudaModule`: the complete source (the fixed helpers of
tilescale_device.cuh inlined, so building it needs only the CUDA toolkit and NVSHMEM's
headers) and the launch facts the FFI handler needs. Statements are translated by the rules in
`body.EMIT` (one per statement type, registered by the rule modules imported here); index
expressions by `expr_printer`; the placement of allocations by `layout`; the loop structure of
copies and puts by `regions`. A kernel's GEMM loops may take a tensor-core plan
(`gemm_select.select_plan`); this module asks it only what `context.GemmPlan` states, and
builds the kernel around the statements from the plan's `Frame`.

Semantics follow the CPU interpreter (the reference): Python integer division, NVSHMEM's
put/signal/quiet/fence meaning, and `barrier_all` as a meeting of every block of every PE.
"""

from __future__ import annotations

import functools
import importlib.resources
from dataclasses import dataclass, replace

from .. import abi
from ..errors import KernelTraceError
from ..ir.cluster import ClusterSync, cluster_size
from ..ir.kernel_ir import KernelIR
from ..ir.nodes import Buffer, BufferKind
from ..ir.printer import format_kernel
from ..ir.verify import verify_kernel
from . import cluster, collectives, comm, compute, control, stage_in, tile_ops
from .body import RESTORE, emit_body, emit_stmt
from .call_free import call_free
from .call_free import header_lines as call_free_header
from .common import COPY_BATCH, INDENT, MOVE_TYPES, c_identifier, c_string, comment, indent
from .context import Ctx
from .end_of_call import end_of_call
from .expr_printer import GRID_VAR_NAMES, PE_VAR_NAME, SEQ_NAME, buffer_pointer_name
from .gemm_select import select_plan, shared_memory_refusal
from .gemm_sm80 import arch_number
from .layout import Layout, needs_grid_barrier, plan_layout
from .stage_in import kernel_copied_in
from .stage_out import copy_lines, copying_waits, stage_out
from .stage_out import declarations as stage_out_declarations
from .staging import handler_flags, zero_copy_params

# The calling convention's numbers, from its one definition (jax_tilescale/abi/ts_abi.h), which the
# device header includes and the generated source therefore inlines.
TS_ABI_VERSION = abi.ABI_VERSION
TS_MAX_BUFFERS = abi.MAX_BUFFERS
LAUNCH_ARGS_BYTES = abi.LAUNCH_ARGS_BYTES  # sizeof(TsLaunchArgs), static_assert-ed in the generated source
SCRATCH_NAME = "ts_scratch"  # the launch's scratch base in the generated kernel
# Plain kernels on sm_90 and later are launched as programmatic dependents (CudaModule.dependent_launch); False
# launches every kernel plainly (an A/B switch: benchmarks/bench_gemm.py's `/nodep`).
DEPENDENT_LAUNCH = True
# Where a dependent launch waits: False, first thing; True, after the plan's set-up (its mbarriers initialised,
# before any statement), so that the set-up overlaps the grid before it too (`/late`).
DEPENDENT_WAIT_AFTER_SETUP = False
# A kernel lets the kernel after it launch (griddepcontrol.launch_dependents) as soon as all its blocks have begun,
# instead of when they end (`/trig`): helps only where the kernel after it is a dependent launch (one of ours).
DEPENDENT_TRIGGER_EARLY = False


@dataclass(frozen=True)
class CudaModule:
    """A generated kernel: its source and what launching it takes."""

    source: str
    entry: str
    threads: int
    grid: tuple[int, int, int]
    smem_bytes: int
    scratch_bytes: int
    uses_nvshmem: bool
    grid_barrier: bool
    call_free: bool = False  # communicates without NVSHMEM calls (codegen/call_free.py)
    staged: tuple[int, ...] = ()  # the handler's `staged` attribute, one flag per param (codegen/staging.py)
    arch: str = "sm_90"  # what to compile for (sm_90a when the kernel uses wgmma)
    tensor_maps: tuple[int, ...] = ()  # the handler's `tensor_maps` attribute (TENSOR_MAP_FIELDS per map)
    notes: tuple[str, ...] = ()  # GEMM loops that took another lowering than the preferred one, and why
    scratch_left_zero: bool = False  # a plain kernel's scratch is all `left_zero` buffers: no end of call
    # The kernel's first statement waits for the grid before it (ts_wait_for_prior_grid), so the handler launches
    # it as a programmatic dependent of that grid (the `dependent_launch` attribute): plain kernels on sm_90+.
    dependent_launch: bool = False

    @property
    def graph_safe(self) -> bool:
        """The launch needs no host work that changes from call to call (no NVSHMEM, and no scratch or only
        scratch the kernel leaves zero itself, so no launch-control words): XLA may capture it in a command
        buffer (CUDA graph) and replay it, each replay finding the call site's scratch zero."""
        return not self.uses_nvshmem and (self.scratch_bytes == 0 or self.scratch_left_zero)


@functools.lru_cache(maxsize=8)
def device_header(name: str = "tilescale_device.cuh") -> str:
    """The text of one of the codegen's headers (package data), with `#include "ts_abi.h"` replaced
    by the calling convention's header: the generated source is compiled on its own."""
    text = importlib.resources.files(__package__).joinpath(name).read_text(encoding="utf-8")
    return text.replace(f'#include "{abi.HEADER_NAME}"\n', abi.header_text())


# The modules whose rules fill body.EMIT (each registers its own when imported).
RULE_MODULES = (cluster, compute, comm, collectives, control, tile_ops)


# ---- assembly -----------------------------------------------------------------------------------


def _prologue(ctx: Ctx) -> list[str]:
    k = ctx.kernel
    smem = "ts_smem"
    lines = ["extern __shared__ __align__(128) unsigned char ts_smem_raw[];"]
    if ctx.plan is not None:  # swizzled tiles need 1024-byte alignment (the layout reserved the slack)
        # Aligned by an offset from the shared array, not through an integer: a pointer that went through
        # uintptr_t is generic to nvcc, and every access through it compiled to a generic ST.E / LD.E with
        # 64-bit address arithmetic instead of STS / LDS (the TMA-store epilogue's 64 stores per thread: SASS
        # checked, benchmarks/NOTES.md 2026-12-02). The shared window's base is aligned, so aligning the
        # shared-space address aligns the generic one too.
        lines.append("unsigned char* const ts_smem = ts_smem_raw + ((1024u - (static_cast<uint32_t>("
                     "__cvta_generic_to_shared(ts_smem_raw)) & 1023u)) & 1023u);")
    else:
        lines.append("unsigned char* const ts_smem = ts_smem_raw;")
    lines += [
        (
            f"const int64_t {GRID_VAR_NAMES[0]} = blockIdx.x, {GRID_VAR_NAMES[1]} = blockIdx.y, "
            f"{GRID_VAR_NAMES[2]} = blockIdx.z;"
        ),
        f"const int64_t {PE_VAR_NAME} = args.pe;",
    ]
    used = [*GRID_VAR_NAMES, PE_VAR_NAME]
    for i, buf in enumerate(k.params):
        # An aliased input is its output's memory: through that param's pointer, which is the staged
        # (symmetric) copy when peers touch the pair (docs/calling_convention.md).
        i = k.params.index(k.memory_of(buf)) if k.aliases else i
        lines.append(
            f"unsigned char* const {ctx.pointers[buf]} = static_cast<unsigned char*>(args.buffers[{i}]);  "
            f"{comment(str(buf))}"
        )
    for buf, off in ctx.layout.shared_offsets.items():
        lines.append(f"unsigned char* const {ctx.pointers[buf]} = {smem} + {off};  {comment(str(buf))}")
    if ctx.layout.scratch_bytes > 0:
        # this launch's scratch: the half of the symmetric workspace its launch number picks, read on the
        # device so that a replayed launch finds its own (tilescale_device.cuh, ts_launch_scratch)
        lines.append(f"unsigned char* const {SCRATCH_NAME} = ts_launch_scratch(args, {SEQ_NAME});")
    for buf, off in ctx.layout.signal_offsets.items():
        lines.append(f"unsigned char* const {ctx.pointers[buf]} = {SCRATCH_NAME} + {off};  {comment(str(buf))}")
    if ctx.layout.barrier_offset is not None:
        off = ctx.layout.barrier_offset
        lines.append(f"unsigned int* const ts_bar_count = reinterpret_cast<unsigned int*>({SCRATCH_NAME} + {off});")
        lines.append(f"unsigned int* const ts_bar_gen = reinterpret_cast<unsigned int*>({SCRATCH_NAME} + {off + 4});")
    for name, off in ((collectives.PE_BARRIER, ctx.layout.pe_barrier_offset),
                      (collectives.TEAM_BARRIER, ctx.layout.team_barrier_offset)):
        if off is not None:
            lines.append(f"TsTeamBarrier* const {name} = reinterpret_cast<TsTeamBarrier*>({SCRATCH_NAME} + {off});")
    lines += control.prologue(ctx)  # the thread index and per-thread registers
    used += [ctx.pointers[b] for b in (*k.params, *ctx.layout.shared_offsets, *ctx.layout.signal_offsets)]
    lines.append(" ".join(f"(void){name};" for name in used) + "  // not every kernel uses all of them")
    return lines


def _pointer_names(kernel: KernelIR) -> dict[Buffer, str]:
    names: dict[Buffer, str] = {}
    taken: set[str] = set()
    # T.load spells a buffer's pointer from its name alone (expr_printer): loaded buffers choose first.
    loaded = {b for b in kernel.loaded() if b.kind is not BufferKind.LOCAL}  # registers have their own names
    everything = kernel.params + kernel.allocs
    for buf in [b for b in everything if b in loaded] + [b for b in everything if b not in loaded]:
        name = base = buffer_pointer_name(buf.name)
        i = 1
        while name in taken:
            name, i = f"{base}_{i}", i + 1
        taken.add(name)
        names[buf] = name
    for buf in everything:
        if buf in loaded and names[buf] != buffer_pointer_name(buf.name):
            raise KernelTraceError(f"internal: the loaded buffer {buf.name} has the C name {names[buf]}", kernel.loc)
    return names


def _check_supported(kernel: KernelIR) -> None:
    if len(kernel.params) > TS_MAX_BUFFERS:
        raise KernelTraceError(
            f"kernel {kernel.name} has {len(kernel.params)} inputs and outputs; the calling convention "
            f"passes at most {TS_MAX_BUFFERS}",
            kernel.loc,
        )
    for buf in kernel.params + kernel.allocs:
        if buf.dtype.itemsize not in MOVE_TYPES or buf.dtype.hasobject:
            raise KernelTraceError(f"kernel {kernel.name}: {buf} has a dtype the GPU backend cannot move", kernel.loc)


def _check_cluster(kernel: KernelIR, arch: str) -> None:
    """Thread-block clusters (ts.kernel(cluster=)) need sm_90, and a launch that is not cooperative."""
    if cluster_size(kernel.cluster) == 1:
        return
    if (arch_number(arch) or 0) < 90:
        raise KernelTraceError(f"kernel {kernel.name}: thread-block clusters (cluster={kernel.cluster}) need an sm_90 "
                               f"GPU or later; this one is {arch}", kernel.loc)
    if needs_grid_barrier(kernel):
        raise KernelTraceError(f"kernel {kernel.name}: barrier_all/sync_all between the blocks of a kernel with "
                               "clusters is not supported (the grid barrier needs a cooperative launch, which takes "
                               "no cluster shape); meet the blocks of a cluster with T.cluster_sync()", kernel.loc)


def _entry_name(kernel: KernelIR) -> str:
    return f"ts_{c_identifier(kernel.name)}"


def generate_cuda(kernel: KernelIR, arch: str = "sm_90", gemm_lowering: str | None = None,
                  p2p_peers: bool = True) -> CudaModule:
    """CUDA C++ for `kernel` (verified here) plus its launch facts. `arch` is the GPU's (sm_90
    enables the Hopper GEMM lowering, which then compiles for sm_90a; sm_80 and later the mma.sync
    one). `gemm_lowering` ("auto", "sm90", "mma", "portable"; default $TILESCALE_GEMM_LOWERING, else
    "auto") picks the GEMM loops' lowering: codegen/gemm_select.py. `p2p_peers`: every peer is
    load/store reachable (one node), which a call-free kernel needs (codegen/call_free.py)."""
    verify_kernel(kernel)
    _check_supported(kernel)
    _check_cluster(kernel, arch)
    plan, notes = select_plan(kernel, arch, gemm_lowering)
    free = call_free(kernel, p2p_peers)
    kernel_in = kernel_copied_in(kernel, free.on)
    try:
        layout = plan_layout(kernel, plan, arch, copy_in_counters=bool(kernel_in))
    except KernelTraceError as e:
        lays_out = functools.partial(plan_layout, kernel, arch=arch, copy_in_counters=bool(kernel_in))
        raise shared_memory_refusal(kernel, plan, notes, e, arch, lays_out) from None
    kernel_out, kernel_out_note = stage_out(kernel, free.on, plan is not None, first_home=len(kernel_in))
    staged = handler_flags(kernel, free.on, tuple(kernel.params.index(b) for b in kernel_in),
                           kernel_out.params if kernel_out else ())
    zero_copy = zero_copy_params(kernel, staged)
    copying = copying_waits(kernel, kernel_out) if kernel_out else []
    copies = {id(w): tuple(copy_lines(kernel_out, w, k, kernel.grid)) for k, w in enumerate(copying)}
    ctx = Ctx(kernel, layout, _pointer_names(kernel), plan, call_free=free.on, zero_copy=zero_copy,
              stage_out_copies=copies)
    frame = ctx.frame
    entry = _entry_name(kernel)
    uses_nvshmem = kernel.uses_nvshmem()
    threads = frame.total_threads

    out: list = [
        f"// Generated by jax_tilescale.codegen.cuda from kernel `{kernel.name}` ({kernel.loc}). Do not edit.",
        *(comment(line) for line in format_kernel(kernel).splitlines()),
        *(comment(note) for note in notes),
        *([comment(kernel_out_note)] if kernel_out_note else []),
        "",
        f"#define TS_USES_NVSHMEM {int(uses_nvshmem)}",
        f"#define TS_COPY_BATCH {COPY_BATCH}  // loads per thread before its stores in a copy (codegen/common.py)",
        *call_free_header(free),
    ]
    if frame.head or frame.tail or frame.consumers_apart:  # ts_fail reached by every thread (head, tail),
        # the consumers only, or one consumer warpgroup only
        out += ["// ts_fail may be reached by some of the block's threads only: a pause, no barrier.",
                "#define TS_FAIL_SYNC() __nanosleep(1000000)"]
    elif frame.warp_specialised:  # ts_fail's barrier must not wait for the producer warpgroup
        out.append(f'#define TS_FAIL_SYNC() asm volatile("bar.sync 1, {frame.user_threads};" ::: "memory")')
    else:  # ts_fail reached by some threads only (thread-dependent ifs)
        out += control.header_defines(kernel)
    out += [
        *device_header().splitlines(),
        *device_header("tilescale_call.cuh").splitlines(),
        *device_header("tilescale_compute.cuh").splitlines(),
        *device_header("tilescale_tile_ops.cuh").splitlines(),
        "",
        f'static_assert(TS_ABI_VERSION == {TS_ABI_VERSION}, "codegen and device header disagree on the ABI");',
        "",
    ]
    params = "const TsLaunchArgs args"
    if plan is not None:
        for name in plan.device_headers():
            out += [*device_header(name).splitlines(), ""]
        out += plan.declarations()
        params += plan.kernel_params()
    if kernel_in:
        out += [*stage_in.declarations(kernel, kernel_in), ""]
    if kernel_out:
        out += [*stage_out_declarations(kernel_out, copying), ""]
    cluster = f" __cluster_dims__({', '.join(map(str, frame.cluster))})" if frame.cluster_blocks > 1 else ""
    left_zero = not uses_nvshmem and _scratch_left_zero(layout)
    start, end = _call_start(kernel, free.on, kernel_in), _call_end(kernel, layout, free.on, left_zero)
    if kernel_in:
        assert layout.copy_in_offset is not None
        start = [*stage_in.start_lines(kernel, kernel_in, layout.copy_in_offset), *start]
    if zero_copy:  # before any peer can wait for it: where this launch's copies of those buffers are
        mask = sum(1 << i for i in zero_copy.values())
        names = ", ".join(b.name for b in zero_copy)
        start = [comment(f"zero-copy: tell the peers where {names} are this launch (XLA's buffers or staged copies)"),
                 f"ts_publish_params(args, {SEQ_NAME}, {mask:#x}u, {c_string(str(kernel.loc))});", *start]
    if free.on:  # before any check can fail: where a failed check reports (the header's ts_fail_record)
        start = ["ts_fault_sink_set(args);", *start]
    if end:  # a kernel with an end of call (it communicates or has scratch) reads its number (a plain one's: 0)
        start = [f"const uint64_t {SEQ_NAME} = ts_launch_seq(args);  {comment('this launch: read once, first thing')}",
                 *start]
    dependent = dependent_launch(uses_nvshmem, layout.barrier_offset is not None, arch)
    wait = [f"ts_wait_for_prior_grid();  {comment('a dependent launch: the grid before it has ended')}",
            *(["ts_launch_dependents();"] if DEPENDENT_TRIGGER_EARLY else [])] if dependent else []
    late = bool(wait) and DEPENDENT_WAIT_AFTER_SETUP and plan is not None
    if wait and not late:  # before anything else touches memory (a plain kernel's launch number is a parameter)
        start = [*wait, *start]
    out += [
        f'extern "C" __global__ void __launch_bounds__({frame.launch_bounds}){cluster} {entry}({params}) {{',
        *indent(start),
        *indent(_prologue(ctx)),
        *indent(_frame_body(ctx, wait if late else [])),
        *indent(end),
        "}",
        "",
    ]

    # Statement code is attributed to the user's line (nvcc messages, -lineinfo in profilers);
    # everything else to the generated file, which the compiler saves as `<entry>.cu`.
    text = [f"#line {i + 2} \"{entry}.cu\"" if line is RESTORE else line for i, line in enumerate(out)]
    grid = tuple(kernel.grid) + (1,) * (3 - len(kernel.grid))
    return CudaModule(
        source="\n".join(text),
        entry=entry,
        threads=threads,
        grid=grid,  # type: ignore[arg-type]
        smem_bytes=layout.smem_bytes,
        scratch_bytes=layout.scratch_bytes,
        uses_nvshmem=uses_nvshmem,
        call_free=free.on,
        staged=staged,
        grid_barrier=layout.barrier_offset is not None,
        arch=plan.arch if plan is not None else arch,
        tensor_maps=plan.tensor_map_fields() if plan is not None else (),
        notes=tuple(notes),
        scratch_left_zero=left_zero,
        dependent_launch=dependent,
    )


def dependent_launch(uses_nvshmem: bool, grid_barrier: bool, arch: str) -> bool:
    """Whether a kernel is launched as a programmatic dependent of the grid before it (CudaModule.dependent_launch):
    a plain one (a communicating kernel's launch is ordered with its peers by its staging and entry barrier, and a
    cooperative launch takes no launch attributes) on a GPU with griddepcontrol (sm_90 and later)."""
    return DEPENDENT_LAUNCH and not uses_nvshmem and not grid_barrier and (arch_number(arch) or 0) >= 90


def _call_start(kernel: KernelIR, call_free: bool, kernel_in: tuple[Buffer, ...] = ()) -> list[str]:
    """The entry barrier, for kernels whose peers read this PE's inputs or touch an aliased output
    (docs/calling_convention.md, "End of a call"): the handler copies such buffers into the symmetric
    workspace before the launch, and a peer may not read or write them before this PE's launch has
    begun. A call-free kernel needs none: such params are zero-copy params there (codegen/staging.py),
    every peer access to one waits for this PE's publish of this launch (ts_peer_param_ptr), and this PE
    publishes at its kernel's start, after any copy-in in stream order: the barrier would prove nothing
    more and costs a round trip between the PEs. `kernel_in`: the inputs the kernel copies in itself,
    just before (codegen/stage_in.py)."""
    copied_in = kernel.copied_in()
    copied = [b for b in kernel.params if b in copied_in]
    if not copied:
        return []
    names = ", ".join(b.name for b in copied)
    verb = "read or write" if kernel.aliases else "read"
    if call_free:
        return [comment(f"no entry barrier: peers {verb} {names} only after waiting for this PE's publish "
                        "of this launch, which follows the copies in stream order")]
    by_kernel = ", ".join(b.name for b in copied if b in kernel_in)
    by_handler = ", ".join(b.name for b in copied if b not in kernel_in)
    how = "; ".join([*([f"{by_kernel} copied in by this kernel just before"] if by_kernel else []),
                     *([f"{by_handler} copied in by the handler before the launch"] if by_handler else [])])
    return [
        comment(f"entry barrier: peers {verb} {names} ({how})"),
        f"ts_call_start(args, {SEQ_NAME}, {c_string(str(kernel.loc))});",
    ]


def _call_end(kernel: KernelIR, layout: Layout, call_free: bool, left_zero: bool) -> list[str]:
    """How a launch ends (docs/calling_convention.md, "End of a call"): a kernel that communicates
    ends with a device-side barrier over its PE space (its remote writes are complete when the call
    returns, and no peer writes into the scratch half it zeroes), unless it proves completion itself
    (codegen/end_of_call.py); a kernel with scratch zeroes it for the next launch, unless all of it is
    buffers the kernel leaves zero itself (`left_zero`: `T.alloc(..., left_zero=True)`, which the interpreter checks);
    a plain kernel without scratch ends with its last statement."""
    scratch_bytes = layout.scratch_bytes
    meet = True
    if kernel.uses_nvshmem():
        ending = end_of_call(kernel, call_free)
        meet = ending.meet
        if meet:
            why = ("end of call: every block quiets, the last one meets every PE of the kernel's PE space "
                   "(remote writes complete when the call returns) and zeroes the scratch for the launch after "
                   f"next. Not without the meeting: {ending.why}")
        else:
            why = f"end of call without the meeting: {ending.why}; the last block zeroes the scratch"
    elif left_zero:
        names = ", ".join(b.name for b in layout.signal_offsets)
        return [comment(f"no end of call: the kernel leaves its scratch ({names}) zero itself (left_zero=True)")]
    elif scratch_bytes > 0:
        why = "end of call: the last block to finish zeroes the scratch for the next launch"
    else:
        return []
    return [comment(why), f"ts_call_end(args, {SEQ_NAME}, {scratch_bytes}u, {c_string(str(kernel.loc))}, "
                          f"{'true' if meet else 'false'});"]


def _scratch_left_zero(layout: Layout) -> bool:
    """Whether there is scratch and every word of it belongs to a buffer the kernel promised to leave zero
    (no grid-barrier or copy-in words, which only the end of call restores)."""
    words = (layout.barrier_offset, layout.pe_barrier_offset, layout.team_barrier_offset, layout.copy_in_offset)
    return (layout.scratch_bytes > 0 and all(w is None for w in words)
            and all(b.left_zero for b in layout.signal_offsets))


def _frame_body(ctx: Ctx, wait: list[str]) -> list:
    """The kernel's statements as the plan's frame arranges them: after the plan's accumulators,
    or, warp-specialised, split between the producer warpgroup (the plan's producer program) and
    the kernel's own threads (gemm_sm90's docstring has the picture); in a kernel that
    communicates, with a head before the split and a tail after the join that every thread of the
    block runs (gemm_sm90_comm). `wait`: a dependent launch's wait, put right after the plan's set-up (which
    touches shared memory only)."""
    plan, body = ctx.plan, ctx.kernel.body
    frame = ctx.frame
    # A cluster's blocks meet before any addresses a peer's tiles and before any ends (ir/cluster.py)
    ends = (["ts_cluster_sync();  // the cluster's blocks: all started / all done with each other's tiles"]
            if frame.cluster_blocks > 1 else [])
    if plan is None:
        return [*ends, *emit_body(body, ctx), *ends]
    if not frame.warp_specialised:
        return [*plan.setup(ctx), *wait, *ends, *plan.accumulators(), *emit_body(body, ctx), *ends]
    user = frame.user_threads
    split_end = len(body) - frame.tail
    # the head and the tail: every thread of the block, as if the kernel had that many (no plan
    # statement stands there; their barriers are __syncthreads)
    whole = replace(ctx, kernel=replace(ctx.kernel, threads=frame.total_threads), plan=None)
    head = [line for n in range(frame.head) for line in emit_stmt(body[n], whole, str(n))]
    split = [line for n in range(frame.head, split_end) for line in emit_stmt(body[n], ctx, str(n))]
    tail = [line for n in range(split_end, len(body)) for line in emit_stmt(body[n], whole, str(n))]
    join = {side: ([f"{INDENT}ts_setmaxnreg_{side}<{frame.join_regs}>();  // the tail runs on every thread: "
                    "an even share of the registers"] if frame.tail else []) for side in ("inc", "dec")}
    cluster = ["const uint32_t ts_crank = ts_cluster_rank();  // this block's rank in its cluster", "(void)ts_crank;"]
    # The producer meets the cluster as often as the consumers' statements do (top-level cluster_syncs only:
    # ir/verify_cluster.py), so every barrier.cluster round counts every thread of the cluster.
    syncs = sum(isinstance(body[n], ClusterSync) for n in range(frame.head, split_end))
    return [
        *(cluster if frame.cluster_blocks > 1 else []),
        *plan.setup(ctx),
        *wait,
        *head,
        f"if (threadIdx.x >= {user}) {{  // producer warpgroup: TMA copies of the pipelined loops",
        f"{INDENT}ts_setmaxnreg_dec<{frame.producer_regs}>();",
        *indent(plan.producer(ctx)),
        *([f"{INDENT}for (int ts_c = 0; ts_c < {syncs}; ++ts_c) ts_cluster_sync();  // the consumers' cluster_syncs"]
          if syncs else []),
        *join["inc"],
        f"}} else {{  // consumer warpgroups: the kernel's own {user} threads",
        f"{INDENT}ts_setmaxnreg_inc<{frame.consumer_regs}>();",
        *indent(plan.accumulators()),
        *indent(split),
        *indent(plan.consumer_exit()),
        *join["dec"],
        "}",
        # a peer may still multicast into this block's tiles or arrive on its barriers until both are done
        *(["ts_cluster_sync();"] if frame.cluster_blocks > 1 else []),
        *(["__syncthreads();  // the producer and the consumers meet: the tail runs on every thread"]
          if frame.tail else []),
        *tail,
    ]
