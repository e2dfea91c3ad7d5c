"""Interpreter rules of the element-wise tile statements: `T.Parallel`, element stores, atomics,
reductions. The reference semantics of ir/values.py and ir/tile_ops.py.

A `Parallel` is evaluated vectorised: its loop variables are numpy index arrays over the
iteration space, and each statement of its body runs for every iteration at once, in program
order. That equals running the iterations one by one whenever they are independent, which the
rule checks (`_IterationLog`): two iterations touching one element, one of them writing it
plainly, is a race (a RaceError, like the GPU's threads racing). Memory goes through
`LaunchMemory.access` as everywhere: an element set is logged as the fewest rectangles that cover
exactly it, so the race detector and the output coverage see exactly the elements touched.
Atomics are ATOMIC accesses (they race with plain accesses of other agents, never with atomics)
applied one update at a time in iteration order, each rounded to the element's dtype.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import KernelRuntimeError, RaceError
from ..ir.control import If
from ..ir.evaluate import ArrayEvaluator
from ..ir.expr import BinOp, Expr, Load, Var
from ..ir.expr import format_expr as fmt
from ..ir.nodes import Buffer, Loop, Region, SignalOp, Stmt
from ..ir.tile_ops import (
    AtomicElement,
    AtomicKind,
    AtomicRegion,
    CumSum,
    FetchAdd,
    Parallel,
    Reduce,
    ReduceKind,
    Store,
)
from ..ir.values import (
    BOOL,
    FLOAT32,
    FLOAT64,
    Binary,
    BinaryKind,
    Cast,
    ElementRead,
    IndexValue,
    Literal,
    Unary,
    UnaryKind,
    Value,
    ValueCompare,
    ValueSelect,
    compute_dtype,
    is_float,
)
from . import element_maps
from .block import INTERPRET, RunKind
from .memory import AccessKind, ResolvedRegion, where
from .registers import wrap_int

Array = np.ndarray

# ---- conversions (the rules of ir/values.py) ---------------------------------------------------


def to_rep(data: Array, dtype: np.dtype) -> Array:
    """Stored elements of `dtype` as the numbers values compute with (float32 for 16-bit floats,
    int64 for integers). May return `data` itself (values are never changed in place)."""
    return np.asarray(data).astype(compute_dtype(dtype), copy=False)


def convert(x: Array, src: np.dtype, dst: np.dtype) -> Array:
    """A value of type `src` (held in its compute type) as type `dst` (held in dst's compute type)."""
    x = np.asarray(x)
    with np.errstate(all="ignore"):
        if dst == BOOL:
            return x != 0
        if dst.kind in "iu":
            if is_float(src):
                x = np.trunc(x)
            return x.astype(np.int64).astype(dst).astype(np.int64)
        if x.dtype == FLOAT64 and dst != FLOAT64:
            x = x.astype(np.float32)  # conversions to 16-bit floats go through float32, as on the GPU
        if dst in (FLOAT32, FLOAT64):
            return x.astype(dst, copy=False)
        return x.astype(np.float32).astype(dst).astype(np.float32)


def to_storage(x: Array, src: np.dtype, dst: np.dtype) -> Array:
    return convert(x, src, dst).astype(dst, copy=False)


# ---- iteration space, element positions, access logging -----------------------------------------


class _Space:
    """The iterations a statement runs for: `shape` (() outside a Parallel), their ids, and the
    loop variables' values (numpy index arrays, or ints) in `env`."""

    def __init__(self, env: dict[Var, Any], shape: tuple[int, ...], parallel: Parallel | None):
        self.env, self.shape, self.parallel = env, shape, parallel
        self.ids = np.arange(int(np.prod(shape, dtype=np.int64))).reshape(shape)

    def describe(self, lane: int) -> str:
        if self.parallel is None:
            return ""
        coords = np.unravel_index(lane, self.shape)
        return " at iteration (" + ", ".join(f"{fmt(v)}={int(c)}" for v, c in zip(self.parallel.vars, coords)) + ")"


def _rectangles(shape: tuple[int, ...], coords: tuple[Array, ...]) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """The fewest (by splitting along leading dimensions) rectangles covering exactly the distinct
    elements at `coords` (1-D arrays, one per dimension)."""
    if coords[0].size == 0:
        return []
    lo = tuple(int(c.min()) for c in coords)
    sizes = tuple(int(c.max()) - a + 1 for c, a in zip(coords, lo))
    flat = np.ravel_multi_index(tuple(c - a for c, a in zip(coords, lo)), sizes)
    if np.unique(flat).size == int(np.prod(sizes)):
        return [(lo, sizes)]
    if len(shape) == 1:  # scattered elements of a vector: one run per maximal consecutive stretch
        u = np.unique(coords[0])
        breaks = np.flatnonzero(np.diff(u) != 1) + 1
        return [((int(r[0]),), (int(r[-1] - r[0] + 1),)) for r in np.split(u, breaks)]
    out = []
    for row in np.unique(coords[0]):
        sel = coords[0] == row
        for starts, sz in _rectangles(shape[1:], tuple(c[sel] for c in coords[1:])):
            out.append(((int(row), *starts), (1, *sz)))
    return out


class _IterationLog:
    """The elements each iteration of one Parallel touched, to find iterations that race."""

    def __init__(self) -> None:
        # Per buffer, in program order: (flat element indices, iteration ids, kind, stmt), or for a
        # rectangle access (element_maps) (its RectMap, None, kind, stmt), expanded only if needed.
        self.records: dict[Buffer, list[tuple[Any, Any, int, Stmt]]] = {}

    def add(self, buffer: Buffer, flat: Array, ids: Array, kind: int, stmt: Stmt) -> None:
        self.records.setdefault(buffer, []).append((flat, ids, kind, stmt))

    def add_map(self, buffer: Buffer, rect: element_maps.RectMap, kind: int, stmt: Stmt) -> None:
        self.records.setdefault(buffer, []).append((rect, None, kind, stmt))

    @staticmethod
    def _may_meet(recs: list[tuple[Any, Any, int, Stmt]]) -> bool:
        """Whether two iterations may touch one element, one writing it: not when nothing writes,
        nor when every access is a rectangle map sending each iteration to its own element, the
        same map for all."""
        if all(kind == _READ for _, _, kind, _ in recs):
            return False
        if all(ids is None for _, ids, _, _ in recs):
            first = recs[0][0]
            return not all(rect.injective() and rect.same_elements_as(first) for rect, _, _, _ in recs)
        return True

    def check(self, ctx: Any, space: _Space) -> None:
        for buf in list(self.records):
            recs = self.records[buf]
            if not self._may_meet(recs):
                del self.records[buf]
                continue
            self.records[buf] = [
                (np.ravel_multi_index(r.coordinates(), buf.shape), space.ids[r.box_index()].reshape(-1), kind, stmt)
                if ids is None else (r, ids, kind, stmt)
                for r, ids, kind, stmt in recs
            ]
        for buf, recs in self.records.items():
            flat = np.concatenate([r[0] for r in recs])
            ids = np.concatenate([r[1] for r in recs])
            kinds = np.concatenate([np.full(r[0].size, r[2], np.int8) for r in recs])
            which = np.concatenate([np.full(r[0].size, i) for i, r in enumerate(recs)])
            u, inv = np.unique(flat, return_inverse=True)
            lo = np.full(u.size, np.iinfo(np.int64).max)
            hi = np.full(u.size, -1)
            np.minimum.at(lo, inv, ids)
            np.maximum.at(hi, inv, ids)
            writes, atomics, plain = (np.zeros(u.size, bool) for _ in range(3))
            np.logical_or.at(writes, inv, kinds == _WRITE)
            np.logical_or.at(atomics, inv, kinds == _ATOMIC)
            np.logical_or.at(plain, inv, kinds != _ATOMIC)
            bad = (lo != hi) & (writes | (atomics & plain))
            if bad.any():
                e = int(np.argmax(bad))
                members = np.flatnonzero(inv == e)
                a = members[0]
                b = next(m for m in members if ids[m] != ids[a])
                element = ", ".join(str(int(c)) for c in np.unravel_index(int(u[e]), buf.shape))
                names = {_READ: "reads", _WRITE: "writes", _ATOMIC: "updates atomically"}
                raise RaceError(
                    f"data race in the T.Parallel at {space.parallel.loc}: {buf.name}[{element}] "
                    f"(a {buf.kind.value} buffer of PE {ctx.pe}, block {ctx.block}) is touched by two iterations, "
                    f"one writing it: {recs[which[a]][3].op_name} at {recs[which[a]][3].loc} "
                    f"{names[int(kinds[a])]} it{space.describe(int(ids[a]))}, {recs[which[b]][3].op_name} at "
                    f"{recs[which[b]][3].loc} {names[int(kinds[b])]} it{space.describe(int(ids[b]))}. Iterations run "
                    "on different threads in no order; reduce with T.reduce_* or T.atomic_*, or give each "
                    "iteration its own elements. (InterpretOptions(detect_races=False) turns this check off.)"
                )


_READ, _WRITE, _ATOMIC = 0, 1, 2


class _Eval:
    """Evaluates index expressions and values of one statement over an iteration space."""

    def __init__(self, ctx: Any, stmt: Stmt, space: _Space, log: _IterationLog | None):
        self.ctx, self.stmt, self.space, self.log = ctx, stmt, space, log
        self._index = ArrayEvaluator(space.env, load=self._load, zero_division=self._zero_division)

    def fail(self, message: str, active: Array) -> KernelRuntimeError:
        lane = int(np.flatnonzero(np.broadcast_to(active, self.space.shape).reshape(-1))[0]) if self.space.shape \
            else 0
        return KernelRuntimeError(f"{self.stmt.op_name}: {message}{self.space.describe(lane)} "
                                  f"{where(self.ctx.pe, self.ctx.block, self.stmt.loc)}")

    # -- index expressions (int64 arrays, Python semantics: ir/evaluate.py) --

    def index(self, e: Expr, active: Array) -> Array:
        return self._index(e, active)

    def _zero_division(self, e: BinOp, lanes: Array) -> None:
        raise self.fail(f"integer {e.op.value} by zero in `{fmt(e)}`", lanes)

    def _load(self, e: Load, active: Array) -> Array:
        if not self.space.shape:  # one element: the block's own T.load path (registers included)
            indices = tuple(int(self.index(i, active)) for i in e.indices)
            return np.int64(self.ctx.load(e, indices, self.stmt))
        return to_rep(self.elements(Region(e.buffer, e.indices, (1,) * len(e.indices)), active, _READ), e.buffer.dtype)

    # -- element access --

    def positions(self, region: Region, active: Array, raw: list[Array] | None = None) -> tuple[Array, ...]:
        """The element coordinates `region` (one element) names for each iteration, bounds-checked
        for the active ones (inactive ones are clamped in); `raw`: its indices, if evaluated."""
        buf = region.buffer
        coords = []
        for dim, (start, extent) in enumerate(zip(region.starts, buf.shape)):
            i = np.broadcast_to(self.index(start, active) if raw is None else raw[dim], self.space.shape)
            bad = active & ((i < 0) | (i >= extent))
            if np.any(bad):
                value = int(np.asarray(i)[np.unravel_index(int(np.argmax(bad)), self.space.shape)])
                element = f"{buf.name}[{', '.join(fmt(s) for s in region.starts)}]"
                raise self.fail(f"out-of-bounds element {element}: the index `{fmt(start)}` along dimension {dim} is "
                                f"{value}, outside [0, {extent})", bad)
            coords.append(np.clip(i, 0, extent - 1))
        return tuple(coords)

    def elements(self, region: Region, active: Array, kind: int, update: Callable[[Array, Array], Array] | None = None,
                 data: Array | None = None) -> Array:
        """Reads (kind _READ: returns the stored elements over the space), writes `data`, or
        applies `update(old, lanes)` to the active elements (atomics), through memory accesses of
        exactly the elements touched."""
        buf = region.buffer
        raw = None
        if self.space.parallel is not None and kind != _ATOMIC:
            raw = [self.index(start, active) for start in region.starts]
            box = element_maps.active_box(active, self.space.shape)
            rect = element_maps.rect_map(raw, box, buf.shape) if box is not None else None
            if rect is not None and (kind == _READ or rect.injective()):
                return self._rect_elements(rect, buf, kind, data)
        active = np.broadcast_to(active, self.space.shape)
        coords = self.positions(region, active, raw)
        act = active.reshape(-1)
        sel = tuple(c.reshape(-1)[act] for c in coords)
        rects = _rectangles(buf.shape, sel) if sel[0].size else []
        access = {_READ: AccessKind.READ, _WRITE: AccessKind.WRITE, _ATOMIC: AccessKind.ATOMIC}[kind]
        views = [(starts, sizes, self._access(access, buf, starts, sizes)) for starts, sizes in rects]
        if self.log is not None and sel[0].size and self.space.parallel is not None:
            flat = np.ravel_multi_index(sel, buf.shape)
            self.log.add(buf, flat, self.space.ids.reshape(-1)[act], kind, self.stmt)
        if not views:
            return np.zeros(self.space.shape, buf.dtype)
        lo = tuple(min(v[0][d] for v in views) for d in range(len(buf.shape)))
        hi = tuple(max(v[0][d] + v[1][d] for v in views) for d in range(len(buf.shape)))
        box = np.zeros(tuple(b - a for a, b in zip(lo, hi)), buf.dtype)
        for starts, sizes, view in views:
            box[tuple(slice(s - a, s - a + n) for s, a, n in zip(starts, lo, sizes))] = view
        local = tuple(np.clip(c - a, 0, n - 1) for c, a, n in zip(coords, lo, box.shape))
        if kind == _READ:
            return box[local]
        if kind == _WRITE:
            box[tuple(c.reshape(-1)[act] for c in local)] = np.broadcast_to(data, self.space.shape).reshape(-1)[act]
        else:
            _apply_in_order(box, np.ravel_multi_index(tuple(c.reshape(-1)[act] for c in local), box.shape),
                            np.broadcast_to(data, self.space.shape).reshape(-1)[act], update)
        for starts, sizes, view in views:
            view[...] = box[tuple(slice(s - a, s - a + n) for s, a, n in zip(starts, lo, sizes))]
        return box

    def _rect_elements(self, rect: element_maps.RectMap, buf: Buffer, kind: int, data: Array | None) -> Array:
        """`elements` over a rectangle (element_maps): one access, one numpy operation; a read
        returns a view of memory over the space's axes (callers convert it, which copies)."""
        view = self._access(AccessKind.READ if kind == _READ else AccessKind.WRITE, buf, rect.starts, rect.sizes)
        if self.log is not None:
            self.log.add_map(buf, rect, kind, self.stmt)
        shape = self.space.shape
        full = all(lo == 0 and hi == n for (lo, hi), n in zip(rect.box, shape))
        if kind == _READ:
            if full:
                return np.broadcast_to(rect.to_space(view), shape)
            out = np.zeros(shape, buf.dtype)
            out[rect.box_index()] = rect.to_space(view)
            return out
        values = np.broadcast_to(data, shape)
        view[...] = rect.from_space(values if full else values[rect.box_index()])
        return view

    def _access(self, kind: AccessKind, buf: Buffer, starts: tuple[int, ...], sizes: tuple[int, ...]) -> Array:
        ctx = self.ctx
        return ctx.world.memory.access(ctx.access(kind, ResolvedRegion(buf, starts, sizes), self.stmt))

    # -- values (held in their compute type) --

    def value(self, v: Value, active: Array) -> Array:
        rule = _VALUE_RULES.get(type(v))
        if rule is None:
            raise KernelRuntimeError(f"internal: no interpreter rule for the value {type(v).__name__}")
        with np.errstate(all="ignore"):
            return rule(self, v, active)


def _apply_in_order(box: Array, flat: Array, values: Array, update: Callable[[Array, Array], Array]) -> None:
    """`box.flat[flat[k]] = update(old, values[k])` for k in order: elements hit several times are
    updated once per hit, in iteration order (rounds of one hit per element)."""
    order = np.argsort(flat, kind="stable")
    f, vals = flat[order], values[order]
    first = np.r_[0, np.flatnonzero(f[1:] != f[:-1]) + 1] if f.size else np.zeros(0, np.int64)
    rank = np.arange(f.size) - np.repeat(first, np.diff(np.r_[first, f.size]))
    flat_box = box.reshape(-1)
    for r in range(int(rank.max()) + 1 if f.size else 0):
        hit = rank == r
        flat_box[f[hit]] = update(flat_box[f[hit]], vals[hit])


_CMP_OPS = {"==": np.equal, "!=": np.not_equal, "<": np.less, "<=": np.less_equal, ">": np.greater,
            ">=": np.greater_equal}
_BINARY_OPS: dict[BinaryKind, Callable[[Array, Array], Array]] = {
    BinaryKind.ADD: np.add, BinaryKind.SUB: np.subtract, BinaryKind.MUL: np.multiply, BinaryKind.DIV: np.divide,
    BinaryKind.MAX: np.maximum, BinaryKind.MIN: np.minimum, BinaryKind.AND: np.logical_and,
    BinaryKind.OR: np.logical_or,
}
_UNARY_OPS: dict[UnaryKind, Callable[[Array], Array]] = {
    UnaryKind.NEG: np.negative, UnaryKind.ABS: np.abs, UnaryKind.EXP: np.exp, UnaryKind.EXP2: np.exp2,
    UnaryKind.LOG: np.log, UnaryKind.NOT: np.logical_not,
}


def _operand(ev: _Eval, v: Value, to: np.dtype, active: Array) -> Array:
    return convert(ev.value(v, active), compute_dtype(v.dtype), compute_dtype(to))


def _select(ev: _Eval, v: ValueSelect, active: Array) -> Array:
    c = ev.value(v.cond, active)
    return np.where(c, _operand(ev, v.if_true, v.dtype, active & c), _operand(ev, v.if_false, v.dtype, active & ~c))


_VALUE_RULES: dict[type, Callable[[_Eval, Any, Array], Array]] = {
    Literal: lambda ev, v, a: np.asarray(v.value).astype(compute_dtype(v.dtype)),
    IndexValue: lambda ev, v, a: (ev.index(v.expr, a) != 0) if v.dtype == BOOL else ev.index(v.expr, a),
    ElementRead: lambda ev, v, a: to_rep(ev.elements(v.region, a, _READ), v.dtype),
    Unary: lambda ev, v, a: _UNARY_OPS[v.op](_operand(ev, v.x, v.dtype, a)),
    Binary: lambda ev, v, a: _BINARY_OPS[v.op](_operand(ev, v.lhs, v.dtype, a), _operand(ev, v.rhs, v.dtype, a)),
    ValueCompare: lambda ev, v, a: _CMP_OPS[v.cmp.value](_operand(ev, v.lhs, v.operand_dtype, a),
                                                         _operand(ev, v.rhs, v.operand_dtype, a)),
    ValueSelect: _select,
    Cast: lambda ev, v, a: convert(ev.value(v.x, a), compute_dtype(v.x.dtype), v.dtype),
}


# ---- statements --------------------------------------------------------------------------------

_ATOMIC_OPS: dict[AtomicKind, Callable[[Array, Array], Array]] = {
    AtomicKind.ADD: np.add, AtomicKind.MAX: np.maximum, AtomicKind.MIN: np.minimum,
}


def _atomic_update(kind: AtomicKind, dtype: np.dtype) -> Callable[[Array, Array], Array]:
    """old (stored) and value (already dtype's compute form) -> new stored elements."""
    op, rep = _ATOMIC_OPS[kind], compute_dtype(dtype)

    def update(old: Array, value: Array) -> Array:
        with np.errstate(all="ignore"):
            return to_storage(op(to_rep(old, dtype), value), rep, dtype)

    return update


def run_iterations(ctx: Any, body: tuple[Stmt, ...], space: _Space, log: _IterationLog | None,
                   active: Array | None = None) -> None:
    """Runs `body` (statements of a Parallel body, or an element statement at block level) for
    the `active` iterations of `space` (all when None), in program order, with the ITERATION
    rules."""
    if active is None:
        active = np.ones(space.shape, bool)
    for s in body:
        INTERPRET.lookup(s, RunKind.ITERATION)(ctx, s, space, log, active)


@INTERPRET.register(Loop, kind=RunKind.ITERATION)
def _loop_iterations(ctx: Any, s: Loop, space: _Space, log: _IterationLog | None, active: Array) -> None:
    for i in range(s.extent):
        space.env[s.var] = i
        run_iterations(ctx, s.body, space, log, active)
    del space.env[s.var]


@INTERPRET.register(If, kind=RunKind.ITERATION)
def _if_iterations(ctx: Any, s: If, space: _Space, log: _IterationLog | None, active: Array) -> None:
    """An if splits the iterations by its condition, each side running for its own (the then
    side first; iterations are independent, so that is the order of running them one by one)."""
    taken = active & np.broadcast_to(_condition(_Eval(ctx, s, space, log), s.cond, active), space.shape)
    for body, lanes in ((s.then_body, taken), (s.else_body, active & ~taken)):
        if body and lanes.any():
            run_iterations(ctx, body, space, log, lanes)


@INTERPRET.register(Store, kind=RunKind.ITERATION)
def _store_iterations(ctx: Any, s: Store, space: _Space, log: _IterationLog | None, active: Array) -> None:
    ev = _Eval(ctx, s, space, log)
    value = ev.value(s.value, active)
    ev.elements(s.dst, active, _WRITE, data=to_storage(value, compute_dtype(s.value.dtype), s.dst.buffer.dtype))


@INTERPRET.register(AtomicElement, kind=RunKind.ITERATION)
def _atomic_iterations(ctx: Any, s: AtomicElement, space: _Space, log: _IterationLog | None, active: Array) -> None:
    ev = _Eval(ctx, s, space, log)
    dtype = s.dst.buffer.dtype
    value = convert(ev.value(s.value, active), compute_dtype(s.value.dtype), dtype)
    ev.elements(s.dst, active, _ATOMIC, update=_atomic_update(s.op, dtype), data=value)


def _condition(ev: _Eval, cond: Expr | Value, active: Array) -> Array:
    """An if's condition (an index condition or a bool value) at the active iterations."""
    if isinstance(cond, Value):
        return np.asarray(ev.value(cond, active), bool)
    return np.asarray(ev.index(cond, active)) != 0


def block_condition(ctx: Any, s: If) -> bool:
    """An if's element-value condition evaluated once, at block level (the current thread, if
    any, bound in ctx.env): its reads are block accesses, as a once-per-block store's are."""
    ev = _Eval(ctx, s, _Space(dict(ctx.env), (), None), None)
    return bool(_condition(ev, s.cond, np.True_))


@INTERPRET.register(Parallel)
def _parallel(ctx: Any, s: Parallel) -> None:
    rank = len(s.extents)
    env: dict[Var, Any] = dict(ctx.env)
    for k, (var, extent) in enumerate(zip(s.vars, s.extents)):
        env[var] = np.arange(extent, dtype=np.int64).reshape((1,) * k + (extent,) + (1,) * (rank - k - 1))
    space = _Space(env, s.extents, s)
    log = _IterationLog() if ctx.world.options.detect_races else None
    run_iterations(ctx, s.body, space, log)
    if log is not None:
        log.check(ctx, space)


@INTERPRET.register(Store, AtomicElement)
def _once(ctx: Any, s: Stmt) -> None:
    """An element store or atomic outside a Parallel: once for the block."""
    run_iterations(ctx, (s,), _Space(dict(ctx.env), (), None), None)


@INTERPRET.register(Reduce)
def _reduce(ctx: Any, s: Reduce) -> None:
    acc = s.acc_dtype
    data = convert(to_rep(ctx.read(ctx.resolve(s.src, "src", s), s), s.src.buffer.dtype),
                   compute_dtype(s.src.buffer.dtype), acc)
    with np.errstate(all="ignore"):
        if s.kind is ReduceKind.SUM:
            out = np.sum(data, axis=s.dim, dtype=acc)
        else:
            if s.kind is ReduceKind.ABSMAX:
                data = np.abs(data)
            out = (np.min if s.kind is ReduceKind.MIN else np.max)(data, axis=s.dim)
        dst = ctx.resolve(s.dst, "dst", s)
        if not s.clear:
            old = convert(to_rep(ctx.read(dst, s), s.dst.buffer.dtype), compute_dtype(s.dst.buffer.dtype), acc)
            combine = {ReduceKind.SUM: np.add, ReduceKind.MIN: np.minimum}.get(s.kind, np.maximum)
            out = combine(old.reshape(out.shape), out)
    ctx.write(dst, to_storage(out, acc, s.dst.buffer.dtype).reshape(dst.sizes), s)


@INTERPRET.register(CumSum)
def _cumsum(ctx: Any, s: CumSum) -> None:
    """Sequential sums along `dim` in the accumulation type (numpy's cumsum adds in order), each
    prefix rounded to dst's dtype."""
    acc = s.acc_dtype
    data = convert(to_rep(ctx.read(ctx.resolve(s.src, "src", s), s), s.src.buffer.dtype),
                   compute_dtype(s.src.buffer.dtype), acc)
    with np.errstate(all="ignore"):
        if s.reverse:
            out = np.flip(np.cumsum(np.flip(data, axis=s.dim), axis=s.dim, dtype=acc), axis=s.dim)
        else:
            out = np.cumsum(data, axis=s.dim, dtype=acc)
    dst = ctx.resolve(s.dst, "dst", s)
    ctx.write(dst, to_storage(out, acc, s.dst.buffer.dtype).reshape(dst.sizes), s)


@INTERPRET.register(FetchAdd)
def _fetch_add(ctx: Any, s: FetchAdd) -> None:
    """The block's ticket: acquire what earlier fetch_adds on the word released (the race clocks'
    word, as a signal wait does), update the word atomically, release the block's own clock into
    it (a read-modify-write continues the release sequence: the last block acquires every earlier
    one's), and write the old value to `prev`."""
    word = ctx.resolve(s.word, "word", s)
    value = ctx.eval(s.value, "the value", s)
    race = ctx.world.race
    agent = race.block_agent(ctx.pe, ctx.block)
    race.sync_from(agent, ctx.pe, word)
    view = ctx.world.memory.access(ctx.access(AccessKind.ATOMIC, word, s))
    dtype = s.word.buffer.dtype
    old = int(view.reshape(-1)[0])
    view[...] = wrap_int(old + value, dtype)
    race.sync_to(agent, ctx.pe, word, SignalOp.ADD)
    ctx.write(ctx.resolve(s.prev, "prev", s), np.full((1,) * len(s.prev.starts), old, dtype), s)


@INTERPRET.register(AtomicRegion)
def _atomic_region(ctx: Any, s: AtomicRegion) -> None:
    dtype = s.dst.buffer.dtype
    src = ctx.read(ctx.resolve(s.src, "src", s), s)
    value = convert(to_rep(src, s.src.buffer.dtype), compute_dtype(s.src.buffer.dtype), dtype)
    dst = ctx.resolve(s.dst, "dst", s)
    view = ctx.world.memory.access(ctx.access(AccessKind.ATOMIC, dst, s))
    view[...] = _atomic_update(s.op, dtype)(view, value.reshape(view.shape))
