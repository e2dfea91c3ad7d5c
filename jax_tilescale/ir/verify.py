"""The verifier: every invariant of a traced kernel, checked in one place.

Rules are looked up by statement type in `STMT_RULES`; a new statement registers its rule here.
Errors name the user's source line. Range checks are exact (affine index expressions over the
known ranges of block index and PE); what cannot be decided statically is left to the
interpreter and to the run-time checks of the generated code.
"""

from __future__ import annotations

from collections.abc import Callable

from ..errors import KernelTraceError
from .expr import Expr, Var, VarKind, format_expr, value_range
from .nodes import (
    BarrierAll,
    BufferKind,
    Copy,
    Fence,
    KernelIR,
    Put,
    Quiet,
    Region,
    Scope,
    SignalWait,
    SourceLoc,
    Stmt,
)

MAX_GRID_DIMS = 3
MAX_THREADS = 1024


def var_ranges(kernel: KernelIR) -> dict[Var, tuple[int, int]]:
    ranges = {Var(VarKind.PROGRAM_ID, i): (0, g - 1) for i, g in enumerate(kernel.grid)}
    ranges[Var(VarKind.PE)] = (0, kernel.num_pes - 1)
    return ranges


def _squeezed(shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(d for d in shape if d != 1)


def _check_region(region: Region, ranges: dict[Var, tuple[int, int]], what: str, loc: SourceLoc) -> None:
    buf = region.buffer
    if len(region.starts) != len(buf.shape):
        raise KernelTraceError(
            f"{what}: {buf.name} has {len(buf.shape)} dimensions, the slice {len(region.starts)}", loc
        )
    for dim, (start, size, extent) in enumerate(zip(region.starts, region.sizes, buf.shape)):
        rng = value_range(start, ranges)
        if rng is None:
            continue
        lo, hi = rng
        if lo < 0 or hi + size > extent:
            bad = lo if lo < 0 else hi
            raise KernelTraceError(
                f"{what}: the slice of {buf.name} along dimension {dim} starts at {format_expr(start)}, which can be "
                f"{bad}; with size {size} it leaves [0, {extent}) (the start ranges over [{lo}, {hi}])",
                loc,
            )


def _check_same_shape(a: Region, b: Region, what: str, loc: SourceLoc) -> None:
    if _squeezed(a.shape) != _squeezed(b.shape):
        raise KernelTraceError(f"{what}: shapes differ: {a} is {list(a.shape)}, {b} is {list(b.shape)}", loc)
    if a.buffer.dtype != b.buffer.dtype:
        raise KernelTraceError(
            f"{what}: dtypes differ: {a.buffer.name} is {a.buffer.dtype.name}, {b.buffer.name} is "
            f"{b.buffer.dtype.name} (casts come with T.copy's cast support)",
            loc,
        )


def _check_pe(pe: Expr, kernel: KernelIR, ranges: dict[Var, tuple[int, int]], op: str, loc: SourceLoc) -> None:
    rng = value_range(pe, ranges)
    if rng is None:
        return
    lo, hi = rng
    if lo < 0 or hi >= kernel.num_pes:
        bad = lo if lo < 0 else hi
        raise KernelTraceError(
            f"{op}: PE out of range: pe={format_expr(pe)} can be {bad}, but the kernel's PE space "
            f"{kernel.mesh_axes} has {kernel.num_pes} PEs (0..{kernel.num_pes - 1})",
            loc,
        )


def _check_signal_word(word: Region, op: str, loc: SourceLoc) -> None:
    if word.buffer.kind is not BufferKind.SIGNAL:
        raise KernelTraceError(f"{op}: the signal must be a word of T.alloc_signal(...), got {word.buffer}", loc)
    if word.size != 1:
        raise KernelTraceError(f"{op}: the signal must be one word, e.g. sig[i]; got {word} of {word.size} words", loc)


def _verify_copy(s: Copy, kernel: KernelIR, ranges: dict[Var, tuple[int, int]]) -> None:
    _check_region(s.src, ranges, "copy src", s.loc)
    _check_region(s.dst, ranges, "copy dst", s.loc)
    for r, what in ((s.src, "src"), (s.dst, "dst")):
        if r.buffer.kind is BufferKind.SIGNAL:
            raise KernelTraceError(f"copy {what}: signal words are read with T.signal_wait_until, not copied", s.loc)
    if s.dst.buffer.kind is BufferKind.INPUT:
        raise KernelTraceError(f"copy: {s.dst.buffer.name} is a kernel input, which is read-only", s.loc)
    _check_same_shape(s.src, s.dst, "copy", s.loc)


def _verify_put(s: Put, kernel: KernelIR, ranges: dict[Var, tuple[int, int]]) -> None:
    op = s.op_name
    _check_region(s.src, ranges, f"{op} src", s.loc)
    _check_region(s.dst, ranges, f"{op} dst", s.loc)
    dst_kind = s.dst.buffer.kind
    if dst_kind is BufferKind.INPUT:
        raise KernelTraceError(f"{op}: {s.dst.buffer.name} is a kernel input, which is read-only", s.loc)
    if dst_kind is BufferKind.SHARED:
        raise KernelTraceError(
            f"{op}: the destination {s.dst.buffer.name} is shared memory, which peers cannot address; "
            "put into a kernel output",
            s.loc,
        )
    if dst_kind is BufferKind.SIGNAL or s.src.buffer.kind is BufferKind.SIGNAL:
        raise KernelTraceError(f"{op}: signal words are updated with the signal arguments, not put as data", s.loc)
    _check_same_shape(s.src, s.dst, op, s.loc)
    if s.scope is not Scope.BLOCK:
        raise KernelTraceError(f"{op}: only block scope is supported in this version", s.loc)
    _check_pe(s.pe, kernel, ranges, op, s.loc)
    if s.signal is not None:
        _check_signal_word(s.signal.word, op, s.loc)
        _check_region(s.signal.word, ranges, f"{op} sig", s.loc)


def _verify_wait(s: SignalWait, kernel: KernelIR, ranges: dict[Var, tuple[int, int]]) -> None:
    _check_signal_word(s.word, s.op_name, s.loc)
    _check_region(s.word, ranges, s.op_name, s.loc)


def _verify_nothing(s: Stmt, kernel: KernelIR, ranges: dict[Var, tuple[int, int]]) -> None:
    return None


STMT_RULES: dict[type, Callable[[Stmt, KernelIR, dict[Var, tuple[int, int]]], None]] = {
    Copy: _verify_copy,
    Put: _verify_put,
    SignalWait: _verify_wait,
    Quiet: _verify_nothing,
    Fence: _verify_nothing,
    BarrierAll: _verify_nothing,
}


def verify_kernel(kernel: KernelIR) -> KernelIR:
    """Raises KernelTraceError for the first broken invariant; returns the kernel unchanged."""
    loc = kernel.loc
    if not 1 <= len(kernel.grid) <= MAX_GRID_DIMS or any(
        isinstance(g, bool) or not isinstance(g, int) or g <= 0 for g in kernel.grid
    ):
        raise KernelTraceError(f"grid must be 1 to {MAX_GRID_DIMS} positive ints, got {kernel.grid!r}", loc)
    if not isinstance(kernel.threads, int) or not 32 <= kernel.threads <= MAX_THREADS or kernel.threads % 32:
        raise KernelTraceError(
            f"threads must be a multiple of 32 between 32 and {MAX_THREADS}, got {kernel.threads!r}", loc
        )
    if kernel.num_pes < 1:
        raise KernelTraceError(f"the kernel's PE space {kernel.mesh_axes} is empty", loc)
    ranges = var_ranges(kernel)
    for stmt in kernel.body:
        rule = STMT_RULES.get(type(stmt))
        if rule is None:
            raise KernelTraceError(f"internal: no verifier rule for {type(stmt).__name__}", stmt.loc)
        rule(stmt, kernel, ranges)
    return kernel
