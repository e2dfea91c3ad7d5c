"""What the two tensor-core GEMM plans (`gemm_sm90`, `gemm_sm80`) share: the shape of the loop
they take over and small facts about fragments and regions.

The loop is TileLang's GEMM step: its body is exactly two copies of tiles into buffers and one
`T.gemm` of those two tiles into a whole float32 2-D fragment. Each plan then checks what its
instructions need on top (tile shapes, alignment, where the tiles come from).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import fields, is_dataclass

import numpy as np

from ..ir.expr import Const, affine_form
from ..ir.nodes import Buffer, BufferKind, Copy, Gemm, Loop, Region, Stmt
from .compute import typed_base
from .context import Ctx
from .expr_printer import c_expr, c_identifier
from .regions import element_offset, row_major_strides
from .tile_ops import storage_type

# 16-bit and 32-bit element types -> (the C pair type, the function that packs two floats into it)
PAIR_TYPES = {
    "__nv_bfloat16": ("__nv_bfloat162", "__floats2bfloat162_rn"),
    "__half": ("__half2", "__floats2half2_rn"),
    "float": ("float2", "make_float2"),
}


def acc_name(buf: Buffer) -> str:
    """The C name of a fragment the plans keep in registers."""
    return f"ts_acc_{c_identifier(buf.name)}"


def whole(region: Region) -> bool:
    """Whether `region` is its whole buffer."""
    return region.sizes == region.buffer.shape and all(s == Const(0) for s in region.starts)


def even(offset) -> bool:
    """Whether an element offset is provably even (pair stores need 2-element alignment)."""
    form = affine_form(offset)
    return form is not None and form[1] % 2 == 0 and all(c % 2 == 0 for c in form[0].values())


def buffers_of(s: Stmt) -> set[Buffer]:
    """Every buffer a statement names (regions, element expressions, anything nested), except
    through the statement lists it holds (those statements are visited on their own)."""
    out: set[Buffer] = set()

    def visit(value: object) -> None:
        if isinstance(value, Buffer):
            out.add(value)
        elif isinstance(value, (tuple, list)):
            if value and all(isinstance(v, Stmt) for v in value):
                return
            for v in value:
                visit(v)
        elif is_dataclass(value) and not isinstance(value, type):
            for f in fields(value):
                visit(getattr(value, f.name))

    for f in fields(s):
        visit(getattr(s, f.name))
    return out


def match_gemm_step(loop: Loop, input_types: Mapping, unit: str) -> tuple[Gemm, dict[Buffer, Copy]] | str:
    """(the gemm, tile -> the copy that fills it) when `loop`'s body is `copy, copy, gemm` of
    those two tiles into a whole 2-D float32 fragment with inputs in `input_types`; else why not
    (`unit` names the instruction in the message)."""
    body = loop.body
    if len(body) != 3 or not isinstance(body[2], Gemm) or not all(isinstance(s, Copy) for s in body[:2]):
        return "the body is not `copy, copy, gemm`"
    g: Gemm = body[2]  # type: ignore[assignment]
    copies = {s.dst.buffer: s for s in body[:2]}  # type: ignore[union-attr]
    if g.a.buffer not in copies or g.b.buffer not in copies or g.a.buffer is g.b.buffer:
        return "the gemm's A and B are not the two tiles the loop copies"
    if not (whole(g.a) and whole(g.b) and whole(g.c)):
        return "the gemm's operands are not whole tiles"
    dt = g.a.buffer.dtype
    if g.b.buffer.dtype != dt or dt not in input_types:
        return f"{unit} here takes fp16/bf16 tiles, not {dt.name}/{g.b.buffer.dtype.name}"
    acc = g.c.buffer
    if acc.kind is not BufferKind.FRAGMENT or acc.dtype != np.dtype(np.float32) or len(acc.shape) != 2:
        return "C is not a 2-D float32 fragment"
    return g, copies


# `pair(e)` of a fragment copy: the lines that move one thread's pair of accumulators at fragment
# (ts_row, ts_col + j), j = 0, 1; `e(j)` spells the C index of the pair's element j (`[m][i + j]`).
PairLines = Callable[[Callable[[int], str]], list[str]]


def fragment_store(s: Copy, ctx: Ctx) -> tuple[list[str], PairLines]:
    """A register fragment copied into its (global or shared) window, for a plan's pair loops: the
    set-up lines (the room left in a clipped window, the window's pointer `ts_dst`) and `pair(e)`.
    Pairs of 16- or 32-bit elements in contiguous rows go in one aligned store; elements past the
    end of a clipped window are skipped."""
    buf, dst = s.src.buffer, s.dst
    t = storage_type(dst.buffer.dtype, s.loc)
    r_stride, c_stride = row_major_strides(dst.buffer.shape)[-2:]
    name = acc_name(buf)
    setup, inside = _pair_guard(s)
    pair = PAIR_TYPES.get(t)
    if pair is not None and c_stride == 1 and r_stride % 2 == 0 and even(element_offset(dst)):
        # Clipped, a pair is inside or outside as a whole: the row length and the pair's first
        # column in the buffer are both even.
        ctype, make = pair

        def store(e: Callable[[int], str]) -> list[str]:
            return [_guarded(f"*reinterpret_cast<{ctype}*>(ts_dst + (int64_t)ts_row * {r_stride} + ts_col) = "
                             f"{make}({name}{e(0)}, {name}{e(1)});", inside(0))]
    else:
        def store(e: Callable[[int], str]) -> list[str]:
            return [_guarded(f"ts_dst[(int64_t)ts_row * {r_stride} + (int64_t)(ts_col + {j}) * {c_stride}] = "
                             f"ts_from_float<{t}>({name}{e(j)});", inside(j)) for j in (0, 1)]
    pointer = f"{t}* const ts_dst = {typed_base(ctx, dst.buffer, s.loc)} + {c_expr(element_offset(dst))};"
    return [*setup, pointer], store


def fragment_load(s: Copy, ctx: Ctx) -> tuple[list[str], PairLines]:
    """A window copied into a register fragment, for a plan's pair loops: the set-up lines (as in
    `fragment_store`, the pointer `ts_src`) and `pair(e)`; elements past the end of a clipped
    window read as zero."""
    buf, src = s.dst.buffer, s.src
    t = storage_type(src.buffer.dtype, s.loc)
    r_stride, c_stride = row_major_strides(src.buffer.shape)[-2:]
    name = acc_name(buf)
    setup, inside = _pair_guard(s)

    def load(e: Callable[[int], str]) -> list[str]:
        lines = []
        for j in (0, 1):
            value = f"ts_to_float<{t}>(ts_src[(int64_t)ts_row * {r_stride} + (int64_t)(ts_col + {j}) * {c_stride}])"
            cond = inside(j)
            lines.append(f"{name}{e(j)} = {f'({cond}) ? {value} : 0.0f' if cond else value};")
        return lines

    pointer = f"const {t}* const ts_src = {typed_base(ctx, src.buffer, s.loc)} + {c_expr(element_offset(src))};"
    return [*setup, pointer], load


def _guarded(line: str, cond: str) -> str:
    return f"if ({cond}) {line}" if cond else line


def _pair_guard(s: Copy) -> tuple[list[str], Callable[[int], str]]:
    """For a copy between a register fragment and a window that may pass the end of its global
    buffer (`Copy.clip_dims`): set-up lines and `inside(j)`, the C condition that fragment element
    (ts_row, ts_col + j) lies inside the buffer ("" for an unclipped copy)."""
    if not s.clip_dims:
        return [], lambda j: ""
    region = s.global_side
    rank = len(region.sizes)
    setup, leading = [], []
    for d in s.clip_dims:
        limit = f"(int64_t)({region.buffer.shape[d]}) - (int64_t)({c_expr(region.starts[d])})"
        setup.append(f"const int64_t ts_room{d} = {limit};  // elements of dimension {d} left in the buffer")
        if d < rank - 2:  # a leading dimension of size 1: the whole window is in or out
            leading.append(f"ts_room{d} > 0")

    def inside(j: int) -> str:
        terms = list(leading)
        if rank - 2 in s.clip_dims:
            terms.append(f"ts_row < ts_room{rank - 2}")
        if rank - 1 in s.clip_dims:
            terms.append(f"ts_col{f' + {j}' if j else ''} < ts_room{rank - 1}")
        return " && ".join(terms)

    return setup, inside
