"""What kernels are written in: `from jax_tilescale import language as T`.

Each function records one IR statement (or returns an index expression) in the kernel being
traced. Names and argument orders follow TileScale, so kernels port line by line; sizes are
inferred from ref slices (a TileScale-style explicit byte count may be given and must agree).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import KernelTraceError
from ..ir.expr import Const, Expr, IntLike, as_expr
from ..ir.nodes import (
    SIGNAL_DTYPE,
    BarrierAll,
    Buffer,
    BufferKind,
    Cmp,
    Copy,
    Fence,
    Put,
    Quiet,
    Scope,
    SignalOp,
    SignalUpdate,
    SignalWait,
)
from ..ir.trace import PE_VAR, DynSlice, Ref, RegionRef, as_region, current_trace, program_id_var, user_source_loc

__all__ = [
    "Cmp",
    "Ref",
    "RegionRef",
    "SignalOp",
    "alloc_shared",
    "alloc_signal",
    "barrier_all",
    "copy",
    "ds",
    "fence",
    "get_pe",
    "get_pe_num",
    "program_id",
    "putmem_nbi_block",
    "putmem_signal_nbi_block",
    "quiet",
    "signal_wait_until",
]

# --- indices ------------------------------------------------------------------------------------


def program_id(axis: int = 0) -> Expr:
    """Index of this block along grid axis `axis` (TileLang's `bx, by = T.Kernel(...)`)."""
    state = current_trace("program_id")
    if not isinstance(axis, int) or not 0 <= axis < len(state.grid):
        raise KernelTraceError(
            f"program_id({axis!r}): the grid {state.grid} has axes 0..{len(state.grid) - 1}", user_source_loc()
        )
    return program_id_var(axis)


def get_pe() -> Expr:
    """This device's PE number: its row-major index along the kernel's `mesh_axes`."""
    current_trace("get_pe")
    return PE_VAR


def get_pe_num() -> Expr:
    """Number of PEs in the kernel's PE space (a static value: the mesh is static)."""
    return Const(current_trace("get_pe_num").num_pes)


def ds(start: IntLike, size: int) -> DynSlice:
    """A slice of static `size` starting at `start` (which may be a run-time value)."""
    if isinstance(size, Expr) or not isinstance(size, int) or size <= 0:
        raise KernelTraceError(f"T.ds size must be a positive int, got {size!r}", user_source_loc())
    return DynSlice(as_expr(start), size)


# --- allocation ---------------------------------------------------------------------------------


def _shape(shape: Any, op: str) -> tuple[int, ...]:
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    if not shape or any(isinstance(d, bool) or not isinstance(d, int) or d <= 0 for d in shape):
        raise KernelTraceError(f"T.{op}: shape must be positive ints, got {shape!r}", user_source_loc())
    return shape


def alloc_shared(shape: Any, dtype: Any) -> Ref:
    """A tile in the block's shared memory (one per block)."""
    state = current_trace("alloc_shared")
    buf = Buffer(state.fresh_name("smem"), _shape(shape, "alloc_shared"), np.dtype(dtype), BufferKind.SHARED)
    state.allocs.append(buf)
    return Ref(buf)


def alloc_signal(n: int = 1) -> Ref:
    """`n` 64-bit signal words in symmetric memory, zero at the start of every launch."""
    state = current_trace("alloc_signal")
    buf = Buffer(state.fresh_name("signal"), _shape(n, "alloc_signal"), SIGNAL_DTYPE, BufferKind.SIGNAL)
    state.allocs.append(buf)
    return Ref(buf)


# --- data movement ------------------------------------------------------------------------------


def copy(src: Ref | RegionRef, dst: Ref | RegionRef) -> None:
    """Copies `src` to `dst` (global <-> shared, same shape), all threads of the block."""
    state = current_trace("copy")
    loc = user_source_loc()
    state.emit(Copy(as_region(src, "copy: src", loc), as_region(dst, "copy: dst", loc), loc=loc))


def _check_size(size: Any, src: Any, op: str, loc: Any) -> None:
    if size is None:
        return
    if isinstance(size, Expr) or not isinstance(size, int):
        raise KernelTraceError(f"{op}: size must be a static int number of bytes, got {size!r}", loc)
    if size != src.nbytes:
        raise KernelTraceError(
            f"{op}: size={size} bytes but the source slice {src} holds {src.nbytes} bytes", loc
        )


def _require_pe(pe: Any, op: str, loc: Any) -> Expr:
    if pe is None:
        raise KernelTraceError(f"{op}: the target `pe=` is required", loc)
    try:
        return as_expr(pe)
    except TypeError:
        raise KernelTraceError(f"{op}: pe must be an int or a kernel index expression, got {pe!r}", loc) from None


def putmem_nbi_block(
    dst: Ref | RegionRef, src: Ref | RegionRef, size: int | None = None, pe: IntLike | None = None
) -> None:
    """Non-blocking block-wide put of local `src` into `dst` on PE `pe` (complete at `quiet`)."""
    state = current_trace("putmem_nbi_block")
    loc = user_source_loc()
    s = as_region(src, "putmem_nbi_block: src", loc)
    _check_size(size, s, "putmem_nbi_block", loc)
    d = as_region(dst, "putmem_nbi_block: dst", loc)
    state.emit(Put(d, s, _require_pe(pe, "putmem_nbi_block", loc), Scope.BLOCK, blocking=False, loc=loc))


def putmem_signal_nbi_block(
    dst: Ref | RegionRef,
    src: Ref | RegionRef,
    size: int | None = None,
    sig: Ref | RegionRef | None = None,
    value: IntLike = 1,
    op: SignalOp = SignalOp.SET,
    pe: IntLike | None = None,
) -> None:
    """Non-blocking put, then `sig op= value` on PE `pe` once all the data has arrived there."""
    name = "putmem_signal_nbi_block"
    state = current_trace(name)
    loc = user_source_loc()
    s = as_region(src, f"{name}: src", loc)
    _check_size(size, s, name, loc)
    if sig is None:
        raise KernelTraceError(f"{name}: the signal word `sig=` is required (see T.alloc_signal)", loc)
    if not isinstance(op, SignalOp):
        raise KernelTraceError(f"{name}: op must be T.SignalOp.SET or T.SignalOp.ADD, got {op!r}", loc)
    update = SignalUpdate(as_region(sig, f"{name}: sig", loc), as_expr(value), op)
    d = as_region(dst, f"{name}: dst", loc)
    state.emit(Put(d, s, _require_pe(pe, name, loc), Scope.BLOCK, blocking=False, signal=update, loc=loc))


def signal_wait_until(sig: Ref | RegionRef, cmp: Cmp, value: IntLike) -> None:
    """Waits until this PE's signal word satisfies `word cmp value` (the word is unchanged)."""
    state = current_trace("signal_wait_until")
    loc = user_source_loc()
    if not isinstance(cmp, Cmp):
        raise KernelTraceError(f"signal_wait_until: cmp must be a T.Cmp (EQ, NE, GT, GE, LT, LE), got {cmp!r}", loc)
    state.emit(SignalWait(as_region(sig, "signal_wait_until: sig", loc), cmp, as_expr(value), loc=loc))


def quiet() -> None:
    """Waits until every put this PE issued is delivered."""
    current_trace("quiet").emit(Quiet(loc=user_source_loc()))


def fence() -> None:
    """Puts to any one PE issued before are delivered before those issued after."""
    current_trace("fence").emit(Fence(loc=user_source_loc()))


def barrier_all() -> None:
    """All blocks of all PEs meet here; every earlier put is complete after it."""
    current_trace("barrier_all").emit(BarrierAll(loc=user_source_loc()))
