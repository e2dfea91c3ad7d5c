"""CUDA rules of the generic tile compute statements: loops, fill, copies that cast, and the
portable gemm (one thread per output element, fp32 accumulation).

These run on every GPU and for every shape the verifier accepts; they are the reference
lowering. A tensor-core GEMM plan (`gemm_sm90`, `gemm_sm80`) replaces whole GEMM loops where the
shapes allow, and then owns their register fragments: `body.emit_stmt` asks it before these rules.
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import KernelTraceError
from ..ir.nodes import Buffer, Copy, Fill, Gemm, Loop, Region, SourceLoc
from .body import EMIT, emit_body
from .common import INDENT, clip_guard, copy_loop_parts, decompose, indent, index_type
from .context import Ctx
from .expr_printer import c_expr, var_name
from .regions import clipped_side, element_offset, merged_dims, row_major_strides
from .tile_ops import float_literal, storage_type


def typed_base(ctx: Ctx, buf: Buffer, loc: SourceLoc | None, base: str | None = None) -> str:
    """`buf`'s pointer as its element type; `base` (bytes) instead of its own pointer: a mapping of it."""
    t = storage_type(buf.dtype, loc)
    return f"reinterpret_cast<{t}*>({ctx.pointers[buf] if base is None else base})"


# ---- loops -------------------------------------------------------------------------------------


@EMIT.register(Loop)
def emit_loop(s: Loop, ctx: Ctx) -> list[str]:
    i = var_name(s.var)
    return [f"for (int64_t {i} = 0; {i} < {s.extent}; ++{i}) {{", *indent(emit_body(s.body, ctx)), "}"]


# ---- fill ----------------------------------------------------------------------------------------


def _region_loop(region: Region, body: str, *, lanes: str) -> list[str]:
    """Every element of `region` once, spread over `lanes` threads: `body` sees ts_off (the
    element offset in the buffer)."""
    dims = merged_dims(region, region)
    count = math.prod(d.size for d in dims)
    idx = index_type(count + 1024)
    base = c_expr(element_offset(region))
    terms = " + ".join(f"(int64_t)ts_c{k}{'' if d.dst_stride == 1 else f' * {d.dst_stride}'}"
                       for k, d in enumerate(dims))
    return [
        f"for ({idx} ts_i = threadIdx.x; ts_i < {count}u; ts_i += {lanes}) {{",
        *indent(decompose("ts_i", dims, idx)),
        f"{INDENT}const int64_t ts_off = {base} + {terms};",
        f"{INDENT}{body}",
        "}",
    ]


@EMIT.register(Fill)
def emit_fill(s: Fill, ctx: Ctx) -> list[str]:
    buf = s.dst.buffer
    t = storage_type(buf.dtype, s.loc)
    if buf.dtype.kind in "iu":
        conv = str(int(s.value))
    elif t in ("float", "double"):
        conv = float_literal(s.value, buf.dtype)
    else:  # 16-bit floats: rounded from the float32 literal, like the interpreter's astype
        conv = f"ts_from_float<{t}>({float_literal(s.value, np.dtype(np.float32))})"
    return [
        f"{t}* const ts_dst = {typed_base(ctx, buf, s.loc)};",
        *_region_loop(s.dst, f"ts_dst[ts_off] = {conv};", lanes=f"{ctx.kernel.threads}u"),
        *ctx.block_sync(),
    ]


# ---- copy ----------------------------------------------------------------------------------------


@EMIT.register(Copy)
def emit_copy(s: Copy, ctx: Ctx) -> list[str]:
    if s.transpose:
        return [*transposed_copy_loop(ctx, s), *ctx.block_sync()]
    return copy_lines(ctx, s.src, s.dst, s.loc, s.clip_dims)


def transposed_copy_loop(ctx: Ctx, s: Copy) -> list[str]:
    """dst[i, j] = src[j, i] (Copy.transpose; both 2-D), converting the element type, by the whole block: consecutive
    threads take consecutive elements of dst's rows (its global side's coalesced stores); elements past the end of a
    clipped dst are skipped. The reference form: the GEMM lowerings store a transposed accumulator from registers."""
    src, dst = s.src, s.dst
    st, dt = storage_type(src.buffer.dtype, s.loc), storage_type(dst.buffer.dtype, s.loc)
    rows, cols = dst.sizes
    s_stride, d_stride = src.buffer.shape[1], dst.buffer.shape[1]
    idx = index_type(rows * cols + 1024)
    setup, terms = [], []
    for d, coord in ((0, "ts_r"), (1, "ts_c")):
        if d in s.clip_dims:
            setup.append(f"const int64_t ts_lim{d} = {dst.buffer.shape[d]} - {c_expr(dst.starts[d])};")
            terms.append(f"(int64_t){coord} < ts_lim{d}")
    value = f"ts_src[(int64_t)ts_c * {s_stride} + ts_r]"
    value = value if st == dt else f"ts_convert<{dt}, {st}>({value})"
    move = f"ts_dst[(int64_t)ts_r * {d_stride} + ts_c] = {value};"
    guard = f"if ({' && '.join(terms)}) " if terms else ""
    return [
        *setup,
        f"const {st}* const ts_src = {typed_base(ctx, src.buffer, s.loc)} + {c_expr(element_offset(src))};",
        f"{dt}* const ts_dst = {typed_base(ctx, dst.buffer, s.loc)} + {c_expr(element_offset(dst))};",
        f"for ({idx} ts_i = threadIdx.x; ts_i < {rows * cols}u; ts_i += {ctx.kernel.threads}u) {{",
        f"{INDENT}const {idx} ts_r = ts_i / {cols}u, ts_c = ts_i % {cols}u;",
        f"{INDENT}{guard}{move}",
        "}",
    ]


def copy_lines(ctx: Ctx, src: Region, dst: Region, loc: SourceLoc | None, clip_dims: tuple[int, ...] = (),
               src_base: str | None = None, dst_base: str | None = None) -> list[str]:
    """`dst = src` by the whole block, casting where the dtypes differ, then the block barrier; `src_base` /
    `dst_base`: a mapping of that side's buffer (bytes) instead of its own pointer (a peer's)."""
    if src.buffer.dtype == dst.buffer.dtype:
        setup, loop = copy_loop_parts(ctx, src, dst, src_base=src_base, dst_base=dst_base, clip_dims=clip_dims)
        lines = setup + loop
    else:
        lines = cast_copy_loop(ctx, src, dst, loc, clip_dims, src_base, dst_base)
    # One barrier after every copy: it orders shared-memory writes before later reads, and
    # reads before later overwrites, for whatever statement comes next.
    return [*lines, *ctx.block_sync()]


def cast_copy_loop(ctx: Ctx, src: Region, dst: Region, loc: SourceLoc | None, clip_dims: tuple[int, ...] = (),
                   src_base: str | None = None, dst_base: str | None = None) -> list[str]:
    """`dst = src` element by element, converting the element type (round to nearest even).
    `clip_dims`: a clipped copy's global dimensions (each element is checked, `clip_guard`). `src_base` /
    `dst_base` as in `copy_lines`."""
    st, dt = storage_type(src.buffer.dtype, loc), storage_type(dst.buffer.dtype, loc)
    dims = merged_dims(src, dst, clip_dims)
    count = math.prod(d.size for d in dims)
    idx = index_type(count + 1024)

    def offset(which: str, region: Region) -> str:
        terms = []
        for k, d in enumerate(dims):
            stride = d.src_stride if which == "src" else d.dst_stride
            terms.append(f"(int64_t)ts_c{k}" + ("" if stride == 1 else f" * {stride}"))
        return f"{c_expr(element_offset(region))} + " + " + ".join(terms)

    value = f"ts_convert<{dt}, {st}>(ts_src[{offset('src', src)}])"
    move = f"ts_dst[{offset('dst', dst)}] = {value};"
    setup: list[str] = []
    if clip_dims:
        setup, inside = clip_guard(src, dst, dims)
        if clipped_side(src, dst) is src:  # a load: the tile gets zero where the window is outside
            move = f"ts_dst[{offset('dst', dst)}] = ({inside}) ? {value} : ts_from_float<{dt}>(0.0f);"
        else:
            move = f"if ({inside}) {move}"
    return [
        *setup,
        f"const {st}* const ts_src = {typed_base(ctx, src.buffer, loc, src_base)};",
        f"{dt}* const ts_dst = {typed_base(ctx, dst.buffer, loc, dst_base)};",
        f"for ({idx} ts_i = threadIdx.x; ts_i < {count}u; ts_i += {ctx.kernel.threads}u) {{",
        *indent(decompose("ts_i", dims, idx)),
        f"{INDENT}{move}",
        "}",
    ]


# ---- gemm (portable) -------------------------------------------------------------------------------


def _matrix_strides(region: Region, loc) -> tuple[int, int]:
    """Element strides of the region's last two dimensions (the matrix); the others are size 1."""
    if len(region.sizes) < 2 or any(size != 1 for size in region.sizes[:-2]):
        raise KernelTraceError(f"T.gemm operand {region} must be a matrix (its last two dimensions)", loc)
    strides = row_major_strides(region.buffer.shape)
    return strides[-2], strides[-1]


@EMIT.register(Gemm)
def emit_gemm(s: Gemm, ctx: Ctx) -> list[str]:
    m, n = s.c.sizes[-2:]
    k = s.a.sizes[-2] if s.transpose_a else s.a.sizes[-1]
    (a_r, a_c), (b_r, b_c), (c_r, c_c) = (_matrix_strides(r, s.loc) for r in (s.a, s.b, s.c))
    # element (i, kk) of op(A) and (kk, j) of op(B)
    a_i, a_k = (a_c, a_r) if s.transpose_a else (a_r, a_c)
    b_k, b_j = (b_c, b_r) if s.transpose_b else (b_r, b_c)
    ta, tb, tc = (storage_type(r.buffer.dtype, s.loc) for r in (s.a, s.b, s.c))
    idx = index_type(m * n + 1024)
    init = "0.0f" if s.clear_accum else f"ts_to_float<{tc}>(ts_c[ts_co])"
    return [
        f"const {ta}* const ts_a = {typed_base(ctx, s.a.buffer, s.loc)} + {c_expr(element_offset(s.a))};",
        f"const {tb}* const ts_b = {typed_base(ctx, s.b.buffer, s.loc)} + {c_expr(element_offset(s.b))};",
        f"{tc}* const ts_c = {typed_base(ctx, s.c.buffer, s.loc)} + {c_expr(element_offset(s.c))};",
        f"for ({idx} ts_e = threadIdx.x; ts_e < {m * n}u; ts_e += {ctx.kernel.threads}u) {{",
        f"{INDENT}const {idx} ts_row = ts_e / {n}u, ts_col = ts_e % {n}u;",
        f"{INDENT}const int64_t ts_co = (int64_t)ts_row * {c_r} + (int64_t)ts_col * {c_c};",
        f"{INDENT}float ts_acc = {init};",
        f"{INDENT}for (int ts_k = 0; ts_k < {k}; ++ts_k) {{",
        f"{INDENT * 2}ts_acc += ts_to_float<{ta}>(ts_a[(int64_t)ts_row * {a_i} + (int64_t)ts_k * {a_k}]) *",
        f"{INDENT * 2}          ts_to_float<{tb}>(ts_b[(int64_t)ts_k * {b_k} + (int64_t)ts_col * {b_j}]);",
        f"{INDENT}}}",
        f"{INDENT}ts_c[ts_co] = ts_from_float<{tc}>(ts_acc);",
        "}",
        *ctx.block_sync(),
    ]
