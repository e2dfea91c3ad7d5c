"""The package's import graph: no cycles, and data flowing one way (docs/architecture.md).

Every import of every module counts: module level, inside functions, and under TYPE_CHECKING (an
AST walk of the whole file), since an import that only works inside a function is still a cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "jax_tilescale"
NAME = PACKAGE.name

# Cycles that are allowed: none.
ALLOWED_CYCLES: set[frozenset[str]] = set()


def _modules() -> dict[str, Path]:
    out = {}
    for p in PACKAGE.rglob("*.py"):
        parts = p.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = p
    return out


MODULES = _modules()


def _imports(module: str, path: Path) -> set[str]:
    """The package's modules that `module` imports anywhere in its file."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")
            if node.level:
                base = base[: len(base) - (node.level - 1)]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            names = [f"{prefix}.{a.name}" if f"{prefix}.{a.name}" in MODULES else prefix for a in node.names]
        else:
            continue
        out |= {n for n in names if n in MODULES and n != module}
    return out


GRAPH = {m: _imports(m, p) for m, p in MODULES.items()}


def strongly_connected(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """Tarjan's components with more than one module (the cycles)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[frozenset[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(frozenset(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_the_graph_sees_function_level_and_type_checking_imports(tmp_path: Path) -> None:
    fake = tmp_path / "fake.py"
    fake.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..language import refs\n\n\n"
                    "def f():\n    from ..runtime.distributed import initialize\n")
    found = _imports("jax_tilescale.ir.fake", fake)
    assert found == {"jax_tilescale.language.refs", "jax_tilescale.runtime.distributed"}
    assert strongly_connected({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [frozenset({"a", "b"})]


def test_no_cycles_in_ir() -> None:
    ir = {m: {d for d in deps if _layer(d) == "ir"} for m, deps in GRAPH.items() if _layer(m) == "ir"}
    assert strongly_connected(ir) == []


def test_no_cycles_in_the_package_but_the_listed_ones() -> None:
    cycles = strongly_connected(GRAPH)
    assert [sorted(c) for c in cycles if c not in ALLOWED_CYCLES] == []


# (layer, layers it must not import)
LAYERING = [
    ("ir", {"language", "interpret", "codegen", "compiler", "runtime", "kernel", "launch", "testing", "platform",
            "ast_rewrite", "_worker"}),
    ("language", {"interpret", "codegen", "compiler", "runtime", "kernel", "launch"}),
    ("interpret", {"codegen", "compiler", "language"}),
    ("codegen", {"interpret", "runtime", "language"}),
    ("tune", {"interpret", "codegen", "language", "runtime", "kernel", "launch", "lowering", "ir"}),
]


@pytest.mark.parametrize("layer, forbidden", LAYERING, ids=[layer for layer, _ in LAYERING])
def test_layers_import_only_downwards(layer: str, forbidden: set[str]) -> None:
    bad = sorted(f"{m} imports {d}" for m, deps in GRAPH.items() if _layer(m) == layer
                 for d in deps if _layer(d) in forbidden)
    assert bad == []
