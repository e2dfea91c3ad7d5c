"""Integer index expressions of the kernel IR.

Kernels compute addresses and peer numbers from a few run-time values (block index, PE) with
Python operators; tracing turns those operators into these immutable nodes. Everything here is
pure data plus small analyses (constant folding, affine form, value range) that the verifier,
the interpreter and the code generator share.
"""

from __future__ import annotations

import enum
import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Union

if TYPE_CHECKING:
    from .nodes import Buffer

IntLike = Union["Expr", int]
# Reads one element of a kernel input for `Load` (interpreter): (the load, its indices) -> value.
Loader = Callable[["Load", tuple[int, ...]], int]


class VarKind(enum.Enum):
    """Run-time scalars a kernel can read."""

    PROGRAM_ID = "program_id"  # block index along a grid axis
    PE = "pe"  # this device's index in the kernel's PE space
    LOOP = "loop"  # the index of a `T.serial`/`T.Pipelined` loop (`axis` holds its unique id)


class BinOpKind(enum.Enum):
    ADD = "+"
    SUB = "-"
    MUL = "*"
    FLOORDIV = "//"  # Python semantics (rounds towards -inf)
    MOD = "%"  # Python semantics (sign of the divisor)
    MIN = "min"
    MAX = "max"


_PY_OPS: dict[BinOpKind, Callable[[int, int], int]] = {
    BinOpKind.ADD: operator.add,
    BinOpKind.SUB: operator.sub,
    BinOpKind.MUL: operator.mul,
    BinOpKind.FLOORDIV: operator.floordiv,
    BinOpKind.MOD: operator.mod,
    BinOpKind.MIN: min,
    BinOpKind.MAX: max,
}


def apply_binop(op: BinOpKind, a: int, b: int) -> int:
    """Python-semantics integer operation (the meaning every backend must reproduce)."""
    if op in (BinOpKind.FLOORDIV, BinOpKind.MOD) and b == 0:
        raise ZeroDivisionError(f"integer {op.value} by zero in a kernel index expression")
    return _PY_OPS[op](a, b)


class Expr:
    """Base of all index expressions; Python operators build new nodes."""

    __slots__ = ()

    def __add__(self, other: IntLike) -> Expr:
        return binop(BinOpKind.ADD, self, other)

    def __radd__(self, other: IntLike) -> Expr:
        return binop(BinOpKind.ADD, other, self)

    def __sub__(self, other: IntLike) -> Expr:
        return binop(BinOpKind.SUB, self, other)

    def __rsub__(self, other: IntLike) -> Expr:
        return binop(BinOpKind.SUB, other, self)

    def __mul__(self, other: IntLike) -> Expr:
        return binop(BinOpKind.MUL, self, other)

    def __rmul__(self, other: IntLike) -> Expr:
        return binop(BinOpKind.MUL, other, self)

    def __floordiv__(self, other: IntLike) -> Expr:
        return binop(BinOpKind.FLOORDIV, self, other)

    def __rfloordiv__(self, other: IntLike) -> Expr:
        return binop(BinOpKind.FLOORDIV, other, self)

    def __mod__(self, other: IntLike) -> Expr:
        return binop(BinOpKind.MOD, self, other)

    def __rmod__(self, other: IntLike) -> Expr:
        return binop(BinOpKind.MOD, other, self)

    def __neg__(self) -> Expr:
        return binop(BinOpKind.SUB, 0, self)

    def __index__(self) -> int:
        value = static_value(self)
        if value is None:
            raise TypeError(
                f"the kernel value `{format_expr(self)}` is only known when the kernel runs; "
                "it cannot be used where Python needs a plain int (a shape, a range, an `if`)"
            )
        return value

    def __bool__(self) -> bool:
        raise TypeError(
            f"`{format_expr(self)}` is a kernel value known only at run time; Python `if`/`and`/`or` "
            "on it is not supported yet"
        )

    # Comparisons would need a boolean expression type; they arrive with control flow.
    __hash__ = object.__hash__


@dataclass(frozen=True, eq=True)
class Const(Expr):
    value: int

    def __post_init__(self) -> None:
        if not isinstance(self.value, int) or isinstance(self.value, bool):
            raise TypeError(f"index constants must be int, got {self.value!r}")


@dataclass(frozen=True, eq=True)
class Var(Expr):
    kind: VarKind
    axis: int = 0  # grid axis for PROGRAM_ID; the loop's unique id for LOOP


@dataclass(frozen=True, eq=True)
class BinOp(Expr):
    op: BinOpKind
    lhs: Expr
    rhs: Expr


@dataclass(frozen=True, eq=True)
class Load(Expr):
    """One element of a kernel input, read when the expression is evaluated (`T.load(ref[i])`).

    Only inputs can be loaded: they never change while the kernel runs, so the value does not
    depend on when a backend evaluates the expression (the code generator may compute it once
    per statement, the interpreter whenever it resolves a region). Indices are checked against
    the buffer's extents (statically where affine, else when the kernel runs).
    """

    buffer: Buffer
    indices: tuple[Expr, ...]


def as_expr(value: IntLike | Any) -> Expr:
    if isinstance(value, Expr):
        return value
    # Objects that stand for a kernel value (a one-element slice of an integer input) say so.
    convert = getattr(value, "__tilescale_expr__", None)
    if convert is not None:
        return convert()
    if isinstance(value, bool) or not isinstance(value, int):
        try:
            value = operator.index(value)
        except TypeError:
            raise TypeError(f"expected an int or a kernel index expression, got {value!r}") from None
    return Const(int(value))


def binop(op: BinOpKind, a: IntLike, b: IntLike) -> Expr:
    """Builds `a op b`, folding constants and the neutral elements."""
    a, b = as_expr(a), as_expr(b)
    if isinstance(a, Const) and isinstance(b, Const):
        return Const(apply_binop(op, a.value, b.value))
    if op is BinOpKind.ADD:
        if a == Const(0):
            return b
        if b == Const(0):
            return a
    if op is BinOpKind.SUB and b == Const(0):
        return a
    if op is BinOpKind.MUL:
        if Const(0) in (a, b):
            return Const(0)
        if a == Const(1):
            return b
        if b == Const(1):
            return a
    if op is BinOpKind.FLOORDIV and b == Const(1):
        return a
    return BinOp(op, a, b)


def static_value(e: Expr) -> int | None:
    """The value of `e` when it does not depend on run-time variables."""
    if isinstance(e, Const):
        return e.value
    affine = affine_form(e)
    if affine is not None and not affine[0]:
        return affine[1]
    return None


def affine_form(e: Expr) -> tuple[dict[Expr, int], int] | None:
    """`e` as sum(coeff * atom) + const, or None. Non-linear sub-terms are atoms."""
    if isinstance(e, Const):
        return {}, e.value
    if isinstance(e, BinOp) and e.op in (BinOpKind.ADD, BinOpKind.SUB):
        la, ra = affine_form(e.lhs), affine_form(e.rhs)
        if la is None or ra is None:
            return None
        sign = 1 if e.op is BinOpKind.ADD else -1
        terms = dict(la[0])
        for atom, c in ra[0].items():
            terms[atom] = terms.get(atom, 0) + sign * c
        return {a: c for a, c in terms.items() if c != 0}, la[1] + sign * ra[1]
    if isinstance(e, BinOp) and e.op is BinOpKind.MUL:
        la, ra = affine_form(e.lhs), affine_form(e.rhs)
        if la is not None and ra is not None:
            if not la[0]:
                k = la[1]
                return {a: c * k for a, c in ra[0].items() if c * k}, ra[1] * k
            if not ra[0]:
                k = ra[1]
                return {a: c * k for a, c in la[0].items() if c * k}, la[1] * k
    return {e: 1}, 0


def variables(e: Expr) -> frozenset[Var]:
    if isinstance(e, Var):
        return frozenset([e])
    if isinstance(e, BinOp):
        return variables(e.lhs) | variables(e.rhs)
    if isinstance(e, Load):
        return frozenset().union(*(variables(i) for i in e.indices))
    return frozenset()


def loads(e: Expr) -> list[Load]:
    """Every `Load` in `e`, outermost first (a load's indices may hold loads)."""
    if isinstance(e, BinOp):
        return loads(e.lhs) + loads(e.rhs)
    if isinstance(e, Load):
        return [e] + [inner for i in e.indices for inner in loads(i)]
    return []


def evaluate(e: Expr, env: dict[Var, int], load: Loader | None = None) -> int:
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
    raise TypeError(f"not an index expression: {e!r}")


def value_range(e: Expr, ranges: dict[Var, tuple[int, int]]) -> tuple[int, int] | None:
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


def format_expr(e: Expr) -> str:
    if isinstance(e, Const):
        return str(e.value)
    if isinstance(e, Var):
        if e.kind is VarKind.PROGRAM_ID:
            return f"program_id({e.axis})"
        return f"i{e.axis}" if e.kind is VarKind.LOOP else e.kind.value
    if isinstance(e, BinOp):
        if e.op in (BinOpKind.MIN, BinOpKind.MAX):
            return f"{e.op.value}({format_expr(e.lhs)}, {format_expr(e.rhs)})"
        return f"({format_expr(e.lhs)} {e.op.value} {format_expr(e.rhs)})"
    if isinstance(e, Load):
        return f"{e.buffer.name}[{', '.join(format_expr(i) for i in e.indices)}]"
    return repr(e)


def expr_min(a: IntLike, b: IntLike) -> Expr:
    return binop(BinOpKind.MIN, a, b)


def expr_max(a: IntLike, b: IntLike) -> Expr:
    return binop(BinOpKind.MAX, a, b)
