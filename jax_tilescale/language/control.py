"""Per-thread code: the thread index, conditionals, and per-thread registers (ir/control.py).

- `T.thread_id()` / `T.get_thread_binding(0)`: `tx`, this thread's index in the block.
- Conditionals. In the body of a `@ts.kernel` function, Python's `if`, `and`, `or`, `not` and
  `a if c else b` work on kernel values: the decorator rewrites them (`jax_tilescale/ast_rewrite.py`)
  into calls of `branch`, `and_`, ... below, which behave exactly like Python on plain values and
  trace both sides on kernel values. Everywhere (helpers too): `with T.If(cond): ...` optionally
  followed by `with T.Else(): ...`, `T.if_then_else(cond, a, b)`, `&`, `|`, `~`, `T.all`, `T.any`.
  Conditions may be index conditions (`tx < 4`, `j < n`) or element values (`x[i, j] > 0`, a
  bool element, a number meaning `!= 0`, or a mix: `j < n and x[i, j] > 0`, where `and`/`or`
  evaluate the right side only where needed, so it never reads x[i, n]). Inside a `T.Parallel`
  body an `if` is per iteration (only the iterations where it holds run its statements); at
  block level an element condition such as `if flag[0] > 0:` is read once by the block
  (block-uniform), or per thread when it depends on the thread. `a if c else b` on element values
  is `T.where(c, a, b)`.
- Registers: `T.alloc_local(shape, dtype)` (`x[i] = v`, `x[i]` in expressions) and
  `T.alloc_var(dtype, init=None)` (a scalar: `v = 3` in a kernel body, `v[0] = 3` or `v += 1`
  anywhere; `v` in expressions reads it). One copy per thread; integer dtypes for now.
"""

from __future__ import annotations

import builtins
import operator
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from ..errors import KernelTraceError
from ..ir.control import LOCAL_DTYPES, THREAD_VAR, LocalStore
from ..ir.control import If as IfStmt
from ..ir.expr import (
    Expr,
    Load,
    LogicKind,
    as_condition,
    as_expr,
    logic,
    logical_not,
    select,
)
from ..ir.nodes import Buffer, BufferKind, Cmp, Region, full_region
from ..ir.values import BOOL, BinaryKind, UnaryKind, Value, as_value, binary, unary
from ..ir.values import compare as value_compare
from ..ir.values import select as value_select
from ._common import expr
from .memory import _shape, buffer_name
from .refs import BufferHandle, slice_region
from .source import user_source_loc
from .state import current_trace
from .values import TileValue


def thread_id() -> Expr:
    """`tx`: this thread's index in its block, in [0, threads) (threadIdx.x). Statements that use
    it must be under a condition on it (`if tx == 0:`), or be register stores."""
    current_trace("thread_id")
    return THREAD_VAR


def get_thread_binding(dim: int = 0) -> Expr:
    """TileLang's name for the thread index along `dim`; blocks here are one-dimensional (`threads`
    of the kernel), so only dim 0 (`T.thread_id()`)."""
    state = current_trace("get_thread_binding")
    if dim != 0:
        raise KernelTraceError(
            f"T.get_thread_binding({dim!r}): blocks are one-dimensional here (threads={state.threads}); only "
            "dimension 0 exists (threadIdx.x, T.thread_id())",
            user_source_loc(),
        )
    return THREAD_VAR


def _is_value(value: Any) -> bool:
    """An element value (values.py): a TileValue, or an element of a buffer other than an integer
    input (whose elements are index values, read with T.load)."""
    return isinstance(value, TileValue) or bool(getattr(value, "__tilescale_defer__", False))


def _is_kernel_value(value: Any) -> bool:
    return isinstance(value, Expr) or hasattr(value, "__tilescale_expr__") or _is_value(value)


def _value_condition(value: Any, op: str) -> Value:
    """`value` as a bool element value: a number means `value != 0` (Python's truth)."""
    try:
        v = as_value(value)
        return v if v.dtype == BOOL else value_compare(Cmp.NE, v, 0)
    except TypeError as err:
        raise KernelTraceError(f"{op}: {err}", user_source_loc()) from None


def _condition(value: Any, op: str) -> Expr | Value | bool:
    """An index condition, a bool element value (for element values), or a Python bool."""
    if _is_value(value):
        return _value_condition(value, op)
    try:
        return as_condition(value)
    except TypeError as err:
        raise KernelTraceError(f"{op}: {err}", user_source_loc()) from None


def _value_logic(op: LogicKind, a: Any, b: Any) -> TileValue:
    """`a & b`, `a and b` (and the `or`s) where a side is an element value. `and`/`or` evaluate
    `b` only where it decides (`where(a, b, False)`, `where(a, True, b)`), as Python does."""
    what = op.value
    conj = op in (LogicKind.AND, LogicKind.LAND)
    for first, second in ((a, b), (b, a)):
        if isinstance(first, bool):  # True & c is c, False & c is False; True | c is True, False | c is c
            return TileValue(_value_condition(second, what)) if first == conj else TileValue(as_value(first))
    x, y = _value_condition(a, what), _value_condition(b, what)
    if op in (LogicKind.AND, LogicKind.OR):
        return TileValue(binary(BinaryKind.AND if op is LogicKind.AND else BinaryKind.OR, x, y))
    if op is LogicKind.LAND:
        return TileValue(value_select(x, y, False))
    return TileValue(value_select(x, True, y))


# ---- explicit forms ----------------------------------------------------------------------------


class If:
    """`with T.If(cond):` traces its body as the `then` side of a kernel conditional; a
    `with T.Else():` right after it adds the `else` side. A Python bool condition keeps (True)
    or drops (False) the body's statements. `cond` may be an element value (`x[i, j] > 0`): per
    iteration inside a T.Parallel body, read once by the block outside it."""

    def __init__(self, cond: Any):
        self.loc = user_source_loc()
        self.cond = _condition(cond, "T.If")
        self.body: list = []

    def __enter__(self) -> If:
        current_trace("If").open_bodies.append(self.body)
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        state = current_trace("If")
        if not state.open_bodies or state.open_bodies[-1] is not self.body:
            raise KernelTraceError("T.If: bodies must nest", self.loc)
        state.open_bodies.pop()
        if exc_type is not None:
            return
        if isinstance(self.cond, bool):
            for s in self.body if self.cond else ():
                state.emit(s)
            return
        state.emit(IfStmt(self.cond, tuple(self.body), loc=self.loc))


class Else:
    """`with T.Else():` the `else` side of the `with T.If(...)` block just before it."""

    def __init__(self) -> None:
        self.loc = user_source_loc()
        self.body: list = []

    def __enter__(self) -> Else:
        state = current_trace("Else")
        current = state.open_bodies[-1] if state.open_bodies else state.body
        if not current or not isinstance(current[-1], IfStmt) or current[-1].else_body:
            raise KernelTraceError("T.Else() must directly follow a `with T.If(cond):` block", self.loc)
        self.target: IfStmt = current.pop()
        self.parent = current
        state.open_bodies.append(self.body)
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        state = current_trace("Else")
        state.open_bodies.pop()
        if exc_type is not None:
            return
        t = self.target
        self.parent.append(IfStmt(t.cond, t.then_body, tuple(self.body), loc=t.loc))


def if_then_else(cond: Any, true_value: Any, false_value: Any) -> Expr | TileValue:
    """`true_value` where `cond` holds, else `false_value` (only the chosen side is evaluated): an
    index expression, or an element value (`T.where`) when the condition or a side is one."""
    loc = user_source_loc()
    c = _condition(cond, "T.if_then_else")
    if isinstance(c, bool):
        chosen = true_value if c else false_value
        if _is_value(chosen) or isinstance(chosen, float):
            return chosen
        return expr(chosen, "if_then_else", "the chosen value", loc)
    if isinstance(c, Value) or builtins.any(_is_value(x) or isinstance(x, float) for x in (true_value, false_value)):
        try:
            return TileValue(value_select(c, true_value, false_value))
        except TypeError as err:
            raise KernelTraceError(f"T.if_then_else: {err}", loc) from None
    return select(c, expr(true_value, "if_then_else", "true_value", loc),
                  expr(false_value, "if_then_else", "false_value", loc))


def all(*conds: Any) -> Expr | TileValue | bool:  # TileLang's name (shadows the builtin here)
    """Every condition holds (`c0 & c1 & ...`); True for none."""
    return _fold(LogicKind.AND, True, conds, "T.all")


def any(*conds: Any) -> Expr | TileValue | bool:  # TileLang's name (shadows the builtin here)
    """Some condition holds (`c0 | c1 | ...`); False for none."""
    return _fold(LogicKind.OR, False, conds, "T.any")


def _fold(kind: LogicKind, out: Any, conds: tuple[Any, ...], op: str) -> Expr | TileValue | bool:
    for c in conds:
        cond = _condition(c, op)
        out = _value_logic(kind, out, cond) if _is_value(out) or isinstance(cond, Value) else logic(kind, out, cond)
    return out


# ---- what the rewritten kernel body calls (ast_rewrite.py) ------------------------------------


def branch(test: Any) -> Iterator[bool]:
    """`for then in branch(test): if then: <body> else: <orelse>` is the rewritten `if test:`.
    A plain value runs one side, as Python does; a kernel condition traces both into an `If`."""
    if not _is_kernel_value(test):
        yield bool(test)
        return
    loc = user_source_loc()
    cond = _condition(test, "if")
    if isinstance(cond, bool):
        yield cond
        return
    state = current_trace("if")
    then_body: list = []
    else_body: list = []
    for side, body in ((True, then_body), (False, else_body)):
        state.open_bodies.append(body)
        yield side
        if not state.open_bodies or state.open_bodies[-1] is not body:
            raise KernelTraceError("if: bodies must nest", loc)
        state.open_bodies.pop()
    state.emit(IfStmt(cond, tuple(then_body), tuple(else_body), loc=loc))


def if_else(test: Any, if_true: Callable[[], Any], if_false: Callable[[], Any]) -> Any:
    """The rewritten `a if test else b` (`T.where(test, a, b)` on element values)."""
    if not _is_kernel_value(test):
        return if_true() if test else if_false()
    return if_then_else(test, if_true(), if_false())


def _combine(op: LogicKind, first: Any, rest: tuple[Callable[[], Any], ...]) -> Any:
    acc = first
    for thunk in rest:
        if not _is_kernel_value(acc):
            if bool(acc) == (op is LogicKind.LOR):  # decided, as in Python: `False and x`, `True or x`
                return acc
            acc = thunk()
            continue
        rhs = thunk()
        if _is_value(acc) or _is_value(rhs):
            acc = _value_logic(op, acc, rhs)
        else:
            acc = logic(op, _condition(acc, op.value), _condition(rhs, op.value))
    return acc


def and_(first: Any, *rest: Callable[[], Any]) -> Any:
    """The rewritten `a and b and ...` (later operands as thunks, evaluated as Python would)."""
    return _combine(LogicKind.LAND, first, rest)


def or_(first: Any, *rest: Callable[[], Any]) -> Any:
    """The rewritten `a or b or ...`."""
    return _combine(LogicKind.LOR, first, rest)


def not_(value: Any) -> Any:
    """The rewritten `not value`."""
    if not _is_kernel_value(value):
        return not value
    if _is_value(value):
        return TileValue(unary(UnaryKind.NOT, _value_condition(value, "not")))
    return logical_not(_condition(value, "not"))


_CHAIN_OPS: dict[str, Callable[[Any, Any], Any]] = {
    "==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt,
    ">=": operator.ge, "is": operator.is_, "is not": operator.is_not,
    "in": lambda a, b: a in b, "not in": lambda a, b: a not in b,
}


def compare_chain(ops: tuple[str, ...], *operands: Callable[[], Any]) -> Any:
    """The rewritten `a < b < c` (`a < b and b < c`, each operand evaluated once)."""
    left = operands[0]()
    acc: Any = None
    for op, thunk in zip(ops, operands[1:]):
        if acc is not None and not _is_kernel_value(acc) and not acc:
            return acc
        right = thunk()
        result = _CHAIN_OPS[op](left, right)
        acc = result if acc is None else and_(acc, lambda r=result: r)
        left = right
    return acc


def assign(old: Callable[[], Any], value: Any) -> Any:
    """The rewritten `name = value` for names that hold a `T.alloc_var`: a store into the
    register (TileLang's meaning), unless `value` is itself a register buffer (a rebinding)."""
    try:
        current = old()
    except NameError:  # not bound yet
        return value
    if isinstance(current, LocalVar) and not isinstance(value, LocalRef):
        current.set(value)
        return current
    return value


# ---- registers ---------------------------------------------------------------------------------


def _local_dtype(dtype: Any, op: str) -> np.dtype:
    loc = user_source_loc()
    try:
        d = np.dtype(dtype)
    except TypeError:
        raise KernelTraceError(f"T.{op}: {dtype!r} is not a dtype", loc) from None
    if d.name not in LOCAL_DTYPES:
        raise KernelTraceError(
            f"T.{op}: registers hold integers for now ({', '.join(LOCAL_DTYPES)}), got {d.name}", loc
        )
    return d


class LocalRef(BufferHandle):
    """Per-thread registers (`T.alloc_local`): `x[i] = value` stores, `x[i]` reads (a kernel value)."""

    def _element(self, index: Any) -> Region:
        loc = user_source_loc()
        region = slice_region(full_region(self.buffer), index, loc)
        if region.size != 1:
            raise KernelTraceError(
                f"{self.buffer.name}: registers are read and written one element at a time, e.g. "
                f"{self.buffer.name}[i]; got {region}",
                loc,
            )
        return region

    def __getitem__(self, index: Any) -> Expr:
        return Load(self.buffer, self._element(index).starts)

    def __setitem__(self, index: Any, value: Any) -> None:
        self._store(self._element(index), value)

    def _store(self, dst: Region, value: Any) -> None:
        state = current_trace("store")
        loc = user_source_loc()
        state.emit(LocalStore(dst, expr(value, "store", f"the value stored into {self.buffer.name}", loc), loc=loc))

    def __repr__(self) -> str:
        return f"LocalRef({self.buffer})"


def _forward(name: str) -> Callable[..., Any]:
    op = getattr(operator, name)
    return lambda self, *args: op(self.value, *args)


def _reflected(name: str) -> Callable[..., Any]:
    op = getattr(operator, name)
    return lambda self, other: op(as_expr(other), self.value)


class LocalVar(LocalRef):
    """One per-thread scalar (`T.alloc_var`): used as a kernel value it reads the register;
    `v[0] = x`, `v.set(x)`, `v += x` (and, in a kernel body, `v = x`) store into it."""

    @property
    def value(self) -> Expr:
        return Load(self.buffer, full_region(self.buffer).starts)

    def __tilescale_expr__(self) -> Expr:
        return self.value

    def set(self, value: Any) -> None:
        self._store(full_region(self.buffer), value)

    def __bool__(self) -> bool:
        return bool(self.value)

    __hash__ = object.__hash__

    def __iadd__(self, other: Any) -> LocalVar:
        self.set(self.value + other)
        return self

    def __isub__(self, other: Any) -> LocalVar:
        self.set(self.value - other)
        return self

    def __imul__(self, other: Any) -> LocalVar:
        self.set(self.value * other)
        return self

    def __repr__(self) -> str:
        return f"LocalVar({self.buffer})"


# A register used as a kernel value reads it: `v + 1`, `v < n`, `-v` are expressions of its read.
for _name in ("add", "sub", "mul", "floordiv", "mod", "lt", "le", "gt", "ge", "eq", "ne", "and_", "or_", "neg",
              "invert"):
    setattr(LocalVar, f"__{_name.rstrip('_')}__", _forward(_name))
for _name in ("add", "sub", "mul", "floordiv", "mod", "and_", "or_"):
    setattr(LocalVar, f"__r{_name.rstrip('_')}__", _reflected(_name))


def _alloc_local(op: str, fallback: str, shape: tuple[int, ...], dtype: Any, name: str | None) -> Buffer:
    return Buffer(buffer_name(op, name, fallback), shape, _local_dtype(dtype, op), BufferKind.LOCAL)


def alloc_local(shape: Any, dtype: Any, *, name: str | None = None) -> LocalRef:
    """Registers of each thread (`shape` elements of an integer `dtype`), uninitialised: reading an
    element this thread has not written is an error in the interpreter (garbage on the GPU)."""
    return LocalRef(_alloc_local("alloc_local", "reg", _shape(shape, "alloc_local"), dtype, name))


def alloc_var(dtype: Any, init: Any = None, *, name: str | None = None) -> LocalVar:
    """One register per thread, set to `init` (an int or kernel value) by every thread when given."""
    var = LocalVar(_alloc_local("alloc_var", "var", (1,), dtype, name))
    if init is not None:
        var.set(init)
    return var


__all__ = [
    "Else",
    "If",
    "LocalRef",
    "LocalVar",
    "all",
    "alloc_local",
    "alloc_var",
    "any",
    "get_thread_binding",
    "if_then_else",
    "thread_id",
]
