"""Verifier rules of the compute statements: copies (ragged windows included), gemm, fill and
loops (registered in verify_base.VERIFY)."""

from __future__ import annotations

from ..errors import KernelTraceError
from .buffers import BufferKind
from .kernel_ir import KernelIR
from .nodes import BLOCK_LOCAL, CLIP_KINDS, Copy, Fill, Gemm, Loop, Region, SourceLoc
from .ranges import Ranges
from .verify_base import VERIFY, check_kind, check_region, check_same_shape, verify_body


def _check_clip(s: Copy) -> None:
    """A clipped copy moves between global memory and an on-chip tile; `clip_dims` are distinct,
    increasing dimensions of the global side with more than one element."""
    kinds = (s.src.buffer.kind, s.dst.buffer.kind)
    if not any(a in CLIP_KINDS and b in BLOCK_LOCAL for a, b in (kinds, kinds[::-1])):
        raise KernelTraceError(
            f"copy: only a copy between global memory and a shared or fragment tile may clip its window; {s.src} -> "
            f"{s.dst} is {kinds[0].value} -> {kinds[1].value}",
            s.loc,
        )
    side = s.global_side
    if list(s.clip_dims) != sorted(set(s.clip_dims)) or any(
        not 0 <= d < len(side.sizes) or side.sizes[d] == 1 for d in s.clip_dims
    ):
        raise KernelTraceError(f"internal: copy clip_dims {s.clip_dims} do not name dimensions of {side}", s.loc)


def _check_transposed(s: Copy) -> None:
    """A transposed copy: a 2-D on-chip tile into a 2-D window, dst's sizes src's reversed; only dst may clip."""
    if s.src.buffer.kind not in BLOCK_LOCAL or s.dst.buffer.kind is BufferKind.FRAGMENT:
        raise KernelTraceError(f"copy(transpose=True): src must be a shared or fragment tile and dst a global, "
                               f"symmetric or shared window; {s.src} -> {s.dst}", s.loc)
    if len(s.src.sizes) != 2 or len(s.dst.sizes) != 2:
        raise KernelTraceError(f"copy(transpose=True) is between 2-D windows; {s.src} is {list(s.src.sizes)}, "
                               f"{s.dst} is {list(s.dst.sizes)}", s.loc)
    if s.dst.sizes != s.src.sizes[::-1]:
        raise KernelTraceError(f"copy(transpose=True): dst's shape must be src's reversed; {s.src} is "
                               f"{list(s.src.sizes)}, {s.dst} is {list(s.dst.sizes)}", s.loc)
    if s.clip_dims and s.global_side is not s.dst:
        raise KernelTraceError(f"internal: a transposed copy clips only its destination; {s}", s.loc)


def _transposed(r: Region) -> Region:
    """A stand-in region of r's buffer with its sizes reversed, for the shape check."""
    return Region(r.buffer, r.starts[::-1], r.sizes[::-1])


@VERIFY.register(Copy)
def _verify_copy(s: Copy, kernel: KernelIR, ranges: Ranges) -> None:
    if s.clip_dims:
        _check_clip(s)
    clipped = s.global_side if s.clip_dims else None
    check_region(s.src, ranges, "copy src", s.loc, s.clip_dims if clipped is s.src else ())
    check_region(s.dst, ranges, "copy dst", s.loc, s.clip_dims if clipped is s.dst else ())
    for r, what in ((s.src, "src"), (s.dst, "dst")):
        if r.buffer.kind is BufferKind.SIGNAL:
            raise KernelTraceError(f"copy {what}: signal words are read with T.signal_wait_until, not copied", s.loc)
    if s.dst.buffer.kind is BufferKind.INPUT:
        raise KernelTraceError(f"copy: {s.dst.buffer.name} is a kernel input, which is read-only", s.loc)
    cast = BufferKind.FRAGMENT in (s.src.buffer.kind, s.dst.buffer.kind)
    if s.transpose:
        _check_transposed(s)
    check_same_shape(_transposed(s.src) if s.transpose else s.src, s.dst, "copy", s.loc, cast=cast)
    if cast and not all(r.buffer.dtype.kind in "fiu" or r.buffer.dtype.name == "bfloat16" for r in (s.src, s.dst)):
        raise KernelTraceError(f"copy: casts are between numeric types; {s.src} -> {s.dst}", s.loc)


GEMM_IN_DTYPES = ("float16", "bfloat16", "float32", "float8_e4m3fn", "float8_e5m2")  # float8: sm_90's wgmma,
# the interpreter (exact in float32); per-tensor scales are an element-wise update of C after the loop


def _matrix(r: Region, op: str, role: str, loc: SourceLoc) -> tuple[int, int]:
    if len(r.sizes) < 2 or any(d != 1 for d in r.sizes[:-2]):
        raise KernelTraceError(f"{op}: {role} must be a 2-D tile (leading dimensions 1); {r} is {list(r.sizes)}", loc)
    return r.sizes[-2], r.sizes[-1]


@VERIFY.register(Gemm)
def _verify_gemm(s: Gemm, kernel: KernelIR, ranges: Ranges) -> None:
    op = s.op_name
    for r, role in ((s.a, "A"), (s.b, "B"), (s.c, "C")):
        check_region(r, ranges, f"{op} {role}", s.loc)
        check_kind(r, BLOCK_LOCAL, op, role, "gemm works on on-chip tiles (T.alloc_shared, T.alloc_fragment)", s.loc)
    for r, role in ((s.a, "A"), (s.b, "B")):
        if r.buffer.dtype.name not in GEMM_IN_DTYPES:
            raise KernelTraceError(f"{op}: {role} ({r.buffer.name}) must be float16, bfloat16, float32, "
                                   "float8_e4m3fn or float8_e5m2, not "
                                   f"{r.buffer.dtype.name}", s.loc)
    if s.a.buffer.dtype != s.b.buffer.dtype:
        raise KernelTraceError(f"{op}: A and B must have one dtype; {s.a.buffer.name} is {s.a.buffer.dtype.name}, "
                               f"{s.b.buffer.name} is {s.b.buffer.dtype.name}", s.loc)
    if s.c.buffer.dtype.name != "float32":
        raise KernelTraceError(f"{op}: the accumulator C ({s.c.buffer.name}) must be float32, not "
                               f"{s.c.buffer.dtype.name}", s.loc)
    m, ka = _matrix(s.a, op, "A", s.loc)[:: -1 if s.transpose_a else 1]
    kb, n = _matrix(s.b, op, "B", s.loc)[:: -1 if s.transpose_b else 1]
    cm, cn = _matrix(s.c, op, "C", s.loc)
    if ka != kb or (cm, cn) != (m, n):
        raise KernelTraceError(
            f"{op}: shapes do not chain: A{'^T' if s.transpose_a else ''} is {m}x{ka}, "
            f"B{'^T' if s.transpose_b else ''} is {kb}x{n}, C is {cm}x{cn} (need MxK @ KxN -> MxN)",
            s.loc,
        )


@VERIFY.register(Fill)
def _verify_fill(s: Fill, kernel: KernelIR, ranges: Ranges) -> None:
    check_region(s.dst, ranges, s.op_name, s.loc)
    check_kind(s.dst, BLOCK_LOCAL, s.op_name, "buffer", "fill/clear set on-chip tiles", s.loc)


@VERIFY.register(Loop)
def _verify_loop(s: Loop, kernel: KernelIR, ranges: Ranges) -> None:
    if s.extent < 1:
        raise KernelTraceError(f"{s.op_name}: the trip count must be positive, got {s.extent}", s.loc)
    verify_body(s.body, kernel, {**ranges, s.var: (0, s.extent - 1)})
