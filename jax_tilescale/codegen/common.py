"""What every statement rule of the code generator shares: C spelling helpers, addresses of
regions, who issues a statement, and the element loop of a region pair (copies and peer copies).
The context the rules receive is `context.Ctx`."""

from __future__ import annotations

import math

from ..ir.expr import Const, Expr
from ..ir.nodes import Buffer, BufferKind, Region, Scope
from .context import Ctx
from .expr_printer import c_expr, c_identifier
from .regions import Dim, clipped_side, element_offset, walk_pair

INDENT = "  "
WARP = 32
# Same-size types that move bytes (copies never convert, so the element type does not matter).
MOVE_TYPES = {1: "uint8_t", 2: "uint16_t", 4: "uint32_t", 8: "uint2", 16: "uint4"}

__all__ = ["INDENT", "MOVE_TYPES", "WARP", "c_identifier"]


def c_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def comment(text: str) -> str:
    # A trailing backslash would continue a `//` comment onto the next line.
    return "// " + text.replace("\\", "/")


def indent(lines: list[str], levels: int = 1) -> list[str]:
    """`lines` indented; `#line` directives and body.RESTORE markers (which must start a line)
    are kept as they are."""
    return [line if not isinstance(line, str) or line.startswith("#line") else INDENT * levels + line
            for line in lines]


def byte_address(ctx: Ctx, buffer: Buffer, elem_offset: Expr, base: str | None = None) -> str:
    """`base + offset * itemsize`; `base` defaults to the buffer's own pointer (a peer's mapping
    of it may be given instead)."""
    itemsize = buffer.dtype.itemsize
    base = ctx.pointers[buffer] if base is None else base
    if isinstance(elem_offset, Const):
        return base if elem_offset.value == 0 else f"{base} + {elem_offset.value * itemsize}"
    return f"{base} + {c_expr(elem_offset)} * {itemsize}"


def region_address(ctx: Ctx, region: Region, base: str | None = None) -> str:
    return byte_address(ctx, region.buffer, element_offset(region), base)


def word_pointer(ctx: Ctx, word: Region, ctype: str = "uint64_t", base: str | None = None) -> str:
    base_ptr = f"reinterpret_cast<{ctype}*>({ctx.pointers[word.buffer] if base is None else base})"
    offset = element_offset(word)
    return base_ptr if offset == Const(0) else f"{base_ptr} + {c_expr(offset)}"


def index_type(limit: int) -> str:
    return "uint32_t" if limit < 2**31 else "uint64_t"


def decompose(counter: str, dims: tuple[Dim, ...], idx: str) -> list[str]:
    """Lines binding ts_c0..ts_c{n-1} to the row-major coordinates of `counter` over `dims`."""
    if len(dims) == 1:
        return [f"const {idx} ts_c0 = {counter};"]
    lines = [f"{idx} ts_rest = {counter};"]
    for k in range(len(dims) - 1, 0, -1):
        lines.append(f"const {idx} ts_c{k} = ts_rest % {dims[k].size}u;")
        lines.append(f"ts_rest /= {dims[k].size}u;")
    lines.append(f"const {idx} ts_c0 = ts_rest;")
    return lines


def linear(dims: tuple[Dim, ...], which: str, wide: bool) -> str:
    """sum(ts_ck * stride_k) for the `src` or `dst` strides; 64-bit when the buffer needs it."""
    terms = []
    for k, d in enumerate(dims):
        stride = d.src_stride if which == "src" else d.dst_stride
        coord = f"(int64_t)ts_c{k}" if wide else f"ts_c{k}"
        terms.append(coord if stride == 1 else f"{coord} * {stride}")
    return " + ".join(terms)


def clip_guard(src: Region, dst: Region, dims: tuple[Dim, ...], per: int = 1) -> tuple[list[str], str]:
    """(setup, condition) of a clipped copy's bound checks (ir/nodes.py Copy.clip_dims): per
    guarded loop dimension k, `ts_limk` elements of the global buffer lie from the window's start
    to the buffer's end, and coordinate ts_ck (in vectors of `per` elements when it is the inner
    dimension) is inside when below it."""
    side = clipped_side(src, dst)
    setup, terms = [], []
    for k, d in enumerate(dims):
        if d.guard is None:
            continue
        extent, start = side.buffer.shape[d.guard], side.starts[d.guard]
        setup.append(f"const int64_t ts_lim{k} = {extent} - {c_expr(start)};")
        scale = f" * {per}" if per > 1 and k == len(dims) - 1 else ""
        terms.append(f"(int64_t)ts_c{k}{scale} < ts_lim{k}")
    what = "zero-filled" if side is src else "skipped"
    note = comment(f"clipped at the end of {side.buffer.name} {list(side.buffer.shape)}: elements outside are {what}")
    return [note, *setup], " && ".join(terms)


def copy_loop_parts(
    ctx: Ctx, src: Region, dst: Region, *, src_base: str | None = None, dst_base: str | None = None,
    lanes: int | None = None, clip_dims: tuple[int, ...] = (),
) -> tuple[list[str], list[str]]:
    """`dst = src` element by element, the widest provably aligned access, `lanes` threads
    (default: the whole block; 32: warp 0, whose caller guards the loop). Returns (setup, loop):
    the pointers, which every thread computes (their index checks may stop the kernel, which
    must not happen in a branch of some threads), and the loop. No barrier after. `clip_dims`:
    a clipped copy's global dimensions (each element or vector is then checked, `clip_guard`)."""
    lanes = ctx.kernel.threads if lanes is None else lanes
    walk = walk_pair(src, dst, clip_dims=clip_dims)
    dims = walk.in_vectors()
    vtype = MOVE_TYPES[walk.vector_bytes]
    count = math.prod(d.size for d in dims)
    idx = index_type(count + lanes)
    wide = max(src.buffer.nbytes, dst.buffer.nbytes) // walk.vector_bytes >= 2**31
    # Two pointers into one memory may overlap: no `__restrict__` (an aliased input and output are one
    # memory, `KernelIR.memory_of`).
    same = ctx.kernel.memory_of(src.buffer) is ctx.kernel.memory_of(dst.buffer)
    restrict = "" if same and src_base is None and dst_base is None else " __restrict__"
    src_addr = byte_address(ctx, src.buffer, walk.src_offset, src_base)
    dst_addr = byte_address(ctx, dst.buffer, walk.dst_offset, dst_base)
    setup = [
        comment(f"{walk.count} x {walk.itemsize}-byte elements as {count} x {walk.vector_bytes}-byte accesses"),
        f"const {vtype}*{restrict} ts_src = reinterpret_cast<const {vtype}*>({src_addr});",
        f"{vtype}*{restrict} ts_dst = reinterpret_cast<{vtype}*>({dst_addr});",
    ]
    to, value = f"ts_dst[{linear(dims, 'dst', wide)}]", f"ts_src[{linear(dims, 'src', wide)}]"
    move = f"{to} = {value};"
    if clip_dims:
        guard_setup, inside = clip_guard(src, dst, dims, walk.vector_bytes // walk.itemsize)
        setup += guard_setup
        if clipped_side(src, dst) is src:  # a load: the tile gets zero where the window is outside
            move = f"{to} = ({inside}) ? {value} : {vtype}{{}};"
        else:
            move = f"if ({inside}) {move}"
    if not clip_dims and src.buffer.kind in IN_MEMORY and dst.buffer.kind in IN_MEMORY:
        return setup, batched_loop(count, lanes, idx, dims, vtype, to, value)
    loop = [
        f"for ({idx} ts_i = threadIdx.x; ts_i < {count}u; ts_i += {lanes}u) {{",
        *indent(decompose("ts_i", dims, idx)),
        f"{INDENT}{move}",
        "}",
    ]
    return setup, loop


# Buffers in global memory (this PE's or, through a mapping, a peer's): what a copy between two of them
# may hold in registers in batches (`batched_loop`); copies to or from on-chip tiles keep the plain loop, whose
# registers may be needed by accumulators live around it.
IN_MEMORY = frozenset({BufferKind.INPUT, BufferKind.OUTPUT, BufferKind.SIGNAL, BufferKind.SYMMETRIC,
                       BufferKind.GLOBAL})
# Loads per thread in flight before the stores (16 bytes each: 32 registers); the generated source passes it
# to the device header too (TS_COPY_BATCH, the staging copies' ts_copy_pieces).
COPY_BATCH = 8


def batched_loop(count: int, lanes: int, idx: str, dims: tuple[Dim, ...], vtype: str, to: str, value: str,
                 ) -> list[str]:
    """The copy loop with every thread's loads of up to COPY_BATCH elements issued before their stores.
    Written as one loop of `to = value`, nvcc keeps each load after the store before it (the accesses might
    alias, `__restrict__` on a local pointer notwithstanding: SASS checked), so a thread waits once per
    element it moves: 8 waits per thread for a 16 KiB block put (benchmarks/NOTES.md, 2026-12-02)."""
    trips = -(-count // lanes)  # elements per thread, the last round partial unless lanes divides count
    batch = min(COPY_BATCH, trips)
    live = f"ts_j + ts_u < {trips}u" if trips % batch else ""
    if count % lanes:
        live = " && ".join(filter(None, (live, f"ts_i < {count}u")))

    def phase(move: str) -> list[str]:
        body = [*decompose("ts_i", dims, idx), move]
        return [
            "#pragma unroll",
            f"for (uint32_t ts_u = 0; ts_u < {batch}u; ++ts_u) {{",
            f"{INDENT}const {idx} ts_i = threadIdx.x + (ts_j + ts_u) * {lanes}u;",
            *(indent([f"if ({live}) {{", *indent(body), "}"]) if live else indent(body)),
            "}",
        ]

    return [
        f"for ({idx} ts_j = 0; ts_j < {trips}u; ts_j += {batch}u) {{",
        f"{INDENT}{vtype} ts_r[{batch}];",
        *indent(phase(f"ts_r[ts_u] = {value};")),
        *indent(phase(f"{to} = ts_r[ts_u];")),
        "}",
    ]


def thread0(ctx: Ctx, lines: list[str]) -> list[str]:
    """`lines` issued by thread 0 of the block; in a thread-dependent branch (`ctx.thread_branch`)
    by each thread that took it."""
    guard = "{  // this thread" if ctx.thread_branch else "if (threadIdx.x == 0) {"
    return [guard, *indent(lines), "}"]


def scoped(ctx: Ctx, scope: Scope, lines: list[str]) -> list[str]:
    """`lines` run by the threads of `scope`: all (BLOCK), warp 0 (WARP) or thread 0 (THREAD,
    `thread0`). Everything the guarded lines need is computed before, by all threads (checks that
    fail call ts_fail, which is block-uniform)."""
    if scope is Scope.BLOCK:
        return lines
    if scope is Scope.THREAD:
        return thread0(ctx, lines)
    return ["if (threadIdx.x < 32) {", *indent(lines), "}"]
