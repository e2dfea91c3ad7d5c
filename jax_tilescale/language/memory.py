"""Allocations (shared tiles, signal words, symmetric scratch) and the block-local copy."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import KernelTraceError
from ..ir.buffers import MemLevel
from ..ir.nodes import BLOCK_LOCAL, CLIP_KINDS, SIGNAL_DTYPE, Buffer, BufferKind, Copy
from ..ir.verify_base import overhanging_dims
from ._common import RefLike, region
from .cluster import ClusterTile, cluster_copy
from .naming import assigned_name
from .refs import Ref, as_region
from .source import user_source_loc
from .state import current_trace
from .views import copy_view, is_view


def _shape(shape: Any, op: str) -> tuple[int, ...]:
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    if not shape or any(isinstance(d, bool) or not isinstance(d, int) or d <= 0 for d in shape):
        raise KernelTraceError(f"T.{op}: shape must be positive ints, got {shape!r}", user_source_loc())
    return shape


def buffer_name(op: str, name: str | None, fallback: str) -> str:
    """The new buffer's name: `name=` if given, else the variable the user's code assigns the
    allocation to (`acc = T.alloc_fragment(...)`: `acc`), else `fallback` (`smem`, `smem_1`, ...)."""
    state = current_trace(op)
    if name is not None and not isinstance(name, str):
        raise KernelTraceError(f"T.{op}: name must be a string, got {name!r}", user_source_loc())
    return state.fresh_name(assigned_name() if name is None else name, fallback)


def _alloc(op: str, fallback: str, shape: tuple[int, ...], dtype: Any, kind: BufferKind,
           name: str | None = None, level: MemLevel | None = None, left_zero: bool = False) -> Ref:
    state = current_trace(op)
    buf = Buffer(buffer_name(op, name, fallback), shape, np.dtype(dtype), kind, level=level, left_zero=left_zero)
    state.allocs.append(buf)
    return Ref(buf)


def alloc_shared(shape: Any, dtype: Any, *, name: str | None = None) -> Ref:
    """A tile in the block's shared memory (one per block). Named in messages by `name`, else by
    the variable it is assigned to."""
    return _alloc("alloc_shared", "smem", _shape(shape, "alloc_shared"), dtype, BufferKind.SHARED, name)


def alloc_signal(n: int = 1, *, name: str | None = None) -> Ref:
    """`n` 64-bit signal words in symmetric memory, zero at the start of every launch."""
    return _alloc("alloc_signal", "signal", _shape(n, "alloc_signal"), SIGNAL_DTYPE, BufferKind.SIGNAL, name)


def alloc_symmetric(shape: Any, dtype: Any, *, name: str | None = None) -> Ref:
    """Kernel scratch on the symmetric heap: one buffer per PE at the same symmetric address, so
    peers can put into it, get from it, load/store it (`put_block`) and wait on its words. Zero at
    the start of every launch (like signal words, it lives in the launch's symmetric scratch)."""
    return _alloc("alloc_symmetric", "sym", _shape(shape, "alloc_symmetric"), dtype, BufferKind.SYMMETRIC, name)


def copy(src: RefLike, dst: RefLike, *, transpose: bool = False) -> None:
    """Copies `src` to `dst` (global, symmetric, shared or fragment; same shape once size-1
    dimensions are dropped), all threads of the block; to or from a fragment it may cast.

    Ragged edges: when one side is global memory (an input, an output, `alloc_symmetric`) and the
    other an on-chip tile (`alloc_shared`, `alloc_fragment`), the global window may extend past
    the end of its buffer in any dimension (`A[T.ds(bx * 128, 128), :]` with M not a multiple of
    128, or `A[a:a + 128, :]`); it must still start inside the buffer. Elements outside are not
    touched: a load (global -> tile) writes zero into the tile for them, a store (tile -> global)
    skips them. The tile's own window must lie inside the tile; every other use of a slice
    (transfers, element access, fills, reductions, atomics, gemm) must lie inside its buffer.

    `transpose=True`: dst[i, j] = src[j, i], src a 2-D on-chip tile (shared or fragment) and dst a 2-D window of
    global, symmetric or shared memory (`T.copy(Ct, C[T.ds(m0, bm), T.ds(n0, bn)], transpose=True)` stores a
    bn x bm accumulator of C^T as C's bm x bn tile); a global window may end past its buffer, as above. The GEMM
    lowerings store a transposed accumulator as a whole tile (through shared memory and TMA on Hopper), where an
    element-wise T.Parallel would go element by element.
    """
    if not isinstance(transpose, bool):
        raise KernelTraceError(f"T.copy: transpose must be True or False, got {transpose!r}", user_source_loc())
    if transpose:
        return _transposed_copy(src, dst)
    if is_view(src) or is_view(dst):  # a distributed view on one side (views.py)
        return copy_view(src, dst)
    if isinstance(src, ClusterTile) or isinstance(dst, ClusterTile):  # a peer block's tile (cluster.py)
        return cluster_copy(src, dst)
    state = current_trace("copy")
    loc = user_source_loc()
    src_r, dst_r = (as_region(r, f"copy: {role}", loc, clip=True) for r, role in ((src, "src"), (dst, "dst")))
    kinds = (src_r.buffer.kind, dst_r.buffer.kind)
    clip = None
    if kinds[0] in CLIP_KINDS and kinds[1] in BLOCK_LOCAL:
        clip, dst_r = src_r, region(dst, "copy", "dst", loc)
    elif kinds[0] in BLOCK_LOCAL and kinds[1] in CLIP_KINDS:
        clip, src_r = dst_r, region(src, "copy", "src", loc)
    else:  # no ragged windows on either side (the slices' own errors)
        src_r, dst_r = region(src, "copy", "src", loc), region(dst, "copy", "dst", loc)
    # The dimensions the copy's bound checks need: those not provably inside over the ranges of
    # the block index, the PE and the enclosing loops (none: the plain copy, code unchanged).
    dims = () if clip is None else overhanging_dims(clip, state.var_ranges())
    state.emit(Copy(src_r, dst_r, dims, loc=loc))


def _transposed_copy(src: RefLike, dst: RefLike) -> None:
    """T.copy(src, dst, transpose=True): the checks that need the language's view of the operands (the rest,
    shapes and dtypes, are the verifier's)."""
    state = current_trace("copy")
    loc = user_source_loc()
    if is_view(src) or is_view(dst) or isinstance(src, ClusterTile) or isinstance(dst, ClusterTile):
        raise KernelTraceError("T.copy(transpose=True): src and dst are this block's tiles or global windows, not "
                               "distributed views or a peer block's tile", loc)
    src_r = region(src, "copy", "src", loc)
    if src_r.buffer.kind not in BLOCK_LOCAL:
        raise KernelTraceError(
            f"T.copy(transpose=True) stores an on-chip tile (T.alloc_shared, T.alloc_fragment); src {src_r} is "
            f"{src_r.buffer.kind.value}: load it into a tile first", loc)
    dst_r = as_region(dst, "copy: dst", loc, clip=True)
    clip = dst_r.buffer.kind in CLIP_KINDS
    if not clip:
        dst_r = region(dst, "copy", "dst", loc)
    dims = overhanging_dims(dst_r, state.var_ranges()) if clip else ()
    state.emit(Copy(src_r, dst_r, dims, transpose=True, loc=loc))
