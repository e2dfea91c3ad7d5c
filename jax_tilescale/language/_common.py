"""Argument checking shared by the language functions (not part of the user-facing API)."""

from __future__ import annotations

from typing import Any

from ..errors import KernelTraceError
from ..ir.expr import PE_VAR, Expr, as_expr, format_expr, static_value
from ..ir.nodes import Region, SourceLoc
from .refs import Ref, RegionRef, as_region

RefLike = Ref | RegionRef


def region(value: Any, op: str, role: str, loc: SourceLoc) -> Region:
    return as_region(value, f"{op}: {role}", loc)


def expr(value: Any, op: str, what: str, loc: SourceLoc) -> Expr:
    """An int, a kernel index expression, or a one-element slice of an integer input."""
    if isinstance(value, bool):
        raise KernelTraceError(f"{op}: {what} must be an int or a kernel value, got {value!r}", loc)
    try:
        return as_expr(value)
    except TypeError:
        raise KernelTraceError(f"{op}: {what} must be an int or a kernel value, got {value!r}", loc) from None


def require_pe(pe: Any, op: str, loc: SourceLoc, name: str = "pe") -> Expr:
    if pe is None:
        raise KernelTraceError(f"{op}: the target `{name}=` is required", loc)
    return expr(pe, op, name, loc)


def peer_or_self(pe: Any, op: str, loc: SourceLoc, name: str) -> Expr:
    """TileScale's convention for peer arguments: -1 (or None) means this PE."""
    if pe is None or (isinstance(pe, int) and not isinstance(pe, bool) and pe == -1):
        return PE_VAR
    return expr(pe, op, name, loc)


def byte_size(size: Any, src: Region, op: str, loc: SourceLoc) -> Expr | None:
    """TileScale's byte count. A static one must equal the source slice's bytes (sizes come from
    the slices); a run-time one (an expression of kernel values) is returned for the IR."""
    if size is None:
        return None
    value = expr(size, op, "size", loc)
    static = static_value(value)
    if static is None:
        return value
    if static != src.nbytes:
        raise KernelTraceError(f"{op}: size={static} bytes but the source slice {src} holds {src.nbytes} bytes", loc)
    return None


def element_count(size: Any, src: Region, op: str, loc: SourceLoc) -> None:
    """TileScale's element count (the put_block family): must equal the slice's elements."""
    if size is None:
        return
    value = static_value(expr(size, op, "size", loc))
    if value is None:
        raise KernelTraceError(f"{op}: size must be a static number of elements, got {format_expr(as_expr(size))}", loc)
    if value != src.size:
        raise KernelTraceError(f"{op}: size={value} elements but the source slice {src} holds {src.size}", loc)
