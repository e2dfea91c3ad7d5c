"""Examples compute their host references on a device of this process: under the launcher (one
process per GPU) `jax.devices("cpu")` lists every process's CPU device, and `[0]` is process 0's,
which every other process cannot read back (examples/gemm_allreduce_view.py failed so on rank 1,
two PEs on one H200, 2026-12-01: "Fetching value for `jax.Array` that spans non-addressable
devices"). A multi-process CPU run is refused, so this reads the examples' code instead."""

from __future__ import annotations

import ast

from tests.conftest import ROOT


def _global_device_indexing(tree: ast.AST) -> list[int]:
    """Lines that pick one CPU device from the global list, jax.devices("cpu")[i] (a mesh over a slice
    of the global list is right: meshes span processes)."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Call):
            f = node.value.func
            cpu = [a for a in node.value.args if isinstance(a, ast.Constant) and a.value == "cpu"]
            if isinstance(f, ast.Attribute) and f.attr == "devices" and isinstance(f.value, ast.Name) \
                    and f.value.id == "jax" and cpu and not isinstance(node.slice, ast.Slice):
                lines.append(node.lineno)
    return lines


def test_examples_take_host_devices_of_this_process() -> None:
    bad = {}
    for path in sorted((ROOT / "examples").rglob("*.py")):
        lines = _global_device_indexing(ast.parse(path.read_text()))
        if lines:
            bad[str(path.relative_to(ROOT))] = lines
    assert not bad, f"use jax.local_devices(backend='cpu')[i], not jax.devices('cpu')[i]: {bad}"
