"""What user code holds of element values: `TileValue`, whose Python operators build value nodes.

The value nodes and their type rules are the IR's (ir/values.py); this is the user-facing side
(`A_s[i, j] * 2`, `T.exp(x) > 0`): operators that build nodes with those rules, type errors that
name the user's line, and refusals of what Python cannot do with a value known only when the kernel
runs (a truth test, an index, a number). `index_arith` is what index expressions hand an operand
over to when it is an element value or a float (`i * 0.5`, `x[i] + i`): the tracer lends it to
ir/expr.py (`TraceHooks.mixed`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import KernelTraceError
from ..ir.nodes import Cmp
from ..ir.values import CMP_BY_OP, BinaryKind, UnaryKind, Value, binary, compare, format_value, unary
from .source import user_source_loc


def build_value(fn: Callable[..., Value], args: tuple[Any, ...]) -> TileValue:
    """`TileValue(fn(*args))`; a type error names the user's line (a KernelTraceError)."""
    try:
        return TileValue(fn(*args))
    except TypeError as e:
        raise trace_error(str(e)) from None


def trace_error(message: str) -> KernelTraceError:
    return KernelTraceError(message, user_source_loc())


class TileValue:
    """A kernel value in user code (`A_s[i, j] * 2`): Python operators build value nodes."""

    __slots__ = ("node",)
    __tilescale_defer__ = True  # index-expression operators hand mixed operands over to values

    def __init__(self, node: Value):
        self.node = node

    @property
    def dtype(self) -> np.dtype:
        return self.node.dtype

    def __tilescale_value__(self) -> Value:
        return self.node

    def __add__(self, o: Any) -> TileValue:
        return build_value(binary, (BinaryKind.ADD, self, o))

    def __radd__(self, o: Any) -> TileValue:
        return build_value(binary, (BinaryKind.ADD, o, self))

    def __sub__(self, o: Any) -> TileValue:
        return build_value(binary, (BinaryKind.SUB, self, o))

    def __rsub__(self, o: Any) -> TileValue:
        return build_value(binary, (BinaryKind.SUB, o, self))

    def __mul__(self, o: Any) -> TileValue:
        return build_value(binary, (BinaryKind.MUL, self, o))

    def __rmul__(self, o: Any) -> TileValue:
        return build_value(binary, (BinaryKind.MUL, o, self))

    def __truediv__(self, o: Any) -> TileValue:
        return build_value(binary, (BinaryKind.DIV, self, o))

    def __rtruediv__(self, o: Any) -> TileValue:
        return build_value(binary, (BinaryKind.DIV, o, self))

    def __neg__(self) -> TileValue:
        return build_value(unary, (UnaryKind.NEG, self))

    def __pos__(self) -> TileValue:
        return self

    def __abs__(self) -> TileValue:
        return build_value(unary, (UnaryKind.ABS, self))

    def __and__(self, o: Any) -> TileValue:
        return build_value(binary, (BinaryKind.AND, self, o))

    def __rand__(self, o: Any) -> TileValue:
        return build_value(binary, (BinaryKind.AND, o, self))

    def __or__(self, o: Any) -> TileValue:
        return build_value(binary, (BinaryKind.OR, self, o))

    def __ror__(self, o: Any) -> TileValue:
        return build_value(binary, (BinaryKind.OR, o, self))

    def __invert__(self) -> TileValue:
        return build_value(unary, (UnaryKind.NOT, self))

    def __lt__(self, o: Any) -> TileValue:
        return build_value(compare, (Cmp.LT, self, o))

    def __le__(self, o: Any) -> TileValue:
        return build_value(compare, (Cmp.LE, self, o))

    def __gt__(self, o: Any) -> TileValue:
        return build_value(compare, (Cmp.GT, self, o))

    def __ge__(self, o: Any) -> TileValue:
        return build_value(compare, (Cmp.GE, self, o))

    def __eq__(self, o: Any) -> TileValue:  # type: ignore[override]
        return build_value(compare, (Cmp.EQ, self, o))

    def __ne__(self, o: Any) -> TileValue:  # type: ignore[override]
        return build_value(compare, (Cmp.NE, self, o))

    __hash__ = None  # type: ignore[assignment]

    def _no_int(self, what: str) -> KernelTraceError:
        return trace_error(f"`{format_value(self.node)}` is a kernel value known only when the kernel runs; {what}")

    def __floordiv__(self, o: Any) -> TileValue:
        raise self._no_int("`//` and `%` are index arithmetic (on loop variables, program ids); element values "
                           "divide with `/`")

    __rfloordiv__ = __mod__ = __rmod__ = __floordiv__

    def __bool__(self) -> bool:
        raise self._no_int("a Python `if` or bool() cannot decide it while the kernel is traced. In the body of a "
                           "@ts.kernel function `if`/`and`/`or`/`not`/`a if c else b` on it are traced as kernel "
                           "conditionals (per iteration inside T.Parallel); elsewhere (helper functions) write `with "
                           "T.If(cond):`, T.where(cond, a, b), and `&`, `|`, `~` to combine conditions")

    def __index__(self) -> int:
        raise self._no_int("it cannot be an index (indices are index expressions: loop variables, program ids, "
                           "T.load of integer inputs)")

    def __float__(self) -> float:
        raise self._no_int("it has no Python value")

    __int__ = __float__

    def __repr__(self) -> str:
        return f"TileValue({format_value(self.node)}: {self.dtype.name})"


def index_arith(op: str, a: Any, b: Any) -> TileValue:
    """`a op b` where one side is an index expression and the other a value or a float (called by
    the index-expression operators, which hand such operands over)."""
    kinds = {"+": BinaryKind.ADD, "-": BinaryKind.SUB, "*": BinaryKind.MUL, "/": BinaryKind.DIV,
             "min": BinaryKind.MIN, "max": BinaryKind.MAX, "&": BinaryKind.AND, "|": BinaryKind.OR}
    if op in CMP_BY_OP:
        return build_value(compare, (CMP_BY_OP[op], a, b))
    if op not in kinds:
        raise trace_error(f"`{op}` is index arithmetic (on loop variables, program ids); element values divide "
                          "with `/`")
    return build_value(binary, (kinds[op], a, b))


def defers(x: Any) -> bool:
    """Whether an operand of an index-expression operator makes the result a value instead."""
    return isinstance(x, float | np.floating) or bool(getattr(x, "__tilescale_defer__", False))
