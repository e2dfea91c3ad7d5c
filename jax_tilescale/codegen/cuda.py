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
import math
import re
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import KernelTraceError
from ..ir.expr import Const, Expr
from ..ir.nodes import (
    BarrierAll,
    Buffer,
    BufferKind,
    Cmp,
    Copy,
    Fence,
    KernelIR,
    Put,
    Quiet,
    Region,
    Scope,
    SignalOp,
    SignalWait,
    SourceLoc,
    Stmt,
)
from ..ir.printer import format_kernel, format_stmt
from ..ir.verify import verify_kernel
from .expr_printer import GRID_VAR_NAMES, PE_VAR_NAME, WHERE_NAME, c_expr, c_int64, uses_where
from .layout import Layout, plan_layout
from .regions import Dim, element_offset, walk_pair

TS_ABI_VERSION = 1  # must match TS_ABI_VERSION in tilescale_device.cuh and the handler
TS_MAX_BUFFERS = 32
LAUNCH_ARGS_BYTES = 280  # sizeof(TsLaunchArgs), static_assert-ed in the generated source

# Same-size types that move bytes (copies never convert, so the element type does not matter).
_MOVE_TYPES = {1: "uint8_t", 2: "uint16_t", 4: "uint32_t", 8: "uint2", 16: "uint4"}
_CMP_NAMES = {
    Cmp.EQ: "NVSHMEM_CMP_EQ",
    Cmp.NE: "NVSHMEM_CMP_NE",
    Cmp.GT: "NVSHMEM_CMP_GT",
    Cmp.GE: "NVSHMEM_CMP_GE",
    Cmp.LT: "NVSHMEM_CMP_LT",
    Cmp.LE: "NVSHMEM_CMP_LE",
}
_SIGNAL_OP_NAMES = {SignalOp.SET: "NVSHMEM_SIGNAL_SET", SignalOp.ADD: "NVSHMEM_SIGNAL_ADD"}
_INDENT = "  "


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


def _c_identifier(name: str) -> str:
    ident = re.sub(r"\W", "_", name, flags=re.ASCII)
    return ident if ident and not ident[0].isdigit() else f"_{ident}"


def _c_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _comment(text: str) -> str:
    # A trailing backslash would continue a `//` comment onto the next line.
    return "// " + text.replace("\\", "/")


@dataclass(frozen=True)
class _Ctx:
    """What statement rules need besides the statement."""

    kernel: KernelIR
    layout: Layout
    pointers: dict[Buffer, str]  # C name of each buffer's `unsigned char*` base

    @property
    def num_blocks(self) -> int:
        return math.prod(self.kernel.grid)


def _byte_address(ctx: _Ctx, buffer: Buffer, elem_offset: Expr) -> str:
    itemsize = buffer.dtype.itemsize
    base = ctx.pointers[buffer]
    if isinstance(elem_offset, Const):
        return base if elem_offset.value == 0 else f"{base} + {elem_offset.value * itemsize}"
    return f"{base} + {c_expr(elem_offset)} * {itemsize}"


def _index_type(limit: int) -> str:
    return "uint32_t" if limit < 2**31 else "uint64_t"


def _decompose(counter: str, dims: tuple[Dim, ...], idx: str) -> list[str]:
    """Lines binding ts_c0..ts_c{n-1} to the row-major coordinates of `counter` over `dims`."""
    if len(dims) == 1:
        return [f"const {idx} ts_c0 = {counter};"]
    lines = [f"{idx} ts_rest = {counter};"]
    for k in range(len(dims) - 1, 0, -1):
        lines.append(f"const {idx} ts_c{k} = ts_rest % {dims[k].size}u;")
        lines.append(f"ts_rest /= {dims[k].size}u;")
    lines.append(f"const {idx} ts_c0 = ts_rest;")
    return lines


def _linear(dims: tuple[Dim, ...], which: str, wide: bool) -> str:
    """sum(ts_ck * stride_k) for the `src` or `dst` strides; 64-bit when the buffer needs it."""
    terms = []
    for k, d in enumerate(dims):
        stride = d.src_stride if which == "src" else d.dst_stride
        coord = f"(int64_t)ts_c{k}" if wide else f"ts_c{k}"
        terms.append(coord if stride == 1 else f"{coord} * {stride}")
    return " + ".join(terms)


# ---- statement rules ----------------------------------------------------------------------------


def _emit_copy(s: Copy, ctx: _Ctx) -> list[str]:
    walk = walk_pair(s.src, s.dst)
    dims = walk.in_vectors()
    vtype = _MOVE_TYPES[walk.vector_bytes]
    count = math.prod(d.size for d in dims)
    idx = _index_type(count + ctx.kernel.threads)
    wide = max(s.src.buffer.nbytes, s.dst.buffer.nbytes) // walk.vector_bytes >= 2**31
    restrict = "" if s.src.buffer is s.dst.buffer else " __restrict__"
    src_addr = _byte_address(ctx, s.src.buffer, walk.src_offset)
    dst_addr = _byte_address(ctx, s.dst.buffer, walk.dst_offset)
    lines = [
        _comment(f"{walk.count} x {walk.itemsize}-byte elements as {count} x {walk.vector_bytes}-byte accesses"),
        f"const {vtype}*{restrict} ts_src = reinterpret_cast<const {vtype}*>({src_addr});",
        f"{vtype}*{restrict} ts_dst = reinterpret_cast<{vtype}*>({dst_addr});",
        f"for ({idx} ts_i = threadIdx.x; ts_i < {count}u; ts_i += {ctx.kernel.threads}u) {{",
        *(_INDENT + line for line in _decompose("ts_i", dims, idx)),
        f"{_INDENT}ts_dst[{_linear(dims, 'dst', wide)}] = ts_src[{_linear(dims, 'src', wide)}];",
        "}",
        # One barrier after every copy: it orders shared-memory writes before later reads, and
        # reads before later overwrites, for whatever statement comes next.
        "__syncthreads();",
    ]
    return lines


def _put_function(s: Put, with_signal: bool) -> str:
    if s.scope is not Scope.BLOCK:
        raise KernelTraceError(f"{s.op_name}: only block-scope puts are generated in this version", s.loc)
    name = "nvshmemx_putmem_signal" if with_signal else "nvshmemx_putmem"
    return name + ("" if s.blocking else "_nbi") + "_block"


def _signal_pointer(ctx: _Ctx, word: Region) -> str:
    base = f"reinterpret_cast<uint64_t*>({ctx.pointers[word.buffer]})"
    offset = element_offset(word)
    return base if offset == Const(0) else f"{base} + {c_expr(offset)}"


def _emit_put(s: Put, ctx: _Ctx) -> list[str]:
    itemsize = s.src.buffer.dtype.itemsize
    lines = [
        (
            f"const int ts_target = ts_target_pe(args.pe_map, args.npes, {c_int64(s.pe)}, {WHERE_NAME}, "
            f"{_c_string(f'{s.op_name}: target PE outside the kernel PE space [0, npes)')});"
        ),
    ]
    sig_args = ""
    if s.signal is not None:
        lines.append(f"uint64_t* const ts_sig = {_signal_pointer(ctx, s.signal.word)};")
        lines.append(f"const uint64_t ts_sig_value = (uint64_t)({c_expr(s.signal.value)});")
        sig_args = f"ts_sig, ts_sig_value, {_SIGNAL_OP_NAMES[s.signal.op]}, "
    if s.src.is_contiguous() and s.dst.is_contiguous():
        # One run: a single call, with the signal fused when there is one.
        fn = _put_function(s, s.signal is not None)
        lines.append(
            f"{fn}({_byte_address(ctx, s.dst.buffer, element_offset(s.dst))}, "
            f"{_byte_address(ctx, s.src.buffer, element_offset(s.src))}, {s.src.nbytes}, {sig_args}ts_target);"
        )
    else:
        lines += _put_rows(s, ctx, itemsize)
        if s.signal is not None:
            # The signal must land after every row: each thread orders its own stores (fence),
            # the barrier gathers them, then one thread signals the same PE.
            lines += [
                "nvshmem_fence();",
                "__syncthreads();",
                "if (threadIdx.x == 0) {",
                f"{_INDENT}nvshmemx_signal_op(ts_sig, ts_sig_value, {_SIGNAL_OP_NAMES[s.signal.op]}, ts_target);",
                "}",
            ]
    if s.src.buffer.kind is BufferKind.SHARED:
        # The block's threads read the tile inside the put; a later copy may overwrite it.
        lines.append("__syncthreads();")
    return lines


def _put_rows(s: Put, ctx: _Ctx, itemsize: int) -> list[str]:
    """One put per contiguous run of a non-contiguous region pair."""
    walk = walk_pair(s.src, s.dst, max_vector_bytes=itemsize)
    dims = walk.dims
    if walk.inner_contiguous:
        run, outer = dims[-1].size, dims[:-1]
    else:
        run, outer = 1, dims
    rows = math.prod(d.size for d in outer)
    fn = _put_function(s, with_signal=False)
    src = _byte_address(ctx, s.src.buffer, walk.src_offset)
    dst = _byte_address(ctx, s.dst.buffer, walk.dst_offset)
    return [
        _comment(f"{rows} runs of {run * itemsize} bytes"),
        f"const unsigned char* const ts_src = {src};",
        f"unsigned char* const ts_dst = {dst};",
        f"for (uint64_t ts_row = 0; ts_row < {rows}u; ++ts_row) {{",
        *(_INDENT + line for line in _decompose("ts_row", outer, "uint64_t")),
        (
            f"{_INDENT}{fn}(ts_dst + ({_linear(outer, 'dst', True)}) * {itemsize}, "
            f"ts_src + ({_linear(outer, 'src', True)}) * {itemsize}, {run * itemsize}, ts_target);"
        ),
        "}",
    ]


def _emit_signal_wait(s: SignalWait, ctx: _Ctx) -> list[str]:
    return [
        "if (threadIdx.x == 0) {",
        (
            f"{_INDENT}nvshmem_signal_wait_until({_signal_pointer(ctx, s.word)}, {_CMP_NAMES[s.cmp]}, "
            f"(uint64_t)({c_expr(s.value)}));"
        ),
        # NVSHMEM polls with volatile loads; the fence makes the data the signal announces
        # visible before the barrier hands control to the rest of the block.
        f"{_INDENT}__threadfence();",
        "}",
        "__syncthreads();",
    ]


def _emit_quiet(s: Quiet, ctx: _Ctx) -> list[str]:
    # Quiet is per thread (each thread's share of a block put); the barrier makes it the block's.
    return ["nvshmem_quiet();", "__syncthreads();"]


def _emit_fence(s: Fence, ctx: _Ctx) -> list[str]:
    return ["nvshmem_fence();"]


def _emit_barrier_all(s: BarrierAll, ctx: _Ctx) -> list[str]:
    # Every block completes its own puts, the PE's blocks meet, block 0 meets the other PEs
    # (NVSHMEM barrier, which also quiets), and the PE's blocks meet again to learn it is done.
    lines = ["nvshmem_quiet();"]
    if ctx.layout.barrier_offset is None:  # a single block: the block barrier is the grid barrier
        return [*lines, "__syncthreads();", "nvshmemx_barrier_all_block();", "__syncthreads();"]
    meet = f"ts_grid_barrier(ts_bar_count, ts_bar_gen, {ctx.num_blocks}u);"
    return [
        *lines,
        meet,
        "if (blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0) {",
        f"{_INDENT}nvshmemx_barrier_all_block();",
        "}",
        meet,
    ]


EMIT_RULES: dict[type, Callable[[Stmt, _Ctx], list[str]]] = {
    Copy: _emit_copy,
    Put: _emit_put,
    SignalWait: _emit_signal_wait,
    Quiet: _emit_quiet,
    Fence: _emit_fence,
    BarrierAll: _emit_barrier_all,
}


def _stmt_needs_where(s: Stmt) -> bool:
    if isinstance(s, Put):
        return True
    exprs: list[Expr] = []
    for value in vars(s).values():
        if isinstance(value, Region):
            exprs += value.starts
        elif isinstance(value, Expr):
            exprs.append(value)
    return any(uses_where(e) for e in exprs)


# ---- assembly -----------------------------------------------------------------------------------


class _Restore:
    """Placeholder for a `#line` that returns to the generated file (numbered at the end)."""


_RESTORE = _Restore()


def _line_directive(loc: SourceLoc) -> str | None:
    return f"#line {loc.lineno} {_c_string(loc.filename)}" if loc.lineno > 0 else None


def _prologue(ctx: _Ctx) -> list[str]:
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
            f"{_comment(str(buf))}"
        )
    for buf, off in ctx.layout.shared_offsets.items():
        lines.append(f"unsigned char* const {ctx.pointers[buf]} = ts_smem + {off};  {_comment(str(buf))}")
    for buf, off in ctx.layout.signal_offsets.items():
        lines.append(f"unsigned char* const {ctx.pointers[buf]} = args.scratch + {off};  {_comment(str(buf))}")
    if ctx.layout.barrier_offset is not None:
        off = ctx.layout.barrier_offset
        lines.append(f"unsigned int* const ts_bar_count = reinterpret_cast<unsigned int*>(args.scratch + {off});")
        lines.append(f"unsigned int* const ts_bar_gen = reinterpret_cast<unsigned int*>(args.scratch + {off + 4});")
    used += list(ctx.pointers.values())
    lines.append(" ".join(f"(void){name};" for name in used) + "  // not every kernel uses all of them")
    return lines


def _pointer_names(kernel: KernelIR) -> dict[Buffer, str]:
    names: dict[Buffer, str] = {}
    taken: set[str] = set()
    for buf in kernel.params + kernel.allocs:
        # `p_` keeps buffer names apart from the generator's own `ts_` names and C keywords.
        name = base = f"p_{_c_identifier(buf.name)}"
        i = 1
        while name in taken:
            name, i = f"{base}_{i}", i + 1
        taken.add(name)
        names[buf] = name
    return names


def _check_supported(kernel: KernelIR) -> None:
    if len(kernel.params) > TS_MAX_BUFFERS:
        raise KernelTraceError(
            f"kernel {kernel.name} has {len(kernel.params)} inputs and outputs; the calling convention "
            f"passes at most {TS_MAX_BUFFERS}",
            kernel.loc,
        )
    for buf in kernel.params + kernel.allocs:
        if buf.dtype.itemsize not in _MOVE_TYPES or buf.dtype.hasobject:
            raise KernelTraceError(f"kernel {kernel.name}: {buf} has a dtype the GPU backend cannot move", kernel.loc)


def _entry_name(kernel: KernelIR) -> str:
    return f"ts_{_c_identifier(kernel.name)}"


def generate_cuda(kernel: KernelIR) -> CudaModule:
    """CUDA C++ for `kernel` (verified here) plus its launch facts."""
    verify_kernel(kernel)
    _check_supported(kernel)
    layout = plan_layout(kernel)
    ctx = _Ctx(kernel, layout, _pointer_names(kernel))
    entry = _entry_name(kernel)
    uses_nvshmem = kernel.uses_nvshmem()

    out: list[str | _Restore] = [
        f"// Generated by jax_tilescale.codegen.cuda from kernel `{kernel.name}` ({kernel.loc}). Do not edit.",
        *(_comment(line) for line in format_kernel(kernel).splitlines()),
        "",
        f"#define TS_USES_NVSHMEM {int(uses_nvshmem)}",
        *device_header().splitlines(),
        "",
        f'static_assert(TS_ABI_VERSION == {TS_ABI_VERSION}, "codegen and device header disagree on the ABI");',
        "",
        f'extern "C" __global__ void __launch_bounds__({kernel.threads}) {entry}(const TsLaunchArgs args) {{',
        *(_INDENT + line for line in _prologue(ctx)),
    ]
    for n, stmt in enumerate(kernel.body):
        rule = EMIT_RULES.get(type(stmt))
        if rule is None:
            raise KernelTraceError(f"internal: no CUDA rule for {type(stmt).__name__}", stmt.loc)
        body = rule(stmt, ctx)
        if _stmt_needs_where(stmt):
            body = [f"const char* const {WHERE_NAME} = {_c_string(str(stmt.loc))};", *body]
        out += ["", _INDENT + _comment(f"[{n}] {format_stmt(stmt)}    at {stmt.loc}")]
        directive = _line_directive(stmt.loc)
        if directive is not None:
            out.append(directive)
        out += [_INDENT + "{", *(_INDENT * 2 + line for line in body), _INDENT + "}"]
        if directive is not None:
            out.append(_RESTORE)
    out += ["}", ""]

    # Statement code is attributed to the user's line (nvcc messages, -lineinfo in profilers);
    # everything else to the generated file, which the compiler saves as `<entry>.cu`.
    text = [f"#line {i + 2} {_c_string(entry + '.cu')}" if line is _RESTORE else line for i, line in enumerate(out)]
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
