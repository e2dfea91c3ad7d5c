"""Every statement of the language has its rule in every pass (ir/rules.py, docs/architecture.md
"Adding a statement"): a statement added without one fails here, not in a user's kernel."""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass

import numpy as np
import pytest

import jax_tilescale
from jax_tilescale.codegen.body import EMIT, EmitKind
from jax_tilescale.interpret.block import INTERPRET, RunKind
from jax_tilescale.ir import verify_kernel
from jax_tilescale.ir.buffers import Buffer, BufferKind
from jax_tilescale.ir.kernel_ir import KernelIR
from jax_tilescale.ir.nodes import Stmt
from jax_tilescale.ir.printer import PRINT, format_kernel
from jax_tilescale.ir.rules import MissingRuleError, RuleTable
from jax_tilescale.ir.verify_base import VERIFY


def concrete_statements() -> list[type[Stmt]]:
    """Every statement class of the package (all of it imported first), subclasses included."""
    for info in pkgutil.walk_packages(jax_tilescale.__path__, "jax_tilescale."):
        importlib.import_module(info.name)
    out, todo = [], list(Stmt.__subclasses__())
    while todo:
        cls = todo.pop()
        todo += cls.__subclasses__()
        if cls.__module__.startswith("jax_tilescale."):
            out.append(cls)
    return sorted(set(out), key=lambda c: c.__name__)


def missing_rules(types: list[type[Stmt]]) -> dict[str, list[str]]:
    """Per pass, the statement types that lack their rule. Statements that may stand in a
    `T.Parallel` body also need the per-iteration rules of both backends."""
    in_parallel = [t for t in types if t.in_parallel]
    found = {
        "verify": VERIFY.missing(types),
        "print": PRINT.missing(types),
        "interpret": INTERPRET.missing(types, RunKind.STATEMENT, RunKind.BODY),
        "interpret per iteration": INTERPRET.missing(in_parallel, RunKind.ITERATION),
        "emit": EMIT.missing(types),
        "emit per iteration": EMIT.missing(in_parallel, EmitKind.ITERATION),
    }
    return {name: [t.__name__ for t in ts] for name, ts in found.items() if ts}


def test_the_walk_finds_the_statements() -> None:
    names = {t.__name__ for t in concrete_statements()}
    # a sample of every family: communication, compute, per-thread code, element-wise tiles
    assert {"Put", "Fence", "Broadcast", "Copy", "Gemm", "Loop", "If", "LocalStore", "Parallel", "Reduce",
            "CumSum"} <= names
    assert "Stmt" not in names


def test_every_statement_has_a_rule_in_every_pass() -> None:
    assert missing_rules(concrete_statements()) == {}


@dataclass(frozen=True)
class Forgotten(Stmt):
    """A statement added to the language without its rules."""

    op_name = "forgotten"
    in_parallel = True


def test_a_statement_without_rules_is_reported_for_every_pass() -> None:
    missing = missing_rules([*concrete_statements(), Forgotten])
    assert missing == {name: ["Forgotten"] for name in (
        "verify", "print", "interpret", "interpret per iteration", "emit", "emit per iteration")}


def test_a_pass_meeting_a_statement_without_a_rule_names_the_pass_and_the_statement() -> None:
    kernel = KernelIR("k", (), (Buffer("out0", (4,), np.dtype(np.float32), BufferKind.OUTPUT),), (), (Forgotten(),),
                      (1,), 32, ("x",), 1)
    with pytest.raises(MissingRuleError, match=r"the verify pass has no rule for Forgotten \(`forgotten` at"):
        verify_kernel(kernel)
    with pytest.raises(MissingRuleError, match="the print pass has no rule for Forgotten"):
        format_kernel(kernel)
    with pytest.raises(MissingRuleError, match="the interpret pass has no body or statement rule for Forgotten"):
        INTERPRET.lookup_entry(Forgotten(), RunKind.BODY, RunKind.STATEMENT)
    with pytest.raises(MissingRuleError, match="the emit pass has no iteration rule for Forgotten"):
        EMIT.lookup(Forgotten(), EmitKind.ITERATION)


def test_an_interpreter_rule_is_a_statement_or_a_body_rule_not_both() -> None:
    for t in concrete_statements():
        assert not (INTERPRET.has(t, RunKind.STATEMENT) and INTERPRET.has(t, RunKind.BODY)), t.__name__


def test_rule_tables_register_once_and_count_explicit_refusals() -> None:
    table: RuleTable = RuleTable("emit")

    @table.register(Forgotten, refusal=True)
    def _refuse(s: Stmt, ctx: object) -> list[str]:
        raise NotImplementedError("the backend does not support forgotten")

    assert table.missing([Forgotten]) == []
    assert table.lookup_entry(Forgotten()).refusal
    with pytest.raises(RuntimeError, match="already has a rule for Forgotten"):
        table.register(Forgotten)(lambda s, ctx: [])
    with pytest.raises(TypeError, match="at least one statement type"):
        table.register()


def test_classifications_agree_with_each_other() -> None:
    for t in concrete_statements():
        if t.team_collective:
            assert t.communicates, t.__name__
        if t.per_thread:
            assert t.in_thread_branch, t.__name__
