"""Index expressions as CUDA C++ (int64 arithmetic with Python's `//` and `%`).

Every printed expression has type `int64_t`: run-time variables are declared `int64_t` at the
top of the kernel and every helper takes and returns `int64_t`, so no sub-expression is ever
evaluated in 32 bits. Floor division and modulo go through `ts_floordiv`/`ts_mod` (defined in
tilescale_device.cuh), which round like Python, because the CPU interpreter, the reference,
does; they take the name of a `const char*` holding the user's source line, for the
division-by-zero message.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np

from ..ir.buffers import CHANGING_KINDS
from ..ir.expr import BinOp, BinOpKind, Const, Expr, Load, Var, VarKind, children

# Names the kernel prologue declares for the run-time variables.
GRID_VAR_NAMES = ("ts_bx", "ts_by", "ts_bz")
PE_VAR_NAME = "ts_pe"
# This launch's number (ts_launch_seq), read once, first thing, by every thread of a kernel that communicates
# (0 in a plain kernel): its load is issued before the kernel's work, and no later statement waits for it.
SEQ_NAME = "ts_seq"
WHERE_NAME = "ts_where"  # a `const char*` in scope of every statement: "file.py:LINE"

_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1
# C element type of each loadable dtype (T.load; uint64: signal words).
LOAD_TYPES = {
    np.dtype(np.int8): "int8_t",
    np.dtype(np.int16): "int16_t",
    np.dtype(np.int32): "int32_t",
    np.dtype(np.int64): "int64_t",
    np.dtype(np.uint8): "uint8_t",
    np.dtype(np.uint16): "uint16_t",
    np.dtype(np.uint32): "uint32_t",
    np.dtype(np.uint64): "uint64_t",
}


def c_identifier(name: str) -> str:
    ident = re.sub(r"\W", "_", name, flags=re.ASCII)
    return ident if ident and not ident[0].isdigit() else f"_{ident}"


def buffer_pointer_name(name: str) -> str:
    """The kernel's `unsigned char*` base of a buffer (`p_` keeps buffer names apart from the
    generator's own `ts_` names and C keywords). Loads use it; the prologue declares it."""
    return f"p_{c_identifier(name)}"


def var_name(v: Var) -> str:
    if v.kind is VarKind.PROGRAM_ID:
        return GRID_VAR_NAMES[v.axis]
    if v.kind is VarKind.PE:
        return PE_VAR_NAME
    if v.kind is VarKind.LOOP:
        return f"ts_i{v.axis}"
    if v.kind is VarKind.NODE:  # the launcher numbers PEs node-major on nodes of equal size
        return "((long long)(nvshmem_my_pe() / nvshmem_team_n_pes(NVSHMEMX_TEAM_NODE)))"
    if v.kind is VarKind.NODE_COUNT:
        return "((long long)(nvshmem_n_pes() / nvshmem_team_n_pes(NVSHMEMX_TEAM_NODE)))"
    raise NotImplementedError(f"no CUDA spelling for kernel variable {v!r}")


def with_loop_var(text: str, v: Var, value: str) -> str:
    """C text printed from an expression, with loop variable `v` (a loop's own counter, whole words only) read as
    the C expression `value`: the same expression at another iteration."""
    return re.sub(rf"\b{re.escape(var_name(v))}\b", f"({value})", text)


def const_literal(value: int) -> str:
    # Literals outside int32 need a suffix; the rest are promoted by the int64 operand beside them.
    text = str(value) if _INT32_MIN <= value <= _INT32_MAX else f"{value}LL"
    return f"({text})" if value < 0 else text


def _infix(symbol: str) -> Callable[[str, str], str]:
    return lambda a, b: f"({a} {symbol} {b})"


def _call(fn: str, with_where: bool) -> Callable[[str, str], str]:
    if with_where:
        return lambda a, b: f"{fn}({a}, {b}, {WHERE_NAME})"
    return lambda a, b: f"{fn}({a}, {b})"


BINOP_RULES: dict[BinOpKind, Callable[[str, str], str]] = {
    BinOpKind.ADD: _infix("+"),
    BinOpKind.SUB: _infix("-"),
    BinOpKind.MUL: _infix("*"),
    BinOpKind.FLOORDIV: _call("ts_floordiv", with_where=True),
    BinOpKind.MOD: _call("ts_mod", with_where=True),
    BinOpKind.MIN: _call("ts_min", with_where=False),
    BinOpKind.MAX: _call("ts_max", with_where=False),
}


# Spellings other modules add (codegen/control.py: conditions, registers, the thread index): each
# hook returns the C text of the expressions it knows and None for the others.
EXPR_HOOKS: list[Callable[[Expr], str | None]] = []


def c_expr(e: Expr) -> str:
    """CUDA spelling of `e`; an `int64_t` value whenever it contains a variable."""
    for hook in EXPR_HOOKS:
        text = hook(e)
        if text is not None:
            return text
    if isinstance(e, Const):
        return const_literal(e.value)
    if isinstance(e, Var):
        return var_name(e)
    if isinstance(e, BinOp):
        return BINOP_RULES[e.op](c_expr(e.lhs), c_expr(e.rhs))
    if isinstance(e, Load):
        return _load(e)
    raise TypeError(f"not an index expression: {e!r}")


def _load(e: Load) -> str:
    """`ts_load<T>(base, flat index)` of an input, each run-time index checked against its extent.

    Memory that changes while the kernel runs (outputs, symmetric scratch, signal words: a peer's
    put, another block) is read with a volatile load where the statement stands: PTX's relaxed
    load at system scope, never cached in L1, never hoisted or merged with an earlier read, so it
    sees what the wait before the statement delivered (that wait acquires, and its block barrier
    passes the ordering to every thread of the block). Spelled inline, so the device header and
    the code of kernels without such loads stay as they were."""
    shape = e.buffer.shape
    terms = []
    stride = 1
    for index, extent in reversed(list(zip(e.indices, shape))):
        if isinstance(index, Const):
            term = const_literal(index.value)  # checked when traced
        else:
            term = f"ts_bound({c_expr(index)}, {extent}, {WHERE_NAME})"
        if not (isinstance(index, Const) and index.value == 0):
            terms.append(term if stride == 1 else f"{term} * {stride}")
        stride *= extent
    flat = " + ".join(reversed(terms)) if terms else "0"
    ctype, base = LOAD_TYPES[e.buffer.dtype], buffer_pointer_name(e.buffer.name)
    if e.buffer.kind in CHANGING_KINDS:
        return f"((int64_t)reinterpret_cast<const volatile {ctype}*>({base})[{flat}])"
    return f"ts_load<{ctype}>({base}, {flat})"


def c_int64(e: Expr) -> str:
    """Like `c_expr`, but always an `int64_t` (constants included)."""
    return f"(int64_t){c_expr(e)}" if isinstance(e, Const) else c_expr(e)


def uses_where(e: Expr) -> bool:
    """Whether the printed form of `e` refers to WHERE_NAME."""
    if isinstance(e, BinOp):
        return e.op in (BinOpKind.FLOORDIV, BinOpKind.MOD) or uses_where(e.lhs) or uses_where(e.rhs)
    if isinstance(e, Load):
        return True
    return any(uses_where(c) for c in children(e))  # conditions, selects (ir/expr.py)
