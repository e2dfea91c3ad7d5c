"""Statement lists -> CUDA lines, recursively: the one place that walks a kernel body.

`EMIT` holds the code generator's rules (ir/rules.py), of two kinds (`EmitKind`):
- BLOCK `rule(stmt, ctx) -> lines`: the statement's code in the kernel body (every statement);
- ITERATION `rule(stmt, printer) -> lines`: what one thread does for the statement in one
  iteration of a `T.Parallel` body (the statements that may stand there; tile_ops.py).
The rules live in compute.py, comm.py, collectives.py, control.py and tile_ops.py; codegen/cuda.py
(the entry) imports them all. Before the table, `emit_stmt` asks the kernel's GEMM plan
(`ctx.plan`, context.GemmPlan) once whether the statement is its own (a loop it lowers with tensor
cores, a statement on a fragment it keeps in registers); then the plan's lines replace the rule's.
A rule whose statement holds nested statements (a loop, an if)
emits them with `emit_body`, so nested statements get the same treatment as top-level ones: a
comment with the statement, a `#line` directive pointing at the user's source, and the
`ts_where` string that run-time error messages print.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any

from ..ir.nodes import SourceLoc, Stmt
from ..ir.printer import format_stmt
from ..ir.rules import RuleTable
from .common import c_string, comment, indent
from .context import Ctx
from .expr_printer import WHERE_NAME


class EmitKind(enum.Enum):
    """The kinds of code generator rules (see the module doc)."""

    BLOCK = "block"
    ITERATION = "iteration"


EMIT: RuleTable[Callable[..., Any]] = RuleTable("emit", default_kind=EmitKind.BLOCK)


class _Restore:
    """Placeholder for a `#line` that returns to the generated file (numbered at assembly)."""

    def __str__(self) -> str:  # pragma: no cover - replaced before the text is joined
        return "#line"


RESTORE = _Restore()


def line_directive(loc: SourceLoc) -> str | None:
    return f"#line {loc.lineno} {c_string(loc.filename)}" if loc.lineno > 0 else None


def emit_stmt(stmt: Stmt, ctx: Ctx, label: str) -> list:
    body = ctx.plan.lines(stmt, ctx) if ctx.plan is not None else None
    if body is None:
        body = EMIT.lookup(stmt)(stmt, ctx)
    if any(WHERE_NAME in line for line in body if isinstance(line, str)):  # the user's line, for errors
        body = [f"const char* const {WHERE_NAME} = {c_string(str(stmt.loc))};", *body]
    text = format_stmt(stmt)
    first_line = text.splitlines()[0] if text else stmt.op_name
    out: list = ["", comment(f"[{label}] {first_line}    at {stmt.loc}")]
    directive = line_directive(stmt.loc)
    if directive is not None:
        out.append(directive)
    out += ["{", *indent(body), "}"]
    if directive is not None:
        out.append(RESTORE)
    return out


def emit_body(stmts: tuple[Stmt, ...], ctx: Ctx, prefix: str = "") -> list:
    """Lines for `stmts` in order (may contain RESTORE markers; `codegen.cuda` resolves them)."""
    out: list = []
    for n, stmt in enumerate(stmts):
        out += emit_stmt(stmt, ctx, f"{prefix}{n}")
    return out


__all__ = ["EMIT", "RESTORE", "EmitKind", "emit_body", "emit_stmt", "indent", "line_directive"]
