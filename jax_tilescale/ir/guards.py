"""What holds where a statement runs: narrowing variable ranges by the conditions around it, and
proving bounds under them (the verifier's analyses; the code generator uses the same to skip the
checks the verifier proved unnecessary).

A branch may assume its condition (`known_conditions`): a condition on one variable cuts its range
(`narrowed`: `if j < n:` -> j in [0, n - 1]); conditions on several variables are kept as guards
(`guarded`) and evaluated at every point of their variables' ranges when the ranges alone do not
prove an index in bounds (`guards_keep_in_bounds`).
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from collections.abc import Iterator
from dataclasses import fields

import numpy as np

from .evaluate import evaluate, evaluate_array
from .expr import Compare, Expr, Load, Logic, LogicKind, Select, children, loads, logical_not, variables
from .nodes import Loop, Region, SignalUpdate, Stmt
from .ranges import Ranges
from .values import BOOL, Binary, BinaryKind, ElementRead, IndexValue, Literal, Unary, UnaryKind, Value, ValueSelect
from .values import children as value_children

# Narrowing a variable's range by a condition evaluates it for every value up to this many.
MAX_NARROWING_VALUES = 1 << 16
# A bounds check under enclosing conditions evaluates them at every point of their variables'
# ranges, up to this many points (numpy, a few milliseconds).
MAX_GUARD_POINTS = 1 << 20


def _narrow(cond: Expr, ranges: Ranges) -> Ranges | None:
    """`ranges` with the range of the condition's one variable cut to the values that satisfy it
    (by evaluation: `tx < 4` -> tx in [0, 3]); None when that does not apply (several variables,
    loads, too many values, nothing satisfies it). `&` / `and` narrow by both sides."""
    if isinstance(cond, Logic) and cond.op in (LogicKind.AND, LogicKind.LAND):
        first = _narrow(cond.lhs, ranges)
        base = ranges if first is None else first
        return _narrow(cond.rhs, base) or first
    if not isinstance(cond, (Compare, Logic)) or loads(cond):
        return None
    vs = variables(cond)
    if len(vs) != 1:
        return None
    (v,) = vs
    if v not in ranges:
        return None
    lo, hi = ranges[v]
    if hi - lo + 1 > MAX_NARROWING_VALUES:
        return None
    try:
        ok = [x for x in range(lo, hi + 1) if evaluate(cond, {v: x})]
    except ZeroDivisionError:
        return None
    if not ok:
        return None
    return {**ranges, v: (min(ok), max(ok))}


def known_conditions(cond: Expr | Value, holds: bool) -> list[Expr]:
    """Index conditions that hold wherever `cond` is `holds` (what a branch may assume): the
    condition itself or its negation for an index condition; for an element value, the index
    parts of its conjunction (`(j < n) & (x[i, j] > 0)`, `j < n and x[i, j] > 0` hold -> j < n)
    or of the negated disjunction. Possibly fewer than all (never wrong)."""
    if isinstance(cond, Expr):
        c = cond if holds else logical_not(cond)
        return [] if isinstance(c, bool) else [c]
    if isinstance(cond, IndexValue) and cond.dtype == BOOL:
        return known_conditions(cond.expr, holds)
    if isinstance(cond, Unary) and cond.op is UnaryKind.NOT:
        return known_conditions(cond.x, not holds)
    if isinstance(cond, Binary) and cond.op is (BinaryKind.AND if holds else BinaryKind.OR):
        return known_conditions(cond.lhs, holds) + known_conditions(cond.rhs, holds)
    if isinstance(cond, ValueSelect):  # `a and b` is where(a, b, False), `a or b` is where(a, True, b)
        decided = cond.if_false if holds else cond.if_true
        if isinstance(decided, Literal) and decided.dtype == BOOL and decided.value is (not holds):
            other = cond.if_true if holds else cond.if_false
            return known_conditions(cond.cond, holds) + known_conditions(other, holds)
    return []


def narrowed(conds: list[Expr], ranges: Ranges) -> Ranges:
    """`ranges` cut by every condition of `conds` that narrows one variable (`_narrow`)."""
    for c in conds:
        ranges = _narrow(c, ranges) or ranges
    return ranges


def branch_ranges(cond: Expr | Value, ranges: Ranges) -> tuple[Ranges, Ranges]:
    """The variable ranges inside the `then` and the `else` side of a condition on `cond`."""
    return narrowed(known_conditions(cond, True), ranges), narrowed(known_conditions(cond, False), ranges)


# Index conditions known to hold where the statements being verified run (the enclosing ifs'
# sides, the chosen side of a T.where): a bounds check the ranges alone cannot prove evaluates
# them (`guards_keep_in_bounds`), so `if bx * 16 + i < n: y[bx * 16 + i] = x[bx * 16 + i]` passes.
_GUARDS: contextvars.ContextVar[tuple[Expr, ...]] = contextvars.ContextVar("tilescale_guards", default=())


@contextlib.contextmanager
def guarded(conds: list[Expr]) -> Iterator[None]:
    """The statements verified inside run only where `conds` hold."""
    token = _GUARDS.set((*_GUARDS.get(), *conds))
    try:
        yield
    finally:
        _GUARDS.reset(token)


def guards_keep_in_bounds(start: Expr, size: int, extent: int, ranges: Ranges) -> bool:
    """Whether [start, start + size) may stay in [0, extent) where the enclosing conditions
    (`guarded`) hold: True when it does at every point of the variables' ranges where they hold
    (all evaluated, at most MAX_GUARD_POINTS points), or when a condition on the start's variables
    reads memory (`if j < T.load(n[0]):`, only known when the kernel runs: its run-time checks
    decide, as for any index the verifier cannot evaluate). False without such conditions."""
    own = variables(start)
    guards = [g for g in _GUARDS.get() if variables(g) & own]
    names = sorted(own.union(*(variables(g) for g in guards)), key=repr)
    if not guards or any(v not in ranges for v in own):
        return False
    if any(loads(g) for g in guards):
        return True
    names = [v for v in names if v in ranges]
    guards = [g for g in guards if variables(g) <= set(names)]
    points = math.prod(ranges[v][1] - ranges[v][0] + 1 for v in names)
    if points > MAX_GUARD_POINTS:
        return False
    env = {v: np.arange(ranges[v][0], ranges[v][1] + 1, dtype=np.int64).reshape(
        (1,) * k + (-1,) + (1,) * (len(names) - k - 1)) for k, v in enumerate(names)}
    shape = tuple(ranges[v][1] - ranges[v][0] + 1 for v in names)
    where_run = np.ones(shape, bool)
    for g in guards:
        value = evaluate_array(g, env)
        if value is not None:
            where_run &= np.broadcast_to(value != 0, shape)
    s = evaluate_array(start, env)
    if s is None:
        return False
    s = np.broadcast_to(s, shape)[where_run]
    return s.size == 0 or (int(s.min()) >= 0 and int(s.max()) + size <= extent)


def _expr_loads(e: Expr, known: tuple[Expr, ...]) -> Iterator[tuple[Load, tuple[Expr, ...]]]:
    """Every load in `e` with the conditions known where it is read: `and`/`or` read their right
    side only where the left one leaves it open, `if_then_else` only the chosen side."""
    if isinstance(e, Logic) and e.op in (LogicKind.LAND, LogicKind.LOR):
        yield from _expr_loads(e.lhs, known)
        yield from _expr_loads(e.rhs, (*known, *known_conditions(e.lhs, e.op is LogicKind.LAND)))
        return
    if isinstance(e, Select):
        yield from _expr_loads(e.cond, known)
        yield from _expr_loads(e.if_true, (*known, *known_conditions(e.cond, True)))
        yield from _expr_loads(e.if_false, (*known, *known_conditions(e.cond, False)))
        return
    if isinstance(e, Load):
        yield e, known
    for c in children(e):
        yield from _expr_loads(c, known)


def _value_loads(v: Value, known: tuple[Expr, ...]) -> Iterator[tuple[Load, tuple[Expr, ...]]]:
    if isinstance(v, ValueSelect):
        yield from _value_loads(v.cond, known)
        yield from _value_loads(v.if_true, (*known, *known_conditions(v.cond, True)))
        yield from _value_loads(v.if_false, (*known, *known_conditions(v.cond, False)))
        return
    if isinstance(v, IndexValue):
        yield from _expr_loads(v.expr, known)
    elif isinstance(v, ElementRead):
        for start in v.region.starts:
            yield from _expr_loads(start, known)
    for c in value_children(v):
        yield from _value_loads(c, known)


def guarded_loads(s: Stmt) -> Iterator[tuple[Load, tuple[Expr, ...]]]:
    """The loads of `s` (those of `stmt_exprs(s)`), each with the index conditions known where it
    is read: `if j < n and x[i, j] > 0:` reads x[i, j] only where j < n holds."""
    if isinstance(s, Loop):  # its variable is bound, not read; its body's statements have their own
        return
    for f in fields(s):
        value = getattr(s, f.name)
        if isinstance(value, Value):
            yield from _value_loads(value, ())
        elif isinstance(value, Expr):
            yield from _expr_loads(value, ())
        else:
            regions = [value] if isinstance(value, Region) else [value.word] if isinstance(value, SignalUpdate) else []
            exprs = [e for r in regions for e in r.starts]
            exprs += [value.value] if isinstance(value, SignalUpdate) else []
            for e in exprs:
                yield from _expr_loads(e, ())
