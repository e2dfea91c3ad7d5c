"""Kernel IR -> CUDA C++ source that obeys docs/calling_convention.md.

`generate_cuda(kernel)` returns a `CudaModule`: the complete source (the fixed helpers of
tilescale_device.cuh inlined, so building it needs only the CUDA toolkit and NVSHMEM's
headers) and the launch facts the FFI handler needs. Statements are translated by the rules in
`EMIT_RULES` (one function per statement type); index expressions by `expr_printer`; the
placement of allocations by `layout`; the loop structure of copies and puts by `regions`.

Semantics follow the CPU interpreter (the reference): Python integer division, NVSHMEM's
put/signal/quiet/fence meaning, and `barrier_all` as a meeting of every block of every PE.
"""

from __future__ import annotations

import functools
import importlib.resources
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import KernelTraceError
from ..ir.nodes import Buffer, Copy, KernelIR, SourceLoc, Stmt
from ..ir.printer import format_kernel, format_stmt
from ..ir.verify import verify_kernel
from . import collectives, comm
from .common import INDENT, MOVE_TYPES, Ctx, c_identifier, c_string, comment, copy_loop, indent
from .expr_printer import GRID_VAR_NAMES, PE_VAR_NAME, WHERE_NAME, buffer_pointer_name
from .layout import plan_layout

TS_ABI_VERSION = 1  # must match TS_ABI_VERSION in tilescale_device.cuh and the handler
TS_MAX_BUFFERS = 32
LAUNCH_ARGS_BYTES = 280  # sizeof(TsLaunchArgs), static_assert-ed in the generated source


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


@functools.lru_cache(maxsize=1)
def device_header() -> str:
    """The text of tilescale_device.cuh (package data)."""
    return importlib.resources.files(__package__).joinpath("tilescale_device.cuh").read_text(encoding="utf-8")


# ---- statement rules ----------------------------------------------------------------------------


def _emit_copy(s: Copy, ctx: Ctx) -> list[str]:
    # One barrier after every copy: it orders shared-memory writes before later reads, and
    # reads before later overwrites, for whatever statement comes next.
    return [*copy_loop(ctx, s.src, s.dst), "__syncthreads();"]


EMIT_RULES: dict[type, Callable[[Stmt, Ctx], list[str]]] = {
    Copy: _emit_copy,
    **comm.RULES,
    **collectives.RULES,
}


# ---- assembly -----------------------------------------------------------------------------------


class _Restore:
    """Placeholder for a `#line` that returns to the generated file (numbered at the end)."""


_RESTORE = _Restore()


def _line_directive(loc: SourceLoc) -> str | None:
    return f"#line {loc.lineno} {c_string(loc.filename)}" if loc.lineno > 0 else None


def _prologue(ctx: Ctx) -> list[str]:
    k = ctx.kernel
    lines = [
        "extern __shared__ __align__(128) unsigned char ts_smem[];",
        (
            f"const int64_t {GRID_VAR_NAMES[0]} = blockIdx.x, {GRID_VAR_NAMES[1]} = blockIdx.y, "
            f"{GRID_VAR_NAMES[2]} = blockIdx.z;"
        ),
        f"const int64_t {PE_VAR_NAME} = args.pe;",
    ]
    used = [*GRID_VAR_NAMES, PE_VAR_NAME]
    for i, buf in enumerate(k.params):
        lines.append(
            f"unsigned char* const {ctx.pointers[buf]} = static_cast<unsigned char*>(args.buffers[{i}]);  "
            f"{comment(str(buf))}"
        )
    for buf, off in ctx.layout.shared_offsets.items():
        lines.append(f"unsigned char* const {ctx.pointers[buf]} = ts_smem + {off};  {comment(str(buf))}")
    for buf, off in ctx.layout.signal_offsets.items():
        lines.append(f"unsigned char* const {ctx.pointers[buf]} = args.scratch + {off};  {comment(str(buf))}")
    if ctx.layout.barrier_offset is not None:
        off = ctx.layout.barrier_offset
        lines.append(f"unsigned int* const ts_bar_count = reinterpret_cast<unsigned int*>(args.scratch + {off});")
        lines.append(f"unsigned int* const ts_bar_gen = reinterpret_cast<unsigned int*>(args.scratch + {off + 4});")
    for name, off in ((collectives.PE_BARRIER, ctx.layout.pe_barrier_offset),
                      (collectives.TEAM_BARRIER, ctx.layout.team_barrier_offset)):
        if off is not None:
            lines.append(f"TsTeamBarrier* const {name} = reinterpret_cast<TsTeamBarrier*>(args.scratch + {off});")
    used += list(ctx.pointers.values())
    lines.append(" ".join(f"(void){name};" for name in used) + "  // not every kernel uses all of them")
    return lines


def _pointer_names(kernel: KernelIR) -> dict[Buffer, str]:
    names: dict[Buffer, str] = {}
    taken: set[str] = set()
    for buf in kernel.params + kernel.allocs:
        name = base = buffer_pointer_name(buf.name)
        i = 1
        while name in taken:
            name, i = f"{base}_{i}", i + 1
        taken.add(name)
        names[buf] = name
    for buf in kernel.inputs:  # T.load spells an input's pointer from its name alone
        if names[buf] != buffer_pointer_name(buf.name):
            raise KernelTraceError(f"internal: input {buf.name} has the C name {names[buf]}", kernel.loc)
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


def _entry_name(kernel: KernelIR) -> str:
    return f"ts_{c_identifier(kernel.name)}"


def generate_cuda(kernel: KernelIR) -> CudaModule:
    """CUDA C++ for `kernel` (verified here) plus its launch facts."""
    verify_kernel(kernel)
    _check_supported(kernel)
    layout = plan_layout(kernel)
    ctx = Ctx(kernel, layout, _pointer_names(kernel))
    entry = _entry_name(kernel)
    uses_nvshmem = kernel.uses_nvshmem()

    out: list[str | _Restore] = [
        f"// Generated by jax_tilescale.codegen.cuda from kernel `{kernel.name}` ({kernel.loc}). Do not edit.",
        *(comment(line) for line in format_kernel(kernel).splitlines()),
        "",
        f"#define TS_USES_NVSHMEM {int(uses_nvshmem)}",
        *device_header().splitlines(),
        "",
        f'static_assert(TS_ABI_VERSION == {TS_ABI_VERSION}, "codegen and device header disagree on the ABI");',
        "",
        f'extern "C" __global__ void __launch_bounds__({kernel.threads}) {entry}(const TsLaunchArgs args) {{',
        *indent(_prologue(ctx)),
    ]
    for n, stmt in enumerate(kernel.body):
        rule = EMIT_RULES.get(type(stmt))
        if rule is None:
            raise KernelTraceError(f"internal: no CUDA rule for {type(stmt).__name__}", stmt.loc)
        body = rule(stmt, ctx)
        if any(WHERE_NAME in line for line in body):  # the user's line, for run-time error messages
            body = [f"const char* const {WHERE_NAME} = {c_string(str(stmt.loc))};", *body]
        out += ["", INDENT + comment(f"[{n}] {format_stmt(stmt)}    at {stmt.loc}")]
        directive = _line_directive(stmt.loc)
        if directive is not None:
            out.append(directive)
        out += [INDENT + "{", *indent(body, 2), INDENT + "}"]
        if directive is not None:
            out.append(_RESTORE)
    out += ["}", ""]

    # Statement code is attributed to the user's line (nvcc messages, -lineinfo in profilers);
    # everything else to the generated file, which the compiler saves as `<entry>.cu`.
    text = [f"#line {i + 2} {c_string(entry + '.cu')}" if line is _RESTORE else line for i, line in enumerate(out)]
    grid = tuple(kernel.grid) + (1,) * (3 - len(kernel.grid))
    return CudaModule(
        source="\n".join(text),  # type: ignore[arg-type]
        entry=entry,
        threads=kernel.threads,
        grid=grid,  # type: ignore[arg-type]
        smem_bytes=layout.smem_bytes,
        scratch_bytes=layout.scratch_bytes,
        uses_nvshmem=uses_nvshmem,
        grid_barrier=layout.barrier_offset is not None,
    )
