"""Evaluating index expressions: at one point (Python ints) or at many points at once (numpy).

The one place that gives index expressions their values, with the meaning every backend must
reproduce (Python's `//` and `%`, 0/1 conditions, `and`/`or` and `if_then_else` evaluating only
what decides):

- `evaluate(e, env, load)`: exact Python integers at one point (the interpreter's statements,
  the verifier's narrowing of a variable's range);
- `ArrayEvaluator`: int64 numpy arrays over many points at once (the interpreter's `T.Parallel`
  iterations, the verifier's proof that a guarded index stays in bounds, the Hopper GEMM plan's
  check that two blocks load the same tile). Points can be inactive (not run): a division by
  zero counts only where it is active, and the side of an `and`/`or`/`if_then_else` that is not
  taken is evaluated only where it is (a guarded read never happens).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from .expr import (
    COMPARE_OPS,
    BinOp,
    BinOpKind,
    Compare,
    CompareKind,
    Const,
    Expr,
    Load,
    Logic,
    LogicKind,
    Not,
    Select,
    Var,
    apply_binop,
    format_expr,
)

# Reads one element of a kernel input for `Load` (interpreter): (the load, its indices) -> value.
Loader = Callable[[Load, tuple[int, ...]], int]


def evaluate(e: Expr, env: Mapping[Var, int], load: Loader | None = None) -> int:
    """Concrete value of `e` given values of its variables and, for loads, a reader of the
    kernel's inputs (used by the interpreter)."""
    if isinstance(e, Const):
        return e.value
    if isinstance(e, Var):
        return env[e]
    if isinstance(e, BinOp):
        return apply_binop(e.op, evaluate(e.lhs, env, load), evaluate(e.rhs, env, load))
    if isinstance(e, Load):
        if load is None:
            raise TypeError(f"`{format_expr(e)}` reads kernel memory; evaluating it needs a loader")
        return load(e, tuple(evaluate(i, env, load) for i in e.indices))
    rule = _EVAL_RULES.get(type(e))
    if rule is not None:
        return rule(e, lambda sub: evaluate(sub, env, load))
    raise TypeError(f"not an index expression: {e!r}")


def _eval_logic(e: Logic, ev: Callable[[Expr], int]) -> int:
    lhs = ev(e.lhs) != 0
    if e.op is LogicKind.LAND and not lhs:
        return 0
    if e.op is LogicKind.LOR and lhs:
        return 1
    rhs = ev(e.rhs) != 0
    return int(lhs and rhs) if e.op in (LogicKind.AND, LogicKind.LAND) else int(lhs or rhs)


# Conditions are 0/1 ints (Python's bools in arithmetic); `Select` evaluates only the chosen side.
_EVAL_RULES: dict[type, Callable[[Any, Callable[[Expr], int]], int]] = {
    Compare: lambda e, ev: int(COMPARE_OPS[e.op](ev(e.lhs), ev(e.rhs))),
    Logic: _eval_logic,
    Not: lambda e, ev: int(ev(e.operand) == 0),
    Select: lambda e, ev: ev(e.if_true) if ev(e.cond) != 0 else ev(e.if_false),
}


# ---- many points at once ----------------------------------------------------------------------

Array = np.ndarray
# (the load, the points where it is read) -> its values there (broadcasting like the others).
ArrayLoader = Callable[[Load, Array], Array]
# (the `//` or `%`, the active points whose divisor is zero) -> never returns (it raises).
ZeroDivisionHandler = Callable[[BinOp, Array], None]

NP_BINOPS: dict[BinOpKind, Callable[[Array, Array], Array]] = {
    BinOpKind.ADD: np.add, BinOpKind.SUB: np.subtract, BinOpKind.MUL: np.multiply,
    BinOpKind.FLOORDIV: np.floor_divide, BinOpKind.MOD: np.mod,  # numpy rounds as Python does
    BinOpKind.MIN: np.minimum, BinOpKind.MAX: np.maximum,
}
NP_COMPARES: dict[CompareKind, Callable[[Array, Array], Array]] = {
    CompareKind.EQ: np.equal, CompareKind.NE: np.not_equal, CompareKind.LT: np.less,
    CompareKind.LE: np.less_equal, CompareKind.GT: np.greater, CompareKind.GE: np.greater_equal,
}


class Undecided(Exception):
    """The expression has no value here: a variable without values, a load without a reader, or a
    division by zero at an active point without a handler."""


class ArrayEvaluator:
    """Index expressions at every point of `env` (variables -> int64 arrays that broadcast, or
    ints), as int64 arrays (conditions 0/1), int64 wrapping like the generated code.

    `load(e, active)` reads a `Load` at the active points (default: undecided). A `//` or `%` by
    zero at an active point calls `zero_division(e, points)`, which raises (default: undecided);
    at inactive points the divisor is taken as 1 (their value is never used)."""

    def __init__(self, env: Mapping[Var, Any], load: ArrayLoader | None = None,
                 zero_division: ZeroDivisionHandler | None = None):
        self.env, self.load, self.zero_division = env, load, zero_division

    def __call__(self, e: Expr, active: Array | np.bool_ = np.True_) -> Array:
        with np.errstate(all="ignore"):
            return self._eval(e, active)

    def _eval(self, e: Expr, active: Array | np.bool_) -> Array:
        if isinstance(e, Const):
            return np.int64(e.value)
        if isinstance(e, Var):
            if e not in self.env:
                raise Undecided(f"no values of {format_expr(e)}")
            return np.asarray(self.env[e], np.int64)
        if isinstance(e, BinOp):
            a, b = self._eval(e.lhs, active), self._eval(e.rhs, active)
            if e.op in (BinOpKind.FLOORDIV, BinOpKind.MOD):
                zero = active & (b == 0)
                if np.any(zero):
                    if self.zero_division is None:
                        raise Undecided(f"{format_expr(e)} divides by zero")
                    self.zero_division(e, zero)
                b = np.where(b == 0, 1, b)
            return NP_BINOPS[e.op](a, b)
        if isinstance(e, Compare):
            return NP_COMPARES[e.op](self._eval(e.lhs, active), self._eval(e.rhs, active)).astype(np.int64)
        if isinstance(e, Not):
            return (self._eval(e.operand, active) == 0).astype(np.int64)
        if isinstance(e, Logic):
            lhs = self._eval(e.lhs, active) != 0
            if e.op is LogicKind.LAND:  # the right side only where the left one leaves it open
                rhs = self._eval(e.rhs, active & lhs) != 0
            elif e.op is LogicKind.LOR:
                rhs = self._eval(e.rhs, active & ~lhs) != 0
            else:
                rhs = self._eval(e.rhs, active) != 0
            conj = e.op in (LogicKind.AND, LogicKind.LAND)
            return (lhs & rhs if conj else lhs | rhs).astype(np.int64)
        if isinstance(e, Select):
            c = self._eval(e.cond, active) != 0
            return np.where(c, self._eval(e.if_true, active & c), self._eval(e.if_false, active & ~c))
        if isinstance(e, Load):
            if self.load is None:
                raise Undecided(f"{format_expr(e)} reads kernel memory")
            return self.load(e, active)
        raise TypeError(f"not an index expression: {e!r}")


def evaluate_array(e: Expr, env: Mapping[Var, Any]) -> Array | None:
    """`e` at every point of `env` (see `ArrayEvaluator`), or None where it is undecided there (it
    reads memory or a variable `env` lacks, or divides by zero somewhere)."""
    try:
        return ArrayEvaluator(env)(e)
    except Undecided:
        return None
