"""IR statements of element-wise tile compute: `T.Parallel` loop nests, element stores, reductions
and atomics (issue 6). Their invariants are checked in `verify_tile_ops.py`; values are `values.py`.

Execution model (every backend): a `Parallel` runs its iterations concurrently, one per thread of
the block (round robin when there are more iterations than threads), and the block meets after it
(a `__syncthreads()` on the GPU), so later statements see every element it wrote. Iterations must
be independent: two iterations that touch the same element, one of them writing it (plainly), is a
race (the interpreter reports it; on the GPU the result is undefined). An `If` (ir/control.py) in a
`Parallel` body is per iteration: its condition (loop variables, element values, both) is
evaluated by each iteration, whose statements of the side it took run; only those iterations'
accesses happen (and count for races). Element stores and atomics outside a `Parallel` run once
per block. `Reduce`, `CumSum` and `AtomicRegion` are block statements (all threads cooperate, the
block meets after them).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from .expr import Expr, Var
from .nodes import Region, Stmt
from .values import Value, promote


class ReduceKind(enum.Enum):
    SUM = "sum"
    MAX = "max"
    MIN = "min"
    ABSMAX = "absmax"


class AtomicKind(enum.Enum):
    ADD = "add"
    MAX = "max"
    MIN = "min"


@dataclass(frozen=True)
class Parallel(Stmt):
    """`for i, j in T.Parallel(M, N):` the body once per (i, j), iterations spread over the block's
    threads. `vars` are the loop variables (VarKind.LOOP, unique ids), row-major over `extents`."""

    vars: tuple[Var, ...]
    extents: tuple[int, ...]
    body: tuple[Stmt, ...]
    op_name = "Parallel"

    @property
    def bodies(self) -> tuple[tuple[Stmt, ...], ...]:
        return (self.body,)


@dataclass(frozen=True)
class Store(Stmt):
    """`ref[i, j] = value`: one element (a one-element region), `value` converted to its dtype."""

    dst: Region
    value: Value
    op_name = "store"
    in_thread_branch: ClassVar[bool] = True  # one thread runs it (thread 0 at block level)
    in_parallel: ClassVar[bool] = True


@dataclass(frozen=True)
class AtomicElement(Stmt):
    """`T.atomic_add(ref[i, j], value)` (max, min): an atomic read-modify-write of one element of
    local memory; `value` is converted to the element's dtype first, the result rounded to it."""

    op: AtomicKind
    dst: Region
    value: Value
    in_thread_branch: ClassVar[bool] = True
    in_parallel: ClassVar[bool] = True

    @property
    def op_name(self) -> str:  # type: ignore[override]
        return f"atomic_{self.op.value}"


@dataclass(frozen=True)
class AtomicRegion(Stmt):
    """`T.atomic_add(C[rows, cols], frag)`: an atomic update of each element of `dst` with the
    matching element of `src` (same shape up to dimensions of size 1), by the whole block."""

    op: AtomicKind
    dst: Region
    src: Region

    @property
    def op_name(self) -> str:  # type: ignore[override]
        return f"atomic_{self.op.value}"


@dataclass(frozen=True)
class FetchAdd(Stmt):
    """`T.atomic_fetch_add(word, value, prev)`: the block's one atomic `word += value` on an
    integer word of global memory, its old value written to `prev` (one element of a shared tile)
    for every thread to read. A block statement that orders memory, unlike the element atomics:
    everything the block did before it happens before it (release), and what the block does after
    it happens after every earlier fetch_add on the same word (acquire): the ticket of a turnstile
    (the block that draws the last ticket of a tile may read what the others wrote before theirs)."""

    word: Region
    value: Expr
    prev: Region
    op_name = "atomic_fetch_add"


@dataclass(frozen=True)
class Reduce(Stmt):
    """`T.reduce_sum(src, dst, dim=1, clear=True)` (max, min, absmax): `dst` (src's shape without
    `dim`, up to dimensions of size 1) := the reduction of `src` along `dim`; with `clear=False`
    combined with dst's old value (added, or max/min). Computed in the promoted compute type of src
    and dst (float32 for 16-bit floats), rounded to dst's dtype; the order of operations is unspecified."""

    kind: ReduceKind
    src: Region
    dst: Region
    dim: int
    clear: bool = True

    @property
    def op_name(self) -> str:  # type: ignore[override]
        return f"reduce_{self.kind.value}"

    @property
    def acc_dtype(self) -> np.dtype:
        """The type the reduction computes in: the arithmetic type of src and dst (values.promote:
        float64 if either is, float32 for other floats, int64 for integers)."""
        return promote(self.src.buffer.dtype, self.dst.buffer.dtype)


@dataclass(frozen=True)
class CumSum(Stmt):
    """`T.cumsum(src, dst, dim=0, reverse=False)` (TileLang's): along `dim`, every element of `dst`
    := the sum of `src` up to it (from it to the end with `reverse`). src and dst are on-chip tiles
    of one shape; dst may be src itself (in place). Summed in order along `dim`, in the arithmetic
    type of src and dst (values.promote: float32 for 16- and 32-bit floats), each prefix rounded
    to dst's dtype when stored, so both backends give the same bits."""

    src: Region
    dst: Region
    dim: int
    reverse: bool = False
    op_name = "cumsum"

    @property
    def acc_dtype(self) -> np.dtype:
        """The type the running sum is held in (values.promote of src's and dst's dtypes)."""
        return promote(self.src.buffer.dtype, self.dst.buffer.dtype)
