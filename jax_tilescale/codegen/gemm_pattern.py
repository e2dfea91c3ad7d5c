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
from .expr_printer import c_expr, c_identifier

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


def fragment_clip_guard(s: Copy) -> tuple[list[str], Callable[[str, str], str] | None]:
    """For a copy between a register fragment and a window that may pass the end of its global
    buffer (`Copy.clip_dims`): set-up lines and `inside(row, col)`, the C condition that fragment
    element (row, col) lies inside the buffer; (`[]`, None) for an unclipped copy. Stores skip the
    elements outside, loads read them as zero."""
    if not s.clip_dims:
        return [], None
    region = s.global_side
    rank = len(region.sizes)
    setup, leading = [], []
    for d in s.clip_dims:
        limit = f"(int64_t)({region.buffer.shape[d]}) - (int64_t)({c_expr(region.starts[d])})"
        setup.append(f"const int64_t ts_room{d} = {limit};  // elements of dimension {d} left in the buffer")
        if d < rank - 2:  # a leading dimension of size 1: the whole window is in or out
            leading.append(f"ts_room{d} > 0")

    def inside(row: str, col: str) -> str:
        terms = list(leading)
        if rank - 2 in s.clip_dims:
            terms.append(f"{row} < ts_room{rank - 2}")
        if rank - 1 in s.clip_dims:
            terms.append(f"{col} < ts_room{rank - 1}")
        return " && ".join(terms)

    return setup, inside
