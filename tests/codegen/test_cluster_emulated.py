"""Thread-block clusters' generated CUDA run on the CPU emulator (tests/codegen/emulator: a cluster's blocks at once,
each with its own shared memory; the cluster barrier, `mapa`, a peer's tile through generic loads and stores): the
kernels tests/gpu/test_cluster_gpu.py runs on the H200 (a peer's tile as the destination and the source of a copy
in 1-, 2- and 3-D cluster shapes, a peer's tile loaded into wgmma's accumulator) and examples/cluster_rowsum.py,
each against its host reference, bit for bit."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from jax_tilescale.codegen import generate_cuda
from tests.codegen import emulator
from tests.codegen.gemm_cases import np_dtype
from tests.compute.cluster_kernels import M, N, pull, rotate, rotate_reference, swap_partials, swap_partials_reference
from tests.conftest import load_example

cluster_rowsum = load_example("cluster_rowsum")
S = jax.ShapeDtypeStruct
SHAPES = [((4,), (2,)), ((8,), (8,)), ((2, 4), (2, 2)), ((3, 2, 2), (1, 2, 2)), ((4, 2, 2), (1, 1, 2))]


@pytest.fixture(autouse=True)
def _emulator():
    emulator.require()


def _run(kern, inputs: list[np.ndarray]) -> tuple[object, np.ndarray]:
    ir = kern.trace(*(S(x.shape, x.dtype) for x in inputs))
    mod = generate_cuda(ir, "sm_90")
    assert "__cluster_dims__" in mod.source
    out = ir.outputs[0]
    (got,) = emulator.run(mod, inputs, [np.full(out.shape, np.nan, np_dtype(out.dtype))])
    return mod, got


@pytest.mark.parametrize("grid,cluster", SHAPES)
@pytest.mark.parametrize("through_fragment", [True, False])
def test_rotate_in_cluster_order(grid, cluster, through_fragment):
    tiles = int(np.prod(grid))
    a = np.random.default_rng(tiles).standard_normal((tiles * M, N)).astype(np.float32)
    _, got = _run(rotate(grid, cluster, through_fragment=through_fragment), [a])
    assert np.array_equal(got, rotate_reference(a, grid, cluster))


@pytest.mark.parametrize("grid,cluster", SHAPES)
def test_pull_from_a_peer_tile(grid, cluster):
    tiles = int(np.prod(grid))
    a = np.random.default_rng(tiles + 1).standard_normal((tiles * M, N)).astype(ml_dtypes.bfloat16)
    _, got = _run(pull(grid, cluster), [a])
    assert np.array_equal(got, rotate_reference(a.astype(np.float32), grid, cluster))


@pytest.mark.parametrize("m,n,k", [(64, 128, 256), (128, 256, 512)])
def test_a_peer_tile_loaded_into_the_register_accumulator(m, n, k):
    rng = np.random.default_rng(m)
    a, b = (rng.integers(-3, 4, s).astype(ml_dtypes.bfloat16) for s in ((m, k), (k, n)))  # exact fp32 sums
    mod, got = _run(swap_partials(m, n, k), [a, b])
    assert mod.arch == "sm_90a" and not mod.notes  # the Hopper plan: the accumulator in registers
    assert np.array_equal(got.astype(np.float64), swap_partials_reference(a.astype(np.float32), b.astype(np.float32)))


@pytest.mark.parametrize("dtype,m,n,split", [("bfloat16", 100, 2048, 4), ("float32", 64, 1024, 8),
                                             ("float16", 9, 96, 2)])
def test_cluster_rowsum_example(dtype, m, n, split):
    x = np.random.default_rng(m).integers(-3, 4, (m, n)).astype(np.dtype(dtype) if dtype != "bfloat16"
                                                                 else ml_dtypes.bfloat16)
    _, got = _run(cluster_rowsum.rowsum(m, n, jnp.dtype(dtype), split=split), [x])
    want = x.astype(np.float64).sum(axis=1).astype(x.dtype)  # an exact sum, rounded once
    assert np.array_equal(got, want)


def test_a_missing_cluster_meeting_is_a_deadlock_report(monkeypatch):
    """One block of each cluster skips the final meeting (the code generator puts one at the end so that no block's
    shared memory goes while a peer may still address it): the others' meeting never completes, and the emulator
    says which barrier and how many threads arrived."""
    monkeypatch.setattr(emulator, "WAIT_S", 2)
    kern = rotate((4,), (2,))
    a = np.zeros((4 * M, N), np.float32)
    mod = generate_cuda(kern.trace(S(a.shape, a.dtype)), "sm_90")
    src = mod.source.replace("ts_cluster_sync();", "if (ts_cluster_rank() == 0) ts_cluster_sync();")
    assert src != mod.source
    with pytest.raises(RuntimeError, match=r"(?s)deadlock in the cluster.*the cluster barrier: 128 of 256 threads"):
        emulator.run(dataclasses.replace(mod, source=src), [a], [np.zeros_like(a)])
