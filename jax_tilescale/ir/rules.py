"""Rule tables: which function of a pass handles each statement type.

Each pass over the IR (verify, print, interpret, emit CUDA) keeps its rules in exactly one
`RuleTable`. A rule registers itself where it is defined, with the table's decorator:

    VERIFY = RuleTable("verify")                       # ir/verify_base.py

    @VERIFY.register(Copy)                             # ir/verify_compute.py
    def _verify_copy(s: Copy, kernel: KernelIR, ranges: Ranges) -> None: ...

and the pass's entry module (ir/verify.py, ir/printer.py, interpret/evaluator.py,
codegen/cuda.py) imports every module that holds its rules at its top, so the table is complete
before the pass runs. `lookup` raises `MissingRuleError`, naming the pass and the statement;
`missing` lists the statement types a table has no rule for (tests/ir/test_statement_registry.py
asks it about every concrete statement of the language).

A pass may keep rules of several kinds (an enum of its own): the interpreter has rules that run a
statement, rules that run a statement's nested bodies, and rules that run a statement for every
iteration of a `T.Parallel` body. Rules are keyed by (statement type, kind). A rule that refuses a
statement with a clear error (a backend that does not support it) is registered like any other
with `refusal=True`: it counts as the pass's rule, and the flag says what it does.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from ..errors import TileScaleError

F = TypeVar("F", bound=Callable[..., Any])


class MissingRuleError(TileScaleError, LookupError):
    """Internal error: a pass met a statement type it has no rule for (a statement added to the
    language without its rule in every pass)."""


@dataclass(frozen=True)
class Rule(Generic[F]):
    """One entry of a rule table."""

    fn: F
    kind: enum.Enum | None
    refusal: bool = False  # the rule raises a clear error: the pass does not support the statement


class RuleTable(Generic[F]):
    """The rules of one pass, keyed by (statement type, kind); the exact type decides (a subclass
    of a statement needs rules of its own)."""

    def __init__(self, pass_name: str, default_kind: enum.Enum | None = None):
        self.pass_name = pass_name
        self.default_kind = default_kind
        self._rules: dict[tuple[type, enum.Enum | None], Rule[F]] = {}

    def register(self, *stmt_types: type, kind: enum.Enum | None = None, refusal: bool = False) -> Callable[[F], F]:
        """Decorator: the function is this pass's rule (of `kind`, default the table's) for every
        type of `stmt_types`."""
        if not stmt_types:
            raise TypeError(f"{self.pass_name}: register() needs at least one statement type")
        key_kind = self.default_kind if kind is None else kind

        def decorate(fn: F) -> F:
            for t in stmt_types:
                old = self._rules.get((t, key_kind))
                if old is not None:
                    raise RuntimeError(
                        f"the {self.pass_name} pass already has a {self._kind_name(key_kind)}rule for {t.__name__} "
                        f"({old.fn.__module__}.{old.fn.__qualname__}); {fn.__module__}.{fn.__qualname__} would "
                        "replace it"
                    )
                self._rules[(t, key_kind)] = Rule(fn, key_kind, refusal)
            return fn

        return decorate

    def lookup_entry(self, stmt: Any, *kinds: enum.Enum | None) -> Rule[F]:
        """The rule for `stmt` of the first of `kinds` (default: the table's kind) that has one."""
        for k in kinds or (self.default_kind,):
            rule = self._rules.get((type(stmt), k))
            if rule is not None:
                return rule
        wanted = " or ".join(self._kind_name(k).strip() for k in kinds if k is not None)
        raise MissingRuleError(
            f"internal: the {self.pass_name} pass has no {wanted + ' ' if wanted else ''}rule for "
            f"{type(stmt).__name__} (`{getattr(stmt, 'op_name', '?')}` at {getattr(stmt, 'loc', '?')}); every "
            "statement type registers one in every pass (docs/architecture.md, 'Adding a statement')"
        )

    def lookup(self, stmt: Any, *kinds: enum.Enum | None) -> F:
        """The rule function for `stmt` (see `lookup_entry`)."""
        return self.lookup_entry(stmt, *kinds).fn

    def has(self, stmt_type: type, *kinds: enum.Enum | None) -> bool:
        return any((stmt_type, k) in self._rules for k in kinds or (self.default_kind,))

    def missing(self, stmt_types: Iterable[type], *kinds: enum.Enum | None) -> list[type]:
        """The types of `stmt_types` without a rule of any of `kinds` (default: the table's kind)."""
        return [t for t in stmt_types if not self.has(t, *kinds)]

    @staticmethod
    def _kind_name(kind: enum.Enum | None) -> str:
        return "" if kind is None else f"{kind.name.lower()} "

    def __repr__(self) -> str:
        return f"RuleTable({self.pass_name!r}, {len(self._rules)} rules)"
