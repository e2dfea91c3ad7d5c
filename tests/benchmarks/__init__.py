"""Tests of benchmarks/: `load_bench` imports a benchmark script as a module, as the scripts import each
other (examples/ and benchmarks/_collective.py on their own paths)."""

from __future__ import annotations

import importlib.util
import sys

from tests.conftest import ROOT

BENCH = ROOT / "benchmarks"


def load_bench(name: str):
    """benchmarks/<name>.py as a module (its own imports of examples/ and _collective included)."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]
