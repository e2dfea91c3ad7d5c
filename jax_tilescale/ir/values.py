"""Typed scalar VALUE expressions of element-wise tile code (`T.Parallel` bodies, element stores).

Index expressions (`expr.py`) are int64 arithmetic on block indices, PEs and loop variables: they
address memory. Values are what is computed from memory: element reads (`A_s[i, j]`), Python
constants, index expressions used as numbers, arithmetic, math functions, comparisons, `T.where`
and `T.cast`. Every value has a dtype, fixed when it is built, by these rules (the interpreter and
the CUDA code generator implement exactly them):

- dtypes: bool, int8..int64, uint8..uint64, float16, bfloat16, float32, float64. An index
  expression used as a value is int64 (a condition such as `i == j` is bool).
- Python constants are weak: an int takes the other operand's type, a float the other operand's
  float type (float32 next to an integer); stored directly, they take the destination's type.
- Arithmetic (`+ - * /`, `T.max`, `T.min`, unary `-`, `T.abs`) computes in float32 when an
  operand is a float of at most 32 bits (float16 and bfloat16 are widened exactly: bf16 * bf16 is
  a float32 product, rounded only when stored or cast), in float64 when one is float64, and in
  int64 (wrapping) when both are integers. `/` needs a float operand. `T.exp`, `T.exp2`, `T.log`
  are float32 (float64 for float64 operands). Booleans take no arithmetic (cast them).
- Comparisons promote like arithmetic and give bool; `&`, `|`, `~` combine bools.
- `T.where(c, a, b)`: the type of `a` and `b` when they agree, else their arithmetic promotion.
  Only the chosen side is evaluated (a guarded read never faults).
- Conversions (`T.cast`, stores, atomics): to float16/bfloat16 round to nearest even (through
  float32); float to int truncates toward zero (then wraps, as a C cast; out-of-range floats and
  NaN give unspecified integers); int to int wraps; to bool is `!= 0`.
- + - * / are IEEE operations rounded to nearest (the CUDA code does not contract them into FMAs),
  so they agree bit for bit between backends; exp/exp2/log agree to a few ulp. `T.max`/`T.min`
  propagate NaN (numpy's maximum), so poison read from memory nobody wrote stays visible.

The IR nodes below are plain frozen dataclasses with structural equality; the builders apply the
type rules and raise TypeError for what they forbid. What user code holds (`TileValue`, with
Python operators) is language/values.py's.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np

from .expr import Const, Expr, as_expr, format_expr, is_condition
from .nodes import Cmp, Region

BOOL = np.dtype(np.bool_)
INT64 = np.dtype(np.int64)
FLOAT16 = np.dtype(np.float16)
BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
FLOAT32 = np.dtype(np.float32)
FLOAT64 = np.dtype(np.float64)
INT_DTYPES = frozenset(np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32,
                                             np.uint64))
FLOAT_DTYPES = frozenset({FLOAT16, BFLOAT16, FLOAT32, FLOAT64})
VALUE_DTYPES = INT_DTYPES | FLOAT_DTYPES | {BOOL}


def as_dtype(dtype: Any) -> np.dtype:
    """A numpy dtype from what users pass (`jnp.float32`, `"bfloat16"`, `np.int32`), checked."""
    if isinstance(dtype, str) and dtype == "bfloat16":
        d = BFLOAT16
    else:
        try:
            d = np.dtype(dtype)
        except TypeError:
            raise TypeError(f"{dtype!r} is not a dtype") from None
    if d not in VALUE_DTYPES:
        raise TypeError(f"{d.name} is not an element type of tile values (bool, intN, uintN, float16, bfloat16, "
                        "float32, float64)")
    return d


def is_float(d: np.dtype) -> bool:
    return d in FLOAT_DTYPES


def compute_dtype(d: np.dtype) -> np.dtype:
    """The type a value of dtype `d` is computed in (and held in, by both backends)."""
    if d == BOOL:
        return BOOL
    if d in INT_DTYPES:
        return INT64
    return FLOAT64 if d == FLOAT64 else FLOAT32


def promote(a: np.dtype, b: np.dtype) -> np.dtype:
    """The arithmetic type of two (non-bool) operands."""
    if is_float(a) or is_float(b):
        return FLOAT64 if FLOAT64 in (a, b) else FLOAT32
    return INT64


# ---- IR nodes --------------------------------------------------------------------------------


class UnaryKind(enum.Enum):
    NEG = "-"
    ABS = "abs"
    EXP = "exp"
    EXP2 = "exp2"
    LOG = "log"
    NOT = "~"


class BinaryKind(enum.Enum):
    ADD = "+"
    SUB = "-"
    MUL = "*"
    DIV = "/"
    MAX = "max"
    MIN = "min"
    AND = "&"
    OR = "|"


ARITH = frozenset({BinaryKind.ADD, BinaryKind.SUB, BinaryKind.MUL, BinaryKind.DIV, BinaryKind.MAX, BinaryKind.MIN})
FLOAT_UNARY = frozenset({UnaryKind.EXP, UnaryKind.EXP2, UnaryKind.LOG})


@dataclass(frozen=True)
class Value:
    """Base of value nodes; every node has a `dtype` (a field, or a property where it follows from
    the operands)."""

    def index_exprs(self) -> list[Expr]:
        """Every index expression inside (read positions, index values); `stmt_exprs` finds them."""
        return index_exprs(self)


@dataclass(frozen=True)
class Literal(Value):
    """A constant. `weak`: a Python number whose type comes from its context (see the module doc)."""

    value: bool | int | float
    dtype: np.dtype
    weak: bool = False


@dataclass(frozen=True)
class IndexValue(Value):
    """An index expression (loop variable, program id, `T.load`, ...) used as a number: int64,
    or bool for a condition (`i == j`)."""

    expr: Expr

    @property
    def dtype(self) -> np.dtype:
        return BOOL if is_condition(self.expr) else INT64


@dataclass(frozen=True)
class ElementRead(Value):
    """One element of a buffer (`A_s[i, j]`): a one-element region."""

    region: Region

    @property
    def dtype(self) -> np.dtype:
        return self.region.buffer.dtype


@dataclass(frozen=True)
class Unary(Value):
    op: UnaryKind
    x: Value
    dtype: np.dtype


@dataclass(frozen=True)
class Binary(Value):
    """`lhs op rhs`, both operands converted to `dtype` first (the compute type)."""

    op: BinaryKind
    lhs: Value
    rhs: Value
    dtype: np.dtype


@dataclass(frozen=True)
class ValueCompare(Value):
    """`lhs cmp rhs`, both converted to `operand_dtype`; bool."""

    cmp: Cmp
    lhs: Value
    rhs: Value
    operand_dtype: np.dtype

    @property
    def dtype(self) -> np.dtype:
        return BOOL


@dataclass(frozen=True)
class ValueSelect(Value):
    """`T.where(cond, a, b)`: `a` where `cond` holds, else `b` (only the chosen side is evaluated)."""

    cond: Value
    if_true: Value
    if_false: Value
    dtype: np.dtype


@dataclass(frozen=True)
class Cast(Value):
    """`T.cast(x, dtype)`: conversion by the rules of the module doc."""

    x: Value
    dtype: np.dtype


def children(v: Value) -> tuple[Value, ...]:
    if isinstance(v, Unary | Cast):
        return (v.x,)
    if isinstance(v, Binary | ValueCompare):
        return (v.lhs, v.rhs)
    if isinstance(v, ValueSelect):
        return (v.cond, v.if_true, v.if_false)
    return ()


def walk(v: Value) -> Iterator[Value]:
    """`v` and every node below it, parents first."""
    yield v
    for c in children(v):
        yield from walk(c)


def index_exprs(v: Value) -> list[Expr]:
    """Every index expression inside `v` (read positions, index values): what the verifier checks."""
    out: list[Expr] = []
    for node in walk(v):
        if isinstance(node, IndexValue):
            out.append(node.expr)
        elif isinstance(node, ElementRead):
            out.extend(node.region.starts)
    return out


def reads(v: Value) -> list[ElementRead]:
    return [n for n in walk(v) if isinstance(n, ElementRead)]


def _is_bool_literal(v: Value, value: bool) -> bool:
    return isinstance(v, Literal) and v.dtype == BOOL and v.value is value


def format_value(v: Value) -> str:
    if isinstance(v, Literal):
        return repr(v.value) if v.weak else f"{v.dtype.name}({v.value!r})"
    if isinstance(v, IndexValue):
        return format_expr(v.expr)
    if isinstance(v, ElementRead):
        return f"{v.region.buffer.name}[{', '.join(format_expr(s) for s in v.region.starts)}]"
    if isinstance(v, Unary):
        if v.op in (UnaryKind.NEG, UnaryKind.NOT):
            return f"{v.op.value}{format_value(v.x)}"
        return f"{v.op.value}({format_value(v.x)})"
    if isinstance(v, Binary):
        if v.op in (BinaryKind.MAX, BinaryKind.MIN):
            return f"{v.op.value}({format_value(v.lhs)}, {format_value(v.rhs)})"
        return f"({format_value(v.lhs)} {v.op.value} {format_value(v.rhs)})"
    if isinstance(v, ValueCompare):
        return f"({format_value(v.lhs)} {v.cmp.value} {format_value(v.rhs)})"
    if isinstance(v, ValueSelect):
        if _is_bool_literal(v.if_false, False):  # what `a and b` builds (language/control.py)
            return f"({format_value(v.cond)} and {format_value(v.if_true)})"
        if _is_bool_literal(v.if_true, True):  # `a or b`
            return f"({format_value(v.cond)} or {format_value(v.if_false)})"
        return f"where({format_value(v.cond)}, {format_value(v.if_true)}, {format_value(v.if_false)})"
    if isinstance(v, Cast):
        return f"cast({format_value(v.x)}, {v.dtype.name})"
    return repr(v)


# ---- building values (with the type rules) --------------------------------------------------


def as_value(x: Any) -> Value:
    """A value node from a value of user code (anything with `__tilescale_value__`: a TileValue, a
    one-element ref slice), a value node, an index expression or a number."""
    if isinstance(x, Value):
        return x
    if isinstance(x, bool | np.bool_):
        return Literal(bool(x), BOOL)
    if isinstance(x, int | np.integer):
        return Literal(int(x), INT64, weak=True)
    if isinstance(x, float | np.floating):
        return Literal(float(x), FLOAT32, weak=True)
    to_value = getattr(x, "__tilescale_value__", None)
    if to_value is not None:
        return to_value()
    if isinstance(x, Expr):
        return Literal(x.value, INT64, weak=True) if isinstance(x, Const) else IndexValue(x)
    try:
        return IndexValue(as_expr(x))
    except TypeError:
        raise TypeError(f"expected a kernel value (an element such as A[i, j], a number, an index), got {x!r}") \
            from None


def retype_literal(lit: Literal, dtype: np.dtype) -> Literal:
    """A weak constant given the type `dtype` (its value converted as a store would)."""
    if dtype == BOOL:
        return Literal(bool(lit.value), BOOL)
    if dtype in INT_DTYPES:
        if isinstance(lit.value, float):
            raise TypeError(f"the float constant {lit.value!r} meets an integer value of type {dtype.name}")
        return Literal(int(np.array(lit.value).astype(dtype).astype(np.int64)), dtype)
    rounded = np.array(lit.value, np.float64).astype(np.float32).astype(dtype) if dtype != FLOAT64 else lit.value
    return Literal(float(rounded), dtype)


def for_destination(v: Value, dtype: np.dtype) -> Value:
    """A value about to be stored (or atomically applied) into an element of `dtype`: a weak
    constant takes that type directly (so `x64[i] = 0.1` keeps float64's 0.1, not float32's)."""
    if isinstance(v, Literal) and v.weak and dtype != BOOL and not (isinstance(v.value, float) and dtype in INT_DTYPES):
        return retype_literal(v, dtype)
    return v


def _resolve_weak(a: Value, b: Value) -> tuple[Value, Value]:
    """Gives a weak constant the type of the other operand (a float constant next to an integer
    value becomes float32)."""
    for first, second in ((a, b), (b, a)):
        if isinstance(first, Literal) and first.weak and not (isinstance(second, Literal) and second.weak):
            target = second.dtype
            if target == BOOL:
                continue
            if isinstance(first.value, float) and target in INT_DTYPES:
                target = FLOAT32
            fixed = retype_literal(first, compute_dtype(target) if target in INT_DTYPES else target)
            return (fixed, b) if first is a else (a, fixed)
    return a, b


def _check_numeric(v: Value, what: str) -> None:
    if v.dtype == BOOL:
        raise TypeError(f"{what} takes numbers, and {format_value(v)} is bool; T.cast it to a number first")


def binary(op: BinaryKind, a: Any, b: Any) -> Value:
    a, b = _resolve_weak(as_value(a), as_value(b))
    if op in (BinaryKind.AND, BinaryKind.OR):
        for v in (a, b):
            if v.dtype != BOOL:
                raise TypeError(f"`{op.value}` combines conditions; {format_value(v)} is {v.dtype.name}")
        return Binary(op, a, b, BOOL)
    what = f"`{op.value}`" if op not in (BinaryKind.MAX, BinaryKind.MIN) else f"T.{op.value}"
    _check_numeric(a, what)
    _check_numeric(b, what)
    dtype = promote(a.dtype, b.dtype)
    if op is BinaryKind.DIV and dtype == INT64:
        raise TypeError(
            f"`/` of the integers {format_value(a)} and {format_value(b)}: true division needs a float operand "
            "(T.cast one of them, or divide by a float constant such as 2.0); `//` is for index expressions"
        )
    return Binary(op, a, b, dtype)


def unary(op: UnaryKind, x: Any) -> Value:
    x = as_value(x)
    if op is UnaryKind.NOT:
        if x.dtype != BOOL:
            raise TypeError(f"`~` negates a condition; {format_value(x)} is {x.dtype.name}")
        return Unary(op, x, BOOL)
    _check_numeric(x, f"T.{op.name.lower()}" if op is not UnaryKind.NEG else "unary `-`")
    if isinstance(x, Literal) and x.weak:
        x = retype_literal(x, FLOAT32 if isinstance(x.value, float) or op in FLOAT_UNARY else INT64)
    dtype = compute_dtype(x.dtype)
    if op in FLOAT_UNARY and dtype == INT64:
        dtype = FLOAT32
    return Unary(op, x, dtype)


CMP_BY_OP = {"<": Cmp.LT, "<=": Cmp.LE, ">": Cmp.GT, ">=": Cmp.GE, "==": Cmp.EQ, "!=": Cmp.NE}


def compare(cmp: Cmp, a: Any, b: Any) -> Value:
    a, b = _resolve_weak(as_value(a), as_value(b))
    if a.dtype == BOOL and b.dtype == BOOL and cmp in (Cmp.EQ, Cmp.NE):
        return ValueCompare(cmp, a, b, BOOL)
    _check_numeric(a, f"`{cmp.value}`")
    _check_numeric(b, f"`{cmp.value}`")
    return ValueCompare(cmp, a, b, promote(a.dtype, b.dtype))


def select(cond: Any, if_true: Any, if_false: Any) -> Value:
    if isinstance(cond, bool):
        raise TypeError(
            f"T.where: the condition is the Python bool {cond}, decided while tracing (== and != between index "
            "expressions that are the same, or different, variables compare them structurally); write a kernel "
            "condition such as i < j, or pass the chosen side directly"
        )
    c = as_value(cond)
    if c.dtype != BOOL:
        raise TypeError(f"T.where: the condition {format_value(c)} is {c.dtype.name}, not a condition (write x != 0)")
    a, b = _resolve_weak(as_value(if_true), as_value(if_false))
    if a.dtype == b.dtype:
        dtype = a.dtype
    else:
        _check_numeric(a, "T.where of different types")
        _check_numeric(b, "T.where of different types")
        dtype = promote(a.dtype, b.dtype)
    return ValueSelect(c, a, b, dtype)


def cast(x: Any, dtype: Any) -> Value:
    d = as_dtype(dtype)
    v = as_value(x)
    if isinstance(v, Literal) and v.weak:
        return retype_literal(v, d)
    return v if v.dtype == d else Cast(v, d)
