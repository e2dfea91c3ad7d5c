"""Integer index expressions of the kernel IR.

Kernels compute addresses and peer numbers from a few run-time values (block index, PE) with
Python operators; tracing turns those operators into these immutable nodes. Everything here is
pure data plus small analyses (constant folding, affine form) that the verifier, the interpreter
and the code generator share; `evaluate.py` gives expressions their values, `ranges.py` their
ranges.

Two things need the tracer (language/state.py), which this layer must not import: an operand
that is an element value or a float makes the result an element value (`i * 0.5`, `x[i] + i`),
and a Python truth test of an undecided condition in user code must be refused. While a kernel is
traced, the tracer lends both through `TRACE_HOOKS`.
"""

from __future__ import annotations

import contextvars
import enum
import operator
import sys
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType
from typing import Any, Union

from .buffers import Buffer

IntLike = Union["Expr", int]


@dataclass(frozen=True)
class TraceHooks:
    """What the tracer lends index expressions while a kernel is traced (`TRACE_HOOKS`)."""

    # `a op b` where one side is an element value or a float (`_defers`): an element value.
    mixed: Callable[[str, Any, Any], Any]
    # Whether the frame that asks for the truth of an undecided condition does a Python truth test
    # (`if`, `and`, `not`, ...) in user code (then it is refused), or compares structurally.
    truth_test: Callable[[FrameType], bool]


TRACE_HOOKS: contextvars.ContextVar[TraceHooks | None] = contextvars.ContextVar("tilescale_trace_hooks", default=None)


def mixed(op: str, a: Any, b: Any) -> Any:
    """`a op b` of an index expression and an element value or a float (an element value)."""
    hooks = TRACE_HOOKS.get()
    if hooks is None:
        lhs, rhs = (format_expr(x) if isinstance(x, Expr) else repr(x) for x in (a, b))
        raise TypeError(f"`{lhs} {op} {rhs}` makes an element value, which exists only while a kernel is traced")
    return hooks.mixed(op, a, b)


class VarKind(enum.Enum):
    """Run-time scalars a kernel can read."""

    PROGRAM_ID = "program_id"  # block index along a grid axis
    PE = "pe"  # this device's index in the kernel's PE space
    LOOP = "loop"  # the index of a `T.serial`/`T.Pipelined` loop (`axis` holds its unique id)
    THREAD = "thread"  # threadIdx.x (`T.thread_id()`), in [0, threads); see ir/control.py
    NODE = "node"  # this device's node in the launch layout (`T.Scale("node")`)
    NODE_COUNT = "node_count"  # the number of nodes of the launch (`T.Scale("node")`)


class BinOpKind(enum.Enum):
    ADD = "+"
    SUB = "-"
    MUL = "*"
    FLOORDIV = "//"  # Python semantics (rounds towards -inf)
    MOD = "%"  # Python semantics (sign of the divisor)
    MIN = "min"
    MAX = "max"


INT_OPS: dict[BinOpKind, Callable[[int, int], int]] = {
    BinOpKind.ADD: operator.add,
    BinOpKind.SUB: operator.sub,
    BinOpKind.MUL: operator.mul,
    BinOpKind.FLOORDIV: operator.floordiv,
    BinOpKind.MOD: operator.mod,
    BinOpKind.MIN: min,
    BinOpKind.MAX: max,
}


class CompareKind(enum.Enum):
    """Comparisons of kernel values (`tx == 0`, `T.get_pe() < n`): 1 when true, else 0."""

    EQ = "=="
    NE = "!="
    LT = "<"
    LE = "<="
    GT = ">"
    GE = ">="


COMPARE_OPS: dict[CompareKind, Callable[[int, int], bool]] = {
    CompareKind.EQ: operator.eq,
    CompareKind.NE: operator.ne,
    CompareKind.LT: operator.lt,
    CompareKind.LE: operator.le,
    CompareKind.GT: operator.gt,
    CompareKind.GE: operator.ge,
}


class LogicKind(enum.Enum):
    """Combinations of conditions. `&`/`|` evaluate both sides (Python's operators on bools);
    `and`/`or` (the rewritten Python keywords) stop at the first side that decides, like C's
    `&&`/`||`, so `(n > 0) and (x // n > 1)` never divides by zero."""

    AND = "&"
    OR = "|"
    LAND = "and"
    LOR = "or"


def apply_binop(op: BinOpKind, a: int, b: int) -> int:
    """Python-semantics integer operation (the meaning every backend must reproduce)."""
    if op in (BinOpKind.FLOORDIV, BinOpKind.MOD) and b == 0:
        raise ZeroDivisionError(f"integer {op.value} by zero in a kernel index expression")
    return INT_OPS[op](a, b)


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

    def __truediv__(self, other: Any) -> Any:  # true division makes an element value
        return mixed("/", self, other)

    def __rtruediv__(self, other: Any) -> Any:
        return mixed("/", other, self)

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
            f"`{format_expr(self)}` is a kernel value known only at run time; Python `if`/`while`/`and`/`or` "
            "cannot decide it while the kernel is traced. In the body of a @ts.kernel function `if`, `and`, "
            "`or`, `not` and `x if c else y` on kernel values are traced as kernel conditionals; elsewhere use "
            "`with T.If(cond):`, `T.if_then_else`, `&`, `|`, `~`"
        )

    # Comparisons build boolean kernel values (`tx == 0`). IR nodes still compare structurally
    # where Python needs a bool (dict keys, tuples, dataclass equality): `bool(a == b)` is
    # "same expression" (see `Compare.__bool__`), as in TVM.
    def __eq__(self, other: object) -> Any:  # type: ignore[override]
        return _compare_or_not_implemented(CompareKind.EQ, self, other)

    def __ne__(self, other: object) -> Any:  # type: ignore[override]
        return _compare_or_not_implemented(CompareKind.NE, self, other)

    def __lt__(self, other: IntLike) -> Any:
        return _compare_or_not_implemented(CompareKind.LT, self, other)

    def __le__(self, other: IntLike) -> Any:
        return _compare_or_not_implemented(CompareKind.LE, self, other)

    def __gt__(self, other: IntLike) -> Any:
        return _compare_or_not_implemented(CompareKind.GT, self, other)

    def __ge__(self, other: IntLike) -> Any:
        return _compare_or_not_implemented(CompareKind.GE, self, other)

    # With an element value on the other side (`(j < n) & (x[i, j] > 0)`) the result is a value.
    def __and__(self, other: Any) -> Any:
        return mixed("&", self, other) if _defers(other) else logic(LogicKind.AND, self, other)

    def __rand__(self, other: Any) -> Any:
        return mixed("&", other, self) if _defers(other) else logic(LogicKind.AND, other, self)

    def __or__(self, other: Any) -> Any:
        return mixed("|", self, other) if _defers(other) else logic(LogicKind.OR, self, other)

    def __ror__(self, other: Any) -> Any:
        return mixed("|", other, self) if _defers(other) else logic(LogicKind.OR, other, self)

    def __invert__(self) -> Any:
        return logical_not(self)

    def __hash__(self) -> int:
        return hash((type(self).__name__, *_field_values(self)))


@dataclass(frozen=True, eq=False)
class Const(Expr):
    value: int

    def __post_init__(self) -> None:
        if not isinstance(self.value, int) or isinstance(self.value, bool):
            raise TypeError(f"index constants must be int, got {self.value!r}")


@dataclass(frozen=True, eq=False)
class Var(Expr):
    kind: VarKind
    axis: int = 0  # grid axis for PROGRAM_ID; the loop's unique id for LOOP


@dataclass(frozen=True, eq=False)
class BinOp(Expr):
    op: BinOpKind
    lhs: Expr
    rhs: Expr


@dataclass(frozen=True, eq=False)
class Load(Expr):
    """One integer element of global memory, read when the expression is evaluated (`T.load(ref[i])`),
    or of a thread's registers (ir/control.py).

    An input never changes while the kernel runs. Outputs, symmetric scratch and signal words
    (`buffers.CHANGING_KINDS`) may: every backend reads them at the statement that holds the
    expression, each time it runs (the interpreter when it resolves the statement's regions and
    values, logging the read with the race detector; the CUDA code with a volatile load, never
    hoisted or cached), so the value is the one a wait before that statement delivered. Within
    one statement a backend may read it more than once: only a racing write could make the reads
    differ, and the interpreter reports that race. Indices are checked against the buffer's
    extents (statically where affine, else when the kernel runs).
    """

    buffer: Buffer
    indices: tuple[Expr, ...]


@dataclass(frozen=True, eq=False)
class Compare(Expr):
    """`lhs op rhs`: 1 when it holds, else 0 (Python's True/False in arithmetic)."""

    op: CompareKind
    lhs: Expr
    rhs: Expr

    def __bool__(self) -> bool:
        """Structural equality, for containers and IR code (`a == b` of two expressions is "the same
        expression"); a kernel condition has no Python truth value. A Python truth test of a
        comparison that is not decided structurally, in user code while a kernel is traced (an
        `if` the kernel decorator did not rewrite, e.g. in a helper function), is an error rather
        than a silent False."""
        if self.op not in (CompareKind.EQ, CompareKind.NE):
            raise TypeError(
                f"`{format_expr(self)}` is a kernel condition known only at run time; " + _WHERE_CONDITIONS
            )
        equal = same_expr(self.lhs, self.rhs)
        hooks = TRACE_HOOKS.get()
        if not equal and hooks is not None and hooks.truth_test(sys._getframe(1)):
            raise TypeError(
                f"`{format_expr(self)}` is a kernel condition known only at run time; " + _WHERE_CONDITIONS
            )
        return equal if self.op is CompareKind.EQ else not equal


@dataclass(frozen=True, eq=False)
class Logic(Expr):
    """`lhs & rhs`, `lhs | rhs` (both evaluated) or `lhs and rhs`, `lhs or rhs` (short-circuit);
    operands are conditions (0 or 1)."""

    op: LogicKind
    lhs: Expr
    rhs: Expr


@dataclass(frozen=True, eq=False)
class Not(Expr):
    """`~cond` / `not cond`: 1 when the condition is 0."""

    operand: Expr


@dataclass(frozen=True, eq=False)
class Select(Expr):
    """`T.if_then_else(cond, a, b)` / `a if cond else b`: only the chosen side is evaluated."""

    cond: Expr
    if_true: Expr
    if_false: Expr


_WHERE_CONDITIONS = (
    "inside the body of a @ts.kernel function `if`/`and`/`or`/`not`/`x if c else y` on it are traced as kernel "
    "conditionals, elsewhere (helper functions) write `with T.If(cond):`, `T.if_then_else(cond, a, b)`, and "
    "`&`, `|`, `~` to combine conditions"
)
BOOLEAN_EXPRS = (Compare, Logic, Not)


def _field_values(e: Expr) -> tuple[Any, ...]:
    return tuple(getattr(e, name) for name in e.__dataclass_fields__)  # type: ignore[attr-defined]


def same_expr(a: Any, b: Any) -> bool:
    """Structural equality of expressions (and of tuples of them, and other field values)."""
    if a is b:
        return True
    if isinstance(a, Expr) or isinstance(b, Expr):
        return type(a) is type(b) and all(same_expr(x, y) for x, y in zip(_field_values(a), _field_values(b)))
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(same_expr(x, y) for x, y in zip(a, b))
    return bool(a == b)


def is_condition(e: Any) -> bool:
    """A kernel condition: a comparison, or `&`/`|`/`~`/`and`/`or`/`not` of conditions."""
    if isinstance(e, Select):
        return is_condition(e.if_true) and is_condition(e.if_false)
    return isinstance(e, BOOLEAN_EXPRS)


def compare(op: CompareKind, a: IntLike, b: IntLike) -> Expr | bool:
    """`a op b` of kernel values: a Python bool when both are constants (or `a` and `b` are the
    same expression, for ==, !=, <=, >=), else a `Compare`."""
    a, b = as_expr(a), as_expr(b)
    if isinstance(a, Const) and isinstance(b, Const):
        return COMPARE_OPS[op](a.value, b.value)
    if same_expr(a, b):  # the same value on both sides, whatever it is at run time
        return op in (CompareKind.EQ, CompareKind.LE, CompareKind.GE)
    return Compare(op, a, b)


def _compare_or_not_implemented(op: CompareKind, a: Expr, b: object) -> Any:
    if _defers(b):  # compared with an element value or a float: a value comparison
        # (outside a trace there are no values: Python's fallback, identity for ==)
        return NotImplemented if TRACE_HOOKS.get() is None else mixed(op.value, a, b)
    try:
        other = as_expr(b)
    except TypeError:
        return NotImplemented  # e.g. `expr == None`: Python falls back to identity
    return compare(op, a, other)


def as_condition(value: Any, what: str = "a condition") -> Expr | bool:
    """A Python bool stays one; a kernel condition stays one; another kernel value `v` means
    `v != 0` (Python's truth of an int). Anything else is a TypeError."""
    if isinstance(value, bool):
        return value
    if isinstance(value, Expr) and is_condition(value):
        return value
    try:
        e = as_expr(value)
    except TypeError:
        raise TypeError(f"{what} must be a kernel condition or a Python bool, got {value!r}") from None
    return compare(CompareKind.NE, e, 0)


def logic(op: LogicKind, a: Any, b: Any) -> Expr | bool:
    """Combines two conditions (Python bools fold away: `c & True` is `c`). `&`/`|` take conditions
    only; `and`/`or` also take index values, meaning `v != 0` (Python's truth of an int)."""
    if op in (LogicKind.AND, LogicKind.OR):
        for side in (a, b):
            if not isinstance(side, bool) and not (isinstance(side, Expr) and is_condition(side)):
                shown = format_expr(side) if isinstance(side, Expr) else repr(side)
                raise TypeError(
                    f"`{op.value}` combines conditions (comparisons such as tx < 4); {shown} is not one "
                    "(bitwise operations on index values are not supported)"
                )
    a, b = as_condition(a), as_condition(b)
    conj = op in (LogicKind.AND, LogicKind.LAND)
    if isinstance(a, bool):  # True & c is c, False & c is False; True | c is True, False | c is c
        return b if a == conj else a
    if isinstance(b, bool):
        return a if b == conj else b
    return Logic(op, a, b)


def logical_not(a: Any) -> Expr | bool:
    """`~cond` / `not cond` (on a condition; `~` of an index value is refused: Python's `~` of an
    int is bitwise, `~True == -2`)."""
    if isinstance(a, bool):
        return not a
    if not (isinstance(a, Expr) and is_condition(a)):
        raise TypeError(f"`~` negates a condition (a comparison); {format_expr(as_expr(a))} is an index value")
    if isinstance(a, Not):
        return a.operand
    if isinstance(a, Compare):  # ~(x < y) is x >= y: simpler to read and to print
        return Compare(_NEGATED[a.op], a.lhs, a.rhs)
    return Not(a)


_NEGATED = {
    CompareKind.EQ: CompareKind.NE,
    CompareKind.NE: CompareKind.EQ,
    CompareKind.LT: CompareKind.GE,
    CompareKind.GE: CompareKind.LT,
    CompareKind.LE: CompareKind.GT,
    CompareKind.GT: CompareKind.LE,
}


def select(cond: Any, if_true: IntLike, if_false: IntLike) -> Expr:
    """`if_true` where `cond` holds, else `if_false`; decided now when `cond` is a Python bool."""
    c = as_condition(cond)
    if isinstance(c, bool):
        return as_expr(if_true if c else if_false)
    return Select(c, as_expr(if_true), as_expr(if_false))


def children(e: Expr) -> tuple[Expr, ...]:
    """The sub-expressions of `e` (a Load's indices included)."""
    if isinstance(e, Load):
        return e.indices
    if isinstance(e, (Const, Var)):
        return ()
    return tuple(v for v in _field_values(e) if isinstance(v, Expr))


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


def _defers(x: Any) -> bool:
    """An operand that makes `expr op x` an element value (values.py): a float, an element of a
    float buffer, a value."""
    if isinstance(x, Expr | int):
        return False
    return isinstance(x, float) or bool(getattr(x, "__tilescale_defer__", False)) or \
        getattr(getattr(x, "dtype", None), "kind", "") == "f"


def binop(op: BinOpKind, a: IntLike, b: IntLike) -> Expr:
    """Builds `a op b`, folding constants and the neutral elements. With a float or an element
    value on one side the result is a value (`T.Parallel` bodies: `i * 0.5`, `x[i] + i`)."""
    if _defers(a) or _defers(b):
        return mixed(op.value, a, b)  # type: ignore[no-any-return]
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
    return frozenset().union(*(variables(c) for c in children(e)))


def loads(e: Expr) -> list[Load]:
    """Every `Load` in `e`, outermost first (a load's indices may hold loads)."""
    inner = [ld for c in children(e) for ld in loads(c)]
    return [e, *inner] if isinstance(e, Load) else inner


def format_expr(e: Expr) -> str:
    if isinstance(e, Const):
        return str(e.value)
    if isinstance(e, Var):
        if e.kind is VarKind.PROGRAM_ID:
            return f"program_id({e.axis})"
        if e.kind is VarKind.THREAD:
            return "tx"
        return f"i{e.axis}" if e.kind is VarKind.LOOP else e.kind.value
    if isinstance(e, BinOp):
        if e.op in (BinOpKind.MIN, BinOpKind.MAX):
            return f"{e.op.value}({format_expr(e.lhs)}, {format_expr(e.rhs)})"
        return f"({format_expr(e.lhs)} {e.op.value} {format_expr(e.rhs)})"
    if isinstance(e, Load):
        return f"{e.buffer.name}[{', '.join(format_expr(i) for i in e.indices)}]"
    if isinstance(e, (Compare, Logic)):
        return f"({format_expr(e.lhs)} {e.op.value} {format_expr(e.rhs)})"
    if isinstance(e, Not):
        return f"(not {format_expr(e.operand)})"
    if isinstance(e, Select):
        return f"if_then_else({format_expr(e.cond)}, {format_expr(e.if_true)}, {format_expr(e.if_false)})"
    return repr(e)


def program_id_var(axis: int) -> Var:
    """The block index along grid axis `axis` (`T.program_id(axis)`)."""
    return Var(VarKind.PROGRAM_ID, axis)


PE_VAR = Var(VarKind.PE)  # this device's PE (`T.get_pe()`)
NODE_VAR = Var(VarKind.NODE)  # this device's node (`T.Scale("node")[0]`)
NODE_COUNT_VAR = Var(VarKind.NODE_COUNT)  # the launch's node count (`T.Scale("node")[1]`)
NODE_VARS = (NODE_VAR, NODE_COUNT_VAR)


def node_ranges(num_pes: int) -> dict[Var, tuple[int, int]]:
    """What is known of the node variables while tracing and verifying: a node holds at least one
    of the kernel's PEs (the count is a launch fact, not a trace one)."""
    return {NODE_VAR: (0, num_pes - 1), NODE_COUNT_VAR: (1, num_pes)}


def expr_min(a: IntLike, b: IntLike) -> Expr:
    return binop(BinOpKind.MIN, a, b)


def expr_max(a: IntLike, b: IntLike) -> Expr:
    return binop(BinOpKind.MAX, a, b)
