"""Element-wise tile compute (issue 6): `Parallel` loop nests with element reads and stores, math
on typed values (`exp`, `exp2`, `log`, `max`, `min`, `abs`, `where`, `cast`), `ceildiv` for index
math, reductions (`reduce_sum`, `reduce_max`, `reduce_min`, `reduce_absmax`), the prefix sum
`cumsum`, and atomics (`atomic_add`, `atomic_max`, `atomic_min`). TileLang's names and signatures; the type rules are
in `jax_tilescale/ir/values.py` (and docs/architecture.md).

    for i, j in T.Parallel(M, N):
        C_frag[i, j] = T.exp(A_s[i, j] - row_max[i]) * 2 + B_frag[i, j]
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from ..errors import KernelTraceError
from ..ir.expr import Expr, Var, VarKind, as_expr, expr_max, expr_min
from ..ir.tile_ops import AtomicElement, AtomicKind, AtomicRegion, CumSum, FetchAdd, Reduce, ReduceKind
from ..ir.tile_ops import Parallel as ParallelStmt
from ..ir.values import BinaryKind, UnaryKind, Value, as_value, binary, for_destination, unary
from ..ir.values import cast as cast_value
from ..ir.values import select as select_value
from ._common import RefLike, expr, region
from .refs import Ref, RegionRef, element_value
from .source import user_source_loc
from .state import current_trace
from .values import TileValue
from .views import atomic_add_view, is_view


class _ParallelRange:
    """What `T.Parallel(M, N)` returns: iterating it traces the body once, with the loop variables."""

    def __init__(self, extents: tuple[Any, ...]):
        self.loc = user_source_loc()
        if not extents or builtins.any(isinstance(n, bool) or not isinstance(n, int | np.integer) or int(n) < 1
                                       for n in extents):
            raise KernelTraceError(f"T.Parallel: extents must be positive Python ints, got {extents!r}", self.loc)
        self.extents = tuple(int(n) for n in extents)

    def __iter__(self) -> Iterator[Any]:
        state = current_trace("Parallel")
        variables = []
        for _ in self.extents:
            variables.append(Var(VarKind.LOOP, state.next_loop_id))
            state.next_loop_id += 1
        body: list = []
        state.open_bodies.append(body)
        yield variables[0] if len(variables) == 1 else tuple(variables)
        if not state.open_bodies or state.open_bodies[-1] is not body:
            raise KernelTraceError("T.Parallel: loops must nest", self.loc)
        state.open_bodies.pop()
        state.emit(ParallelStmt(tuple(variables), self.extents, tuple(body), loc=self.loc))


def Parallel(*extents: int) -> _ParallelRange:
    """`for i, j in T.Parallel(M, N):` runs the body for every (i, j) in [0, M) x [0, N), the
    iterations spread over the block's threads (which meet after the loop). Iterations must be
    independent: none may touch an element another one writes (atomics excepted). The body holds
    element stores `ref[i, j] = value`, `T.atomic_*` of elements, `T.serial` loops, and Python
    `if`/`elif`/`else` on loop variables and element values (`if j < n and x[i, j] > 0:`): per
    iteration, only the iterations where the condition holds run the branch."""
    return _ParallelRange(extents)


def _value(x: Any, op: str) -> Value:
    try:
        return as_value(x)
    except TypeError as e:
        raise KernelTraceError(f"T.{op}: {e}", user_source_loc()) from None


def _build(op: str, fn: Callable[..., Value], *args: Any) -> TileValue:
    try:
        return TileValue(fn(*args))
    except TypeError as e:
        raise KernelTraceError(f"T.{op}: {e}", user_source_loc()) from None


def _is_index(x: Any) -> bool:
    """An int or an index expression (not a float, an element value or a float element)."""
    if isinstance(x, bool):
        return False
    if isinstance(x, int | np.integer | Expr):
        return True
    return isinstance(x, RegionRef) and not x.__tilescale_defer__


def exp(x: Any) -> TileValue:
    """e**x, in float32 (float64 for float64 x)."""
    return _build("exp", unary, UnaryKind.EXP, x)


def exp2(x: Any) -> TileValue:
    """2**x, in float32 (float64 for float64 x)."""
    return _build("exp2", unary, UnaryKind.EXP2, x)


def log(x: Any) -> TileValue:
    """The natural logarithm, in float32 (float64 for float64 x)."""
    return _build("log", unary, UnaryKind.LOG, x)


def abs(x: Any) -> TileValue:
    """|x| (ints in int64, floats in float32 or float64)."""
    return _build("abs", unary, UnaryKind.ABS, x)


def max(a: Any, b: Any) -> Expr | TileValue:
    """The larger of a and b: an index expression for ints and index expressions, else a value
    (NaN-propagating for floats)."""
    if _is_index(a) and _is_index(b):
        return expr_max(as_expr(a), as_expr(b))
    return _build("max", binary, BinaryKind.MAX, a, b)


def min(a: Any, b: Any) -> Expr | TileValue:
    """The smaller of a and b (see `max`)."""
    if _is_index(a) and _is_index(b):
        return expr_min(as_expr(a), as_expr(b))
    return _build("min", binary, BinaryKind.MIN, a, b)


def where(cond: Any, a: Any, b: Any) -> TileValue:
    """`a` where `cond` holds, else `b` (only the chosen side is evaluated, so `T.where(i < n,
    x[i], 0.0)` never reads x[n]). `cond` is a comparison (`x[i] > 0`, `i < j`) or `&`/`|`/`~` of them."""
    return _build("where", select_value, cond, a, b)


def cast(x: Any, dtype: Any) -> TileValue:
    """`x` converted to `dtype` (round to nearest even for floats, truncation toward zero from float
    to int, wrapping between ints)."""
    return _build("cast", cast_value, x, dtype)


def ceildiv(a: Any, b: Any) -> Any:
    """ceil(a / b) for ints (a Python int) and index expressions (an index expression)."""
    if not (_is_index(a) and _is_index(b)):
        raise KernelTraceError(f"T.ceildiv works on ints and index expressions, got {a!r} and {b!r}",
                               user_source_loc())
    if isinstance(a, int | np.integer) and isinstance(b, int | np.integer):
        if b == 0:
            raise KernelTraceError("T.ceildiv: division by zero", user_source_loc())
        return -(-int(a) // int(b))
    return -((-as_expr(a)) // as_expr(b))


# ---- reductions -------------------------------------------------------------------------------


def _reduce(kind: ReduceKind, src: RefLike, dst: RefLike, dim: int, clear: bool) -> None:
    op = f"reduce_{kind.value}"
    state = current_trace(op)
    loc = user_source_loc()
    if isinstance(dim, bool) or not isinstance(dim, int | np.integer):
        raise KernelTraceError(f"T.{op}: dim must be an int, got {dim!r}", loc)
    s = region(src, op, "src", loc)
    d = int(dim) + len(s.sizes) if int(dim) < 0 else int(dim)
    state.emit(Reduce(kind, s, region(dst, op, "dst", loc), d, bool(clear), loc=loc))


def reduce_sum(buffer: RefLike, out: RefLike, dim: int = -1, clear: bool = True) -> None:
    """out = sum of buffer along `dim` (out += ... with clear=False); fragment or shared tiles,
    out one rank lower. Sums in float32 for 16- and 32-bit floats, int64 for ints."""
    _reduce(ReduceKind.SUM, buffer, out, dim, clear)


def reduce_max(buffer: RefLike, out: RefLike, dim: int = -1, clear: bool = True) -> None:
    """out = max of buffer along `dim` (max with out's old value with clear=False); NaN-propagating."""
    _reduce(ReduceKind.MAX, buffer, out, dim, clear)


def reduce_min(buffer: RefLike, out: RefLike, dim: int = -1, clear: bool = True) -> None:
    """out = min of buffer along `dim` (see reduce_max)."""
    _reduce(ReduceKind.MIN, buffer, out, dim, clear)


def reduce_absmax(buffer: RefLike, out: RefLike, dim: int = -1, clear: bool = True) -> None:
    """out = max |buffer| along `dim` (see reduce_max)."""
    _reduce(ReduceKind.ABSMAX, buffer, out, dim, clear)


def cumsum(src: RefLike, dst: RefLike | None = None, dim: int = 0, reverse: bool = False) -> None:
    """TileLang's prefix sum: along `dim`, every element of `dst` := the sum of `src` up to it (from
    it to the end with `reverse`); in place when `dst` is left out. Shared or fragment tiles of one
    shape, all threads of the block. Sums in order, in float32 for 16- and 32-bit floats (float64
    for float64, int64, wrapping, for integers), each prefix rounded to dst's dtype."""
    state = current_trace("cumsum")
    loc = user_source_loc()
    if isinstance(dim, bool) or not isinstance(dim, int | np.integer):
        raise KernelTraceError(f"T.cumsum: dim must be an int, got {dim!r}", loc)
    s = region(src, "cumsum", "src", loc)
    d = s if dst is None else region(dst, "cumsum", "dst", loc)
    axis = int(dim) + len(s.sizes) if int(dim) < 0 else int(dim)
    state.emit(CumSum(s, d, axis, bool(reverse), loc=loc))


# ---- atomics -----------------------------------------------------------------------------------


def _atomic(kind: AtomicKind, dst: Any, value: Any) -> None:
    op = f"atomic_{kind.value}"
    if is_view(dst):  # a reduction into a replicated view (views.py)
        if kind is not AtomicKind.ADD:
            raise KernelTraceError(f"T.{op}: views take T.atomic_add only", user_source_loc())
        return atomic_add_view(dst, value)
    state = current_trace(op)
    loc = user_source_loc()
    d = region(dst, op, "destination", loc)
    if isinstance(value, Ref | RegionRef) and (d.size > 1 or value.region().size > 1):
        state.emit(AtomicRegion(kind, d, region(value, op, "value", loc), loc=loc))
        return
    if d.size != 1:
        raise KernelTraceError(
            f"T.{op}: the destination {d} has {d.size} elements: update one element (C[i, j]) with a value, or a "
            "region with a tile of the same shape", loc)
    element_value(d, loc)
    try:
        node = for_destination(_value(value, op), d.buffer.dtype)
    except TypeError as e:
        raise KernelTraceError(f"T.{op}: {e}", loc) from None
    state.emit(AtomicElement(kind, d, node, loc=loc))


def atomic_add(dst: Any, value: Any) -> None:
    """dst += value, atomically: one element (`T.atomic_add(C[i, j], v)`, usually in a T.Parallel
    body) or a region with a tile of its shape (`T.atomic_add(C[rows, cols], frag)`, the whole block).
    Local memory only (outputs, symmetric scratch, shared tiles); atomics order nothing else."""
    _atomic(AtomicKind.ADD, dst, value)


def atomic_fetch_add(word: Any, value: Any, prev: Any) -> None:
    """`prev = word; word += value` as one atomic step for the whole block (thread 0 does it), and
    an ordering point, unlike `atomic_add`: the block's earlier reads and writes happen before it,
    and its later ones after every earlier `atomic_fetch_add` on the same word. `word` is one int32
    or int64 element of global memory (`T.alloc((n,), jnp.int32, level="global")`: zero when the
    kernel starts), `prev` one element of a shared tile of the same dtype, which every thread then
    reads (`if prev_s[0] == n - 1:`). The turnstile of a reduction across blocks: each block writes its
    part, takes a ticket, and the block that draws the last one reads the others' parts
    (examples/gemm.py's split-K). A block statement: not in a T.Parallel or a thread-dependent `if`."""
    op = "atomic_fetch_add"
    state = current_trace(op)
    loc = user_source_loc()
    state.emit(FetchAdd(region(word, op, "word", loc), expr(value, op, "value", loc), region(prev, op, "prev", loc),
                        loc=loc))


def atomic_max(dst: Any, value: Any) -> None:
    """dst = max(dst, value), atomically (see atomic_add); NaN-propagating for floats."""
    _atomic(AtomicKind.MAX, dst, value)


def atomic_min(dst: Any, value: Any) -> None:
    """dst = min(dst, value), atomically (see atomic_add)."""
    _atomic(AtomicKind.MIN, dst, value)
