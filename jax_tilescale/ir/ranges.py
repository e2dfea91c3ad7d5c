"""Value ranges of index expressions: what the verifier proves about indices and PEs.

`value_range` is exact (affine expressions in variables with known ranges) and None otherwise, so
that an error built on it is certain; `value_bounds` is a sound enclosure (interval arithmetic)
for proofs that something stays inside.
"""

from __future__ import annotations

from .expr import BOOLEAN_EXPRS, BinOp, BinOpKind, Const, Expr, Select, Var, affine_form

Ranges = dict[Var, tuple[int, int]]


def value_range(e: Expr, ranges: Ranges) -> tuple[int, int] | None:
    """Exact [lo, hi] of `e` when it is affine in independent variables with known ranges.

    Returns None when the range is not known exactly (non-affine terms), so that callers only
    report errors that are certain.
    """
    form = affine_form(e)
    if form is None:
        return None
    terms, const = form
    lo = hi = const
    for atom, c in terms.items():
        if not isinstance(atom, Var) or atom not in ranges:
            return None
        a_lo, a_hi = ranges[atom]
        lo += min(c * a_lo, c * a_hi)
        hi += max(c * a_lo, c * a_hi)
    return lo, hi


def value_bounds(e: Expr, ranges: Ranges) -> tuple[int, int] | None:
    """[lo, hi] containing every value of `e` (not always the tightest), or None when unknown.

    Exact where `value_range` is (affine expressions); else interval arithmetic through + - *,
    `//` and `%` by positive divisors, min, max, selects and conditions, so that a proof of "this
    index stays inside" (a ragged copy that cannot clip, ir/verify_base.py `overhanging_dims`) also
    covers grouped tile orders such as `pid // (g * n) * g + pid % g`."""
    exact = value_range(e, ranges)
    if exact is not None:
        return exact
    if isinstance(e, Const):
        return e.value, e.value
    if isinstance(e, Var):
        return ranges.get(e)
    if isinstance(e, BOOLEAN_EXPRS):
        return 0, 1
    if isinstance(e, Select):
        a, b = value_bounds(e.if_true, ranges), value_bounds(e.if_false, ranges)
        return None if a is None or b is None else (min(a[0], b[0]), max(a[1], b[1]))
    if not isinstance(e, BinOp):
        return None  # loads: any value of their dtype
    a, b = value_bounds(e.lhs, ranges), value_bounds(e.rhs, ranges)
    if a is None or b is None:
        return None
    if e.op is BinOpKind.ADD:
        return a[0] + b[0], a[1] + b[1]
    if e.op is BinOpKind.SUB:
        return a[0] - b[1], a[1] - b[0]
    if e.op in (BinOpKind.MUL, BinOpKind.MIN, BinOpKind.MAX):
        if e.op is not BinOpKind.MUL:
            pick = min if e.op is BinOpKind.MIN else max
            return pick(a[0], b[0]), pick(a[1], b[1])
        corners = [x * y for x in a for y in b]
        return min(corners), max(corners)
    if b[0] <= 0:  # a divisor that may be zero or negative: not worth bounding
        return None
    if e.op is BinOpKind.FLOORDIV:  # monotone in each operand for positive divisors: the corners
        corners = [x // y for x in a for y in b]
        return min(corners), max(corners)
    if b[0] == b[1] and a[0] // b[0] == a[1] // b[0]:  # MOD, one quotient: no wrap-around
        return a[0] % b[0], a[1] % b[0]
    return 0, (b[1] - 1 if a[0] < 0 else min(a[1], b[1] - 1))
