"""What kernel code holds of memory: refs of buffers and their slices, and what slicing means.

A kernel function receives `Ref`s of its inputs and outputs (`T.alloc_*` return them too);
subscripts make `RegionRef`s (windows of static size, starts that may be run-time values), which
the language functions turn into IR regions. A one-element slice is also a kernel value: of an
integer input an index value read when the kernel runs (`T.load`), of other buffers an element
value (`x[i, j] * 2`); `ref[i, j] = v` records an element store.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import KernelTraceError
from ..ir.buffers import LOADABLE_DTYPES, Buffer, BufferKind, load_refusal
from ..ir.expr import Expr, Load, as_expr, format_expr, static_value
from ..ir.nodes import Region, SourceLoc, full_region
from ..ir.tile_ops import Store
from ..ir.values import BinaryKind, ElementRead, UnaryKind, Value, as_value, binary, for_destination, unary
from .source import user_source_loc
from .state import current_trace
from .values import TileValue, build_value, defers, index_arith


@dataclass(frozen=True)
class DynSlice:
    """`T.ds(start, size)`: a window of static size at a (possibly run-time) start."""

    start: Expr
    size: int


class BufferHandle:
    """What kernel code holds of one buffer (`Ref`, `T.alloc_local`'s registers): its shape and dtype."""

    def __init__(self, buffer: Buffer):
        self.buffer = buffer

    @property
    def shape(self) -> tuple[int, ...]:
        return self.buffer.shape

    @property
    def dtype(self) -> np.dtype:
        return self.buffer.dtype


class Ref(BufferHandle):
    """What a kernel function receives (and `alloc_*` returns): a whole buffer, sliceable."""

    def region(self) -> Region:
        return full_region(self.buffer)

    def __getitem__(self, index: Any) -> RegionRef:
        return sliced_ref(self.region(), index, user_source_loc())

    def __setitem__(self, index: Any, value: Any) -> None:
        loc = user_source_loc()
        element_store(slice_region(self.region(), index, loc), value, loc)

    def __repr__(self) -> str:
        return f"Ref({self.buffer})"


def load_of(region: Region, loc: SourceLoc, explicit: bool = False) -> Load:
    """`region` (one integer element of global memory) as a kernel value read when it is used.

    An input's element (`splits[i]` in arithmetic) reads as one implicitly; memory that may change
    while the kernel runs (outputs, symmetric scratch, signal words) only through `T.load`
    (`explicit`), so that the read a peer's data must precede is visible in the kernel's code."""
    buf = region.buffer
    refusal = load_refusal(buf)
    if not explicit and buf.kind is not BufferKind.INPUT:
        why = "" if refusal is not None else (
            ", which the kernel or its peers may change while it runs: write T.load("
            f"{buf.name}[...]) where the data is known to have arrived (after the wait that delivered it)"
        )
        raise KernelTraceError(
            f"only kernel inputs can be read as values without T.load; {buf.name} is a {buf.kind.value} buffer{why}",
            loc,
        )
    if refusal is not None:
        raise KernelTraceError(refusal, loc)
    if region.size != 1:
        raise KernelTraceError(
            f"T.load reads one element, e.g. splits[i]; {region} has {region.size} elements", loc
        )
    return Load(buf, region.starts)


def _operand(value: Any) -> Any:
    return value.__tilescale_expr__() if isinstance(value, RegionRef) else value


def element_value(region: Region, loc: SourceLoc) -> Value:
    """`ref[i, j]` used as a number: an element read (ir/values.py)."""
    if region.size != 1:
        raise KernelTraceError(
            f"{region} has {region.size} elements; element-wise code reads one element at a time, e.g. "
            f"{region.buffer.name}[i, j] inside `for i, j in T.Parallel(...)`",
            loc,
        )
    return ElementRead(region)


def element_store(region: Region, value: Any, loc: SourceLoc) -> None:
    """`ref[i, j] = value`: one element := value (converted to the element's dtype)."""
    state = current_trace("store")
    overhang = static_overhang(region)
    if overhang is not None:
        raise KernelTraceError(overhang, loc)
    if region.size != 1:
        raise KernelTraceError(
            f"`{region} = ...` assigns {region.size} elements; element stores assign one element, e.g. "
            f"{region.buffer.name}[i, j] = ... inside `for i, j in T.Parallel(...)` (T.fill, T.copy move tiles)",
            loc,
        )
    try:
        node = for_destination(as_value(value), region.buffer.dtype)
    except TypeError as e:
        raise KernelTraceError(f"`{region} = ...`: {e}", loc) from None
    state.emit(Store(region, node, loc=loc))


_INDEX_OPS: dict[str, Callable[[Any, Any], Any]] = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "//": operator.floordiv, "%": operator.mod,
    "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "==": operator.eq, "!=": operator.ne,
}


class RegionRef:
    """A slice of a ref; can be sliced again. A one-element slice of an integer input is also a
    kernel value: `splits[i] * 4`, `T.ds(offsets[p], 8)` read it when the kernel runs.

    A window that extends past the end of its buffer (static start, `A[96:128]` of 100 rows) is
    only good for the global side of a `T.copy` to or from a tile: `overhang_` holds the error
    (and the slicing line) that every other use raises (`region()`)."""

    def __init__(self, region: Region, overhang: tuple[str, SourceLoc] | None = None):
        self.region_ = region
        self.overhang_ = overhang

    def __tilescale_expr__(self) -> Expr:
        return load_of(self.region(), user_source_loc())

    @property
    def __tilescale_defer__(self) -> bool:
        """True unless this is an index value (one element of an integer input, read as T.load):
        arithmetic on it then builds element values (values.py) rather than index expressions."""
        buf = self.region_.buffer
        return not (buf.kind is BufferKind.INPUT and buf.dtype in LOADABLE_DTYPES and self.region_.size == 1)

    def __tilescale_value__(self) -> Value:
        return element_value(self.region(), user_source_loc())

    def _op(self, op: str, other: Any, reflected: bool = False) -> Expr | TileValue:
        if op == "/" or self.__tilescale_defer__ or defers(other):
            return index_arith(op, other, self) if reflected else index_arith(op, self, other)
        a, b = self.__tilescale_expr__(), _operand(other)
        return _INDEX_OPS[op](b, a) if reflected else _INDEX_OPS[op](a, b)

    def __add__(self, other: Any) -> Expr | TileValue:
        return self._op("+", other)

    def __radd__(self, other: Any) -> Expr | TileValue:
        return self._op("+", other, True)

    def __sub__(self, other: Any) -> Expr | TileValue:
        return self._op("-", other)

    def __rsub__(self, other: Any) -> Expr | TileValue:
        return self._op("-", other, True)

    def __mul__(self, other: Any) -> Expr | TileValue:
        return self._op("*", other)

    def __rmul__(self, other: Any) -> Expr | TileValue:
        return self._op("*", other, True)

    def __truediv__(self, other: Any) -> TileValue:
        return self._op("/", other)  # type: ignore[return-value]

    def __rtruediv__(self, other: Any) -> TileValue:
        return self._op("/", other, True)  # type: ignore[return-value]

    def __floordiv__(self, other: Any) -> Expr | TileValue:
        return self._op("//", other)

    def __rfloordiv__(self, other: Any) -> Expr | TileValue:
        return self._op("//", other, True)

    def __mod__(self, other: Any) -> Expr | TileValue:
        return self._op("%", other)

    def __rmod__(self, other: Any) -> Expr | TileValue:
        return self._op("%", other, True)

    def __lt__(self, other: Any) -> Any:
        return self._op("<", other)

    def __le__(self, other: Any) -> Any:
        return self._op("<=", other)

    def __gt__(self, other: Any) -> Any:
        return self._op(">", other)

    def __ge__(self, other: Any) -> Any:
        return self._op(">=", other)

    def __eq__(self, other: Any) -> Any:  # type: ignore[override]
        return self._op("==", other)

    def __ne__(self, other: Any) -> Any:  # type: ignore[override]
        return self._op("!=", other)

    __hash__ = object.__hash__

    def __neg__(self) -> Expr | TileValue:
        if self.__tilescale_defer__:
            return build_value(unary, (UnaryKind.NEG, self))
        return -self.__tilescale_expr__()

    def __abs__(self) -> TileValue:
        return build_value(unary, (UnaryKind.ABS, self))

    # `~mask[i, j]`, `mask[i, j] & (x[i, j] > 0)`: logic on element values (bool elements); on an
    # index value (one element of an integer input) whatever its index expression allows.
    def _logic(self, kind: BinaryKind, other: Any, reflected: bool = False) -> Any:
        if not self.__tilescale_defer__:
            mine = self.__tilescale_expr__()
            return (other & mine if reflected else mine & other) if kind is BinaryKind.AND else (
                other | mine if reflected else mine | other)
        return build_value(binary, (kind, other, self) if reflected else (kind, self, other))

    def __and__(self, other: Any) -> Any:
        return self._logic(BinaryKind.AND, other)

    def __rand__(self, other: Any) -> Any:
        return self._logic(BinaryKind.AND, other, True)

    def __or__(self, other: Any) -> Any:
        return self._logic(BinaryKind.OR, other)

    def __ror__(self, other: Any) -> Any:
        return self._logic(BinaryKind.OR, other, True)

    def __invert__(self) -> Any:
        if not self.__tilescale_defer__:
            return ~self.__tilescale_expr__()
        return build_value(unary, (UnaryKind.NOT, self))

    def __setitem__(self, index: Any, value: Any) -> None:
        loc = user_source_loc()
        element_store(slice_region(self.region_, index, loc), value, loc)

    @property
    def shape(self) -> tuple[int, ...]:
        return self.region_.sizes

    @property
    def dtype(self) -> np.dtype:
        return self.region_.buffer.dtype

    def region(self) -> Region:
        """The window, which must lie inside its buffer (else the slicing line's error)."""
        if self.overhang_ is not None:
            raise KernelTraceError(*self.overhang_)
        return self.region_

    def __getitem__(self, index: Any) -> RegionRef:
        return sliced_ref(self.region_, index, user_source_loc())

    def __repr__(self) -> str:
        return f"RegionRef({self.region_})"


def as_region(value: Any, what: str, loc: SourceLoc, clip: bool = False) -> Region:
    """The region of a ref or slice. `clip=True` (the global side of a `T.copy` to or from a
    tile) also takes a window that extends past the end of its buffer."""
    if isinstance(value, RegionRef) and clip:
        return value.region_
    if isinstance(value, (Ref, RegionRef)):
        return value.region()
    raise KernelTraceError(f"{what} must be a kernel ref or a slice of one, got {type(value).__name__}", loc)


def _dim_window(index: Any, extent: int, dim: int, buffer: Buffer, loc: SourceLoc) -> tuple[Expr, int, bool]:
    """(start, size, keep_dim) of one subscript along a dimension of static `extent`."""
    if isinstance(index, DynSlice):
        return index.start, index.size, True
    if isinstance(index, slice):
        if index.step not in (None, 1):
            raise KernelTraceError(f"slices of {buffer.name} must have step 1 (got {index.step})", loc)
        start = as_expr(0 if index.start is None else index.start)
        stop = as_expr(extent if index.stop is None else index.stop)
        size = static_value(stop - start)
        if size is None:
            raise KernelTraceError(
                f"the slice {format_expr(start)}:{format_expr(stop)} of {buffer.name} (dimension {dim}) has a size "
                "that is only known at run time; tiles need static sizes: write start:start+SIZE or T.ds(start, SIZE)",
                loc,
            )
        if size <= 0:
            raise KernelTraceError(
                f"the slice {format_expr(start)}:{format_expr(stop)} of {buffer.name} (dimension {dim}) is empty", loc
            )
        return start, size, True
    if index is Ellipsis:
        raise KernelTraceError("`...` in a kernel subscript is not supported; spell out each dimension", loc)
    try:
        return as_expr(index), 1, False
    except TypeError:
        raise KernelTraceError(f"cannot index {buffer.name} with {index!r}", loc) from None


def slice_region(region: Region, index: Any, loc: SourceLoc) -> Region:
    """Applies a subscript to a region; integer indices drop nothing (regions keep rank).

    A static window must start inside the region and end inside it, except where the region
    spans its buffer's whole dimension: there the window may end past the buffer's end (callers
    decide whether that may be used: `static_overhang`, `sliced_ref`)."""
    if not isinstance(index, tuple):
        index = (index,)
    if len(index) > len(region.sizes):
        raise KernelTraceError(
            f"too many indices for {region.buffer.name}: it has {len(region.sizes)} dimensions, got {len(index)}", loc
        )
    index = index + (slice(None),) * (len(region.sizes) - len(index))
    starts, sizes = [], []
    for dim, (sub, base, extent) in enumerate(zip(index, region.starts, region.sizes)):
        start, size, _ = _dim_window(sub, extent, dim, region.buffer, loc)
        lo = static_value(start)
        whole = extent == region.buffer.shape[dim] and static_value(base) == 0
        if lo is not None and (lo < 0 or lo >= extent or (lo + size > extent and not whole)):
            raise KernelTraceError(
                f"slice [{format_expr(start)}:{format_expr(start + size)}] is out of bounds for dimension {dim} "
                f"of {region.buffer.name} (extent {extent})",
                loc,
            )
        starts.append(base + start)
        sizes.append(size)
    return Region(region.buffer, tuple(starts), tuple(sizes))


def static_overhang(region: Region) -> str | None:
    """The error for a window whose static start puts part of it past the end of its buffer
    (None when it lies inside as far as is known now; the verifier checks run-time starts)."""
    buf = region.buffer
    for dim, (start, size, extent) in enumerate(zip(region.starts, region.sizes, buf.shape)):
        lo = static_value(start)
        if lo is not None and lo + size > extent:
            return (
                f"slice [{lo}:{lo + size}] is out of bounds for dimension {dim} of {buf.name} (extent {extent}); "
                "only T.copy between global memory and a shared or fragment tile takes a window that ends past "
                "its buffer (the elements outside are zero-filled on load and skipped on store)"
            )
    return None


def sliced_ref(region: Region, index: Any, loc: SourceLoc) -> RegionRef:
    """`region[index]` as a RegionRef that remembers whether the window ends past its buffer."""
    sliced = slice_region(region, index, loc)
    overhang = static_overhang(sliced)
    return RegionRef(sliced, None if overhang is None else (overhang, loc))
