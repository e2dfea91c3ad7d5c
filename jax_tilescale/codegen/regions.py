"""How a pair of equally-shaped regions is walked: merged loop dimensions and vector width.

A copy or put moves `src` to `dst`, two regions whose shapes agree once size-1 dimensions are
dropped (the verifier checks that). Both are addressed as base pointer + row-major element
offset. Here we reduce the pair to the fewest loop dimensions (adjacent dimensions merge when
they are contiguous in both regions), find the contiguous inner run, and decide how wide the
memory accesses can be: 16 bytes where every address is provably a multiple of 16.

A clipped copy (ir/nodes.py `Copy.clip_dims`) checks the coordinates of its global side's
clipped dimensions against the buffer's extent: each such dimension stays a loop dimension of
its own (`Dim.guard`), and a vector may span it only when every vector is wholly inside or wholly
outside (the extent and the window's start are multiples of the vector), so that one check per
vector is exact.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..ir.expr import Const, Expr, affine_form
from ..ir.nodes import BLOCK_LOCAL, Buffer, BufferKind, Region

# Alignment (bytes) of each kind of buffer's base address. XLA buffers are at least 16-byte
# aligned (staging copies are 256-byte aligned per the calling convention); shared
# allocations are placed at 128-byte offsets of a 128-byte-aligned array. A peer's mapping of a
# symmetric buffer (nvshmem_ptr) keeps the offset within the heap, so the same alignment holds.
BASE_ALIGN = {
    BufferKind.INPUT: 16,
    BufferKind.OUTPUT: 16,
    BufferKind.SHARED: 128,
    BufferKind.FRAGMENT: 128,  # fragments not kept in registers are shared tiles (layout.py)
    BufferKind.SIGNAL: 8,
    BufferKind.SYMMETRIC: 128,  # 128-byte offsets of the 256-byte-aligned scratch (layout.py)
    BufferKind.GLOBAL: 128,  # global scratch: placed like symmetric buffers
}
MAX_VECTOR_BYTES = 16


def row_major_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, acc = [], 1
    for extent in reversed(shape):
        strides.append(acc)
        acc *= extent
    return tuple(reversed(strides))


def element_offset(region: Region) -> Expr:
    """The row-major element offset of the region's first element in its buffer."""
    offset: Expr = Const(0)
    for start, stride in zip(region.starts, row_major_strides(region.buffer.shape)):
        offset = offset + start * stride
    return offset


@dataclass(frozen=True)
class Dim:
    """One loop dimension of a region pair: extent and the element stride in each region.
    `guard`: for a clipped copy, the dimension of the global side whose bound this coordinate is
    checked against (such a dimension is never merged with another)."""

    size: int
    src_stride: int
    dst_stride: int
    guard: int | None = None


@dataclass(frozen=True)
class PairWalk:
    """A region pair reduced to loop dimensions (outermost first) and an access width."""

    dims: tuple[Dim, ...]
    src_offset: Expr  # element offset of the first element
    dst_offset: Expr
    itemsize: int
    vector_bytes: int  # width of each access; a multiple of itemsize

    @property
    def count(self) -> int:
        return math.prod(d.size for d in self.dims)

    @property
    def inner_contiguous(self) -> bool:
        inner = self.dims[-1]
        return inner.src_stride == 1 and inner.dst_stride == 1

    def in_vectors(self) -> tuple[Dim, ...]:
        """`dims` with the inner extent and every stride counted in vectors, not elements."""
        per = self.vector_bytes // self.itemsize
        if per == 1:
            return self.dims
        *outer, inner = self.dims
        scaled = [Dim(d.size, d.src_stride // per, d.dst_stride // per, d.guard) for d in outer]
        return (*scaled, Dim(inner.size // per, 1, 1, inner.guard))


def _region_dims(region: Region) -> list[tuple[int, int, int]]:
    """(size, stride, dimension) of each dimension of more than one element."""
    strides = row_major_strides(region.buffer.shape)
    return [(size, stride, d) for d, (size, stride) in enumerate(zip(region.sizes, strides)) if size != 1]


def clipped_side(src: Region, dst: Region) -> Region:
    """The global side of a clipped copy (the one its `clip_dims` name): the one not on-chip."""
    return dst if src.buffer.kind in BLOCK_LOCAL else src


def merged_dims(src: Region, dst: Region, clip_dims: tuple[int, ...] = ()) -> tuple[Dim, ...]:
    """Loop dimensions of the pair, adjacent ones merged where both regions allow it and neither
    is a clipped dimension (`clip_dims` of the global side: those get `Dim.guard`)."""
    s_dims, d_dims = _region_dims(src), _region_dims(dst)
    if [s for s, _, _ in s_dims] != [s for s, _, _ in d_dims]:
        raise ValueError(f"internal: regions {src} and {dst} differ in shape")
    if not s_dims:
        return (Dim(1, 1, 1),)
    side = s_dims if clip_dims and clipped_side(src, dst) is src else d_dims
    guards = [d if clip_dims and d in clip_dims else None for _, _, d in side]
    merged: list[Dim] = []
    for (size, s_stride, _), (_, d_stride, _), guard in reversed(list(zip(s_dims, d_dims, guards))):
        if merged and guard is None and merged[-1].guard is None:
            inner = merged[-1]
            if s_stride == inner.size * inner.src_stride and d_stride == inner.size * inner.dst_stride:
                merged[-1] = Dim(size * inner.size, inner.src_stride, inner.dst_stride)
                continue
        merged.append(Dim(size, s_stride, d_stride, guard))
    return tuple(reversed(merged))


def _offset_aligned(offset: Expr, elems: int) -> bool:
    """Whether `offset` is provably a multiple of `elems` for every value of its variables."""
    form = affine_form(offset)
    if form is None:
        return False
    terms, const = form
    return const % elems == 0 and all(c % elems == 0 for c in terms.values())


def _vector_ok(dims: tuple[Dim, ...], offsets: tuple[Expr, Expr], buffers: tuple[Buffer, Buffer], width: int,
               clipped: Region | None = None) -> bool:
    itemsize = buffers[0].dtype.itemsize
    if width % itemsize or any(BASE_ALIGN[b.kind] < width for b in buffers):
        return False
    per = width // itemsize
    *outer, inner = dims
    if inner.src_stride != 1 or inner.dst_stride != 1 or inner.size % per:
        return False
    if any(d.src_stride % per or d.dst_stride % per for d in outer):
        return False
    if inner.guard is not None and clipped is not None:  # one bound check per vector must be exact
        extent, start = clipped.buffer.shape[inner.guard], clipped.starts[inner.guard]
        if extent % per or not _offset_aligned(start, per):
            return False
    return all(_offset_aligned(off, per) for off in offsets)


def walk_pair(src: Region, dst: Region, max_vector_bytes: int = MAX_VECTOR_BYTES,
              clip_dims: tuple[int, ...] = ()) -> PairWalk:
    """Plans the element loop of `dst[...] = src[...]` with the widest provably aligned access
    (and, for a clipped copy, one whose bound checks stay exact)."""
    itemsize = src.buffer.dtype.itemsize
    dims = merged_dims(src, dst, clip_dims)
    offsets = (element_offset(src), element_offset(dst))
    clipped = clipped_side(src, dst) if clip_dims else None
    width = itemsize
    candidate = max_vector_bytes
    while candidate > itemsize:
        if _vector_ok(dims, offsets, (src.buffer, dst.buffer), candidate, clipped):
            width = candidate
            break
        candidate //= 2
    return PairWalk(dims, offsets[0], offsets[1], itemsize, width)
