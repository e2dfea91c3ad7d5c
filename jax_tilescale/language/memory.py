"""Allocations (shared tiles, signal words, symmetric scratch) and the block-local copy."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import KernelTraceError
from ..ir.nodes import SIGNAL_DTYPE, Buffer, BufferKind, Copy
from ..ir.trace import Ref, current_trace, user_source_loc
from ._common import RefLike, region


def _shape(shape: Any, op: str) -> tuple[int, ...]:
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    if not shape or any(isinstance(d, bool) or not isinstance(d, int) or d <= 0 for d in shape):
        raise KernelTraceError(f"T.{op}: shape must be positive ints, got {shape!r}", user_source_loc())
    return shape


def _alloc(op: str, base: str, shape: tuple[int, ...], dtype: Any, kind: BufferKind) -> Ref:
    state = current_trace(op)
    buf = Buffer(state.fresh_name(base), shape, np.dtype(dtype), kind)
    state.allocs.append(buf)
    return Ref(buf)


def alloc_shared(shape: Any, dtype: Any) -> Ref:
    """A tile in the block's shared memory (one per block)."""
    return _alloc("alloc_shared", "smem", _shape(shape, "alloc_shared"), dtype, BufferKind.SHARED)


def alloc_signal(n: int = 1) -> Ref:
    """`n` 64-bit signal words in symmetric memory, zero at the start of every launch."""
    return _alloc("alloc_signal", "signal", _shape(n, "alloc_signal"), SIGNAL_DTYPE, BufferKind.SIGNAL)


def alloc_symmetric(shape: Any, dtype: Any) -> Ref:
    """Kernel scratch on the symmetric heap: one buffer per PE at the same symmetric address, so
    peers can put into it, get from it, load/store it (`put_block`) and wait on its words. Zero at
    the start of every launch (like signal words, it lives in the launch's symmetric scratch)."""
    return _alloc("alloc_symmetric", "sym", _shape(shape, "alloc_symmetric"), dtype, BufferKind.SYMMETRIC)


def copy(src: RefLike, dst: RefLike) -> None:
    """Copies `src` to `dst` (global, symmetric or shared; same shape), all threads of the block."""
    state = current_trace("copy")
    loc = user_source_loc()
    state.emit(Copy(region(src, "copy", "src", loc), region(dst, "copy", "dst", loc), loc=loc))
