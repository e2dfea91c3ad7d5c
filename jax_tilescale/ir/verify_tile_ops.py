"""Verifier rules of the element-wise tile statements (`tile_ops.py`), registered in
verify_base.VERIFY. Errors name the user's line; index ranges are checked exactly where affine
(loop variables of `T.Parallel` range over [0, extent)), the rest at run time."""

from __future__ import annotations

import numpy as np

from ..errors import KernelTraceError
from .buffers import BufferKind
from .control import THREAD_VAR, If, format_cond
from .expr import loads, same_expr, variables
from .guards import guarded, known_conditions, narrowed
from .kernel_ir import KernelIR
from .nodes import BLOCK_LOCAL, Region, SourceLoc, Stmt, stmt_exprs, walk_stmts
from .ranges import Ranges
from .tile_ops import AtomicElement, AtomicRegion, CumSum, FetchAdd, Parallel, Reduce, Store
from .values import BFLOAT16, BOOL, VALUE_DTYPES, ElementRead, Value, ValueSelect, children, format_value
from .verify_base import VERIFY, check_kind, check_region, squeezed, verify_body

# Where element atomics may update (local memory that several threads or blocks share).
ATOMIC_KINDS = frozenset({BufferKind.OUTPUT, BufferKind.SYMMETRIC, BufferKind.GLOBAL, BufferKind.SHARED})
# Element types the GPU updates atomically (natively or with a compare-and-swap loop).
ATOMIC_DTYPES = frozenset(np.dtype(t) for t in (np.int32, np.uint32, np.int64, np.uint64, np.float16, np.float32,
                                                 np.float64)) | {BFLOAT16}
STORE_KINDS = frozenset({BufferKind.OUTPUT, BufferKind.SYMMETRIC, BufferKind.GLOBAL, BufferKind.SHARED,
                         BufferKind.FRAGMENT})


def _check_dtype(region: Region, op: str, role: str, loc: SourceLoc, numeric: bool = False) -> None:
    dtype = region.buffer.dtype
    if dtype not in VALUE_DTYPES or (numeric and dtype == BOOL):
        kinds = "numbers" if numeric else "bool, integers and floats"
        raise KernelTraceError(f"{op}: the {role} {region.buffer.name} is {dtype.name}; element-wise code works on "
                               f"{kinds}", loc)


def _check_element(region: Region, ranges: Ranges, op: str, role: str, loc: SourceLoc) -> None:
    if region.size != 1:
        raise KernelTraceError(f"{op}: the {role} {region} is {region.size} elements, not one", loc)
    check_region(region, ranges, f"{op} {role}", loc)


def check_value(v: Value, ranges: Ranges, op: str, loc: SourceLoc) -> None:
    """Every element read in `v` is in bounds (where affine) and reads data (not a signal word).
    A read on one side of a `T.where` (and of `a and b`, `a or b`) is checked where its side is
    chosen: under `T.where(j < n, x[i, j], 0)` j < n holds (ir/guards.py)."""
    if isinstance(v, ValueSelect):
        check_value(v.cond, ranges, op, loc)
        for holds, side in ((True, v.if_true), (False, v.if_false)):
            known = known_conditions(v.cond, holds)
            with guarded(known):
                check_value(side, narrowed(known, ranges), op, loc)
        return
    if isinstance(v, ElementRead):
        r = v.region
        _check_element(r, ranges, op, f"read {format_value(v)}", loc)
        if r.buffer.kind is BufferKind.SIGNAL:
            raise KernelTraceError(f"{op}: {r.buffer.name} holds signal words; wait for them (signal_wait_until), "
                                   "do not read them as data", loc)
        _check_dtype(r, op, "read", loc)
    for child in children(v):
        check_value(child, ranges, op, loc)


def _check_parallel_body(body: tuple[Stmt, ...], outer: Parallel, branch: If | None = None) -> None:
    for s in body:
        if not s.in_parallel:
            what = "a nested T.Parallel" if isinstance(s, Parallel) else f"T.{s.op_name}"
            where = f"the T.Parallel at {outer.loc}"
            if branch is not None:
                where = f"`if {format_cond(branch.cond)}` (at {branch.loc}) in {where}, a per-iteration branch"
            raise KernelTraceError(
                f"{what} inside {where}: a Parallel body runs once per iteration, on one thread, and holds element "
                "stores (ref[i, j] = ...), element atomics, ifs and T.serial loops of them; block operations "
                "(copies, reductions, gemm, barriers, communication) need every thread of the block and go before "
                "or after the loop (an element condition for them: compute it into a tile, then branch at block "
                "level on one element, e.g. `if flag[0] > 0:`)",
                s.loc,
            )
        for nested in s.bodies:  # an if's sides are per-iteration branches
            _check_parallel_body(nested, outer, s if isinstance(s, If) else branch)
        if THREAD_VAR in (v for e in stmt_exprs(s) for v in variables(e)):
            raise KernelTraceError(
                f"{s.op_name}: T.thread_id() inside the T.Parallel at {outer.loc}: an iteration runs on whichever "
                "thread the loop gives it, so tx means nothing there; use the loop variables",
                s.loc,
            )


@VERIFY.register(Parallel)
def _verify_parallel(s: Parallel, kernel: KernelIR, ranges: Ranges) -> None:
    if len(s.vars) != len(s.extents) or not s.extents or any(e < 1 for e in s.extents):
        raise KernelTraceError(f"T.Parallel: extents must be positive ints, got {s.extents}", s.loc)
    _check_parallel_body(s.body, s)
    for inner in walk_stmts(s.body):
        for e in stmt_exprs(inner):
            for ld in loads(e):
                if ld.buffer.kind is BufferKind.LOCAL:  # global memory (T.load) reads the same on every thread
                    raise KernelTraceError(
                        f"{ld.buffer.name} is a per-thread register; a T.Parallel iteration runs on whichever thread "
                        "the loop gives it, so registers cannot be read in its body (read them before the loop)",
                        inner.loc,
                    )
    verify_body(s.body, kernel, {**ranges, **{v: (0, e - 1) for v, e in zip(s.vars, s.extents)}})


@VERIFY.register(Store)
def _verify_store(s: Store, kernel: KernelIR, ranges: Ranges) -> None:
    _check_element(s.dst, ranges, "store", "destination", s.loc)
    check_kind(s.dst, STORE_KINDS, "store", "destination", "element stores write kernel outputs, symmetric "
                "scratch and on-chip tiles", s.loc)
    _check_dtype(s.dst, "store", "destination", s.loc)
    check_value(s.value, ranges, "store", s.loc)


def _check_atomic_dst(dst: Region, op: str, loc: SourceLoc) -> None:
    check_kind(dst, ATOMIC_KINDS, op, "destination", "atomics update local memory that threads or blocks share",
                loc)
    if dst.buffer.dtype not in ATOMIC_DTYPES:
        names = ", ".join(sorted(d.name for d in ATOMIC_DTYPES))
        raise KernelTraceError(f"{op}: {dst.buffer.name} is {dst.buffer.dtype.name}; atomics update {names}", loc)


@VERIFY.register(AtomicElement)
def _verify_atomic_element(s: AtomicElement, kernel: KernelIR, ranges: Ranges) -> None:
    _check_element(s.dst, ranges, s.op_name, "destination", s.loc)
    _check_atomic_dst(s.dst, s.op_name, s.loc)
    if s.value.dtype == BOOL:
        raise KernelTraceError(f"{s.op_name}: the value {format_value(s.value)} is bool; T.cast it", s.loc)
    check_value(s.value, ranges, s.op_name, s.loc)


# What T.atomic_fetch_add counts in: integer words of global memory that every block of the PE sees.
FETCH_ADD_KINDS = frozenset({BufferKind.OUTPUT, BufferKind.GLOBAL})
FETCH_ADD_DTYPES = frozenset(np.dtype(t) for t in (np.int32, np.uint32, np.int64, np.uint64))


@VERIFY.register(FetchAdd)
def _verify_fetch_add(s: FetchAdd, kernel: KernelIR, ranges: Ranges) -> None:
    op = s.op_name
    _check_element(s.word, ranges, op, "word", s.loc)
    check_kind(s.word, FETCH_ADD_KINDS, op, "word", "a count that every block of the PE sees lives in global "
               "memory (T.alloc(..., level=\"global\"), zero when the kernel starts)", s.loc)
    if s.word.buffer.dtype not in FETCH_ADD_DTYPES:
        raise KernelTraceError(f"{op}: the word {s.word.buffer.name} is {s.word.buffer.dtype.name}; it counts in "
                               "int32, uint32, int64 or uint64", s.loc)
    _check_element(s.prev, ranges, op, "prev", s.loc)
    check_kind(s.prev, frozenset({BufferKind.SHARED}), op, "prev", "every thread of the block reads the old "
               "count from a shared tile", s.loc)
    if s.prev.buffer.dtype != s.word.buffer.dtype:
        raise KernelTraceError(f"{op}: prev {s.prev.buffer.name} is {s.prev.buffer.dtype.name}, the word "
                               f"{s.word.buffer.name} {s.word.buffer.dtype.name}: give them one dtype", s.loc)
    if THREAD_VAR in variables(s.value):
        raise KernelTraceError(f"{op}: the value depends on the thread; the block adds one value", s.loc)


@VERIFY.register(AtomicRegion)
def _verify_atomic_region(s: AtomicRegion, kernel: KernelIR, ranges: Ranges) -> None:
    op = s.op_name
    check_region(s.dst, ranges, f"{op} dst", s.loc)
    check_region(s.src, ranges, f"{op} src", s.loc)
    _check_atomic_dst(s.dst, op, s.loc)
    if s.src.buffer.kind is BufferKind.SIGNAL:
        raise KernelTraceError(f"{op}: {s.src.buffer.name} holds signal words, not data", s.loc)
    _check_dtype(s.src, op, "source", s.loc, numeric=True)
    if squeezed(s.src.sizes) != squeezed(s.dst.sizes):
        raise KernelTraceError(f"{op}: shapes differ: {s.dst} is {list(s.dst.sizes)}, {s.src} is "
                               f"{list(s.src.sizes)}", s.loc)


@VERIFY.register(Reduce)
def _verify_reduce(s: Reduce, kernel: KernelIR, ranges: Ranges) -> None:
    op = s.op_name
    for r, role in ((s.src, "src"), (s.dst, "dst")):
        check_region(r, ranges, f"{op} {role}", s.loc)
        check_kind(r, BLOCK_LOCAL, op, role, "reductions work on on-chip tiles (T.alloc_fragment, T.alloc_shared)",
                    s.loc)
        _check_dtype(r, op, role, s.loc, numeric=True)
    rank = len(s.src.sizes)
    if not 0 <= s.dim < rank:
        raise KernelTraceError(f"{op}: dim={s.dim} is not a dimension of {s.src} (rank {rank})", s.loc)
    kept = s.src.sizes[: s.dim] + s.src.sizes[s.dim + 1 :]
    if squeezed(s.dst.sizes) != squeezed(kept):
        raise KernelTraceError(
            f"{op}: reducing {s.src} ({list(s.src.sizes)}) along dim {s.dim} gives {list(kept)}, but {s.dst} is "
            f"{list(s.dst.sizes)}",
            s.loc,
        )
    if s.src.buffer is s.dst.buffer:
        raise KernelTraceError(f"{op}: src and dst are the same buffer {s.src.buffer.name}", s.loc)


@VERIFY.register(CumSum)
def _verify_cumsum(s: CumSum, kernel: KernelIR, ranges: Ranges) -> None:
    op = s.op_name
    for r, role in ((s.src, "src"), (s.dst, "dst")):
        check_region(r, ranges, f"{op} {role}", s.loc)
        check_kind(r, BLOCK_LOCAL, op, role, "cumsum works on on-chip tiles (T.alloc_fragment, T.alloc_shared)",
                   s.loc)
        _check_dtype(r, op, role, s.loc, numeric=True)
    if s.src.sizes != s.dst.sizes:
        raise KernelTraceError(f"{op}: dst has the shape of src: {s.src} is {list(s.src.sizes)}, {s.dst} is "
                               f"{list(s.dst.sizes)}", s.loc)
    rank = len(s.src.sizes)
    if not 0 <= s.dim < rank:
        raise KernelTraceError(f"{op}: dim={s.dim} is not a dimension of {s.src} (rank {rank})", s.loc)
    if s.src.buffer == s.dst.buffer and not same_expr(s.src.starts, s.dst.starts):
        raise KernelTraceError(
            f"{op}: {s.src} and {s.dst} are different slices of {s.src.buffer.name}; cumsum works in place (the same "
            "slice, or leave dst out) or from one tile into another", s.loc)
