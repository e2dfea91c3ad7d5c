"""The ring reduce-scatter of benchmarks/bench_interpreter.py at a small size, through jax.jit and
shard_map on simulated devices, against jax.lax.psum_scatter(tiled=True) on random data."""

from __future__ import annotations

import importlib.util
import sys

import jax
import pytest

from tests.conftest import ROOT


def bench_module():
    name = "bench_interpreter"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / "bench_interpreter.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


@pytest.mark.parametrize("npes, m, block_m", [(8, 16, 8), (4, 24, 8), (2, 8, 8)])
def test_ring_reduce_scatter_matches_psum_scatter(npes: int, m: int, block_m: int) -> None:
    bench = bench_module()
    mesh = jax.make_mesh((npes,), ("x",), devices=jax.devices()[:npes])
    ok, _ = bench.check(mesh, m, n=40, block_m=block_m, seed=npes)
    assert ok
