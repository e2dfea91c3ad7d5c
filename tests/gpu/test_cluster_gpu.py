"""Thread-block clusters on an H100/H200 (ts.kernel(cluster=), ir/cluster.py): a peer's shared tile as
T.copy's destination and source, the rank order of 1-, 2- and 3-D cluster shapes, and examples/gemm.py's
split-K whose splits add through shared memory in one cluster, each against a host reference on random
data (the split-K: a float64 product, and the same bits on a second run).

    pytest -q tests/gpu/test_cluster_gpu.py -o addopts=''      # one GPU
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from jax_tilescale.codegen import generate_cuda
from tests.compute.cluster_kernels import M, N, pull, rotate, rotate_reference, swap_partials, swap_partials_reference
from tests.conftest import load_example

gemm_example = load_example("gemm")
cluster_rowsum = load_example("cluster_rowsum")
SHAPES = [((4,), (2,)), ((8,), (8,)), ((2, 4), (2, 2)), ((3, 2, 2), (1, 2, 2)), ((64, 2, 2), (1, 1, 2))]


@pytest.mark.parametrize("grid,cluster", SHAPES)
@pytest.mark.parametrize("through_fragment", [True, False])
def test_rotate_in_cluster_order(grid, cluster, through_fragment):
    tiles = int(np.prod(grid))
    a = np.random.default_rng(tiles).standard_normal((tiles * M, N)).astype(np.float32)
    kern = rotate(grid, cluster, through_fragment=through_fragment, interpret=False)
    got = np.asarray(jax.jit(kern)(a))
    assert np.array_equal(got, rotate_reference(a, grid, cluster))


@pytest.mark.parametrize("grid,cluster", SHAPES)
def test_pull_from_a_peer_tile(grid, cluster):
    tiles = int(np.prod(grid))
    a = np.random.default_rng(tiles + 1).standard_normal((tiles * M, N)).astype(ml_dtypes.bfloat16)
    got = np.asarray(jax.jit(pull(grid, cluster, interpret=False))(a))
    assert np.array_equal(got, rotate_reference(a.astype(np.float32), grid, cluster))


def _inputs(m, n, k, seed):
    ka, kb = jax.random.split(jax.random.key(seed))
    return (jax.random.normal(ka, (m, k), jnp.float32).astype(jnp.bfloat16),
            jax.random.normal(kb, (k, n), jnp.float32).astype(jnp.bfloat16))


@pytest.mark.parametrize("m,n,k,cfg", [
    (128, 4096, 14336, dict(block_m=64, block_n=128, num_stages=8, threads=128, group_m=2, split_k=2)),
    (128, 4096, 4096, dict(block_m=64, block_n=128, num_stages=8, threads=128, group_m=2, split_k=4)),
    (200, 3000, 4096, dict(block_m=64, block_n=256, num_stages=5, threads=128, group_m=2, split_k=2)),  # ragged
    (64, 2048, 8192, dict(block_m=64, block_n=128, num_stages=8, threads=128, split_k=8)),
])
def test_split_k_in_a_cluster_matches_dot(m, n, k, cfg):
    kern = gemm_example.gemm(m, n, k, jnp.dtype("bfloat16"), split_reduce="cluster", **cfg)
    a, b = _inputs(m, n, k, m + 3 * n + k)
    mod = generate_cuda(kern.trace(a, b), "sm_90")
    assert mod.arch == "sm_90a" and f"__cluster_dims__(1, 1, {cfg['split_k']})" in mod.source
    first = jax.jit(kern)(a, b)
    want = np.asarray(a.astype(jnp.float32), np.float64) @ np.asarray(b.astype(jnp.float32), np.float64)
    got = np.asarray(first.astype(jnp.float32), np.float64)
    assert got.shape == want.shape and np.all(np.isfinite(got))
    assert float(np.max(np.abs(got - want))) <= 2e-2 * float(np.max(np.abs(want)))
    assert np.array_equal(np.asarray(first.astype(jnp.float32)), np.asarray(jax.jit(kern)(a, b).astype(jnp.float32)))


@pytest.mark.parametrize("m,n,k", [(64, 128, 256), (256, 1024, 4096)])
def test_a_peer_tile_loaded_into_the_register_accumulator(m, n, k):
    kern = swap_partials(m, n, k)
    a, b = _inputs(m, n, k, 17 + m)
    assert not generate_cuda(kern.trace(a, b), "sm_90").notes  # the Hopper plan: the accumulator in registers
    got = np.asarray(jax.jit(kern)(a, b), np.float64)
    want = swap_partials_reference(np.asarray(a.astype(jnp.float32)), np.asarray(b.astype(jnp.float32)))
    assert float(np.max(np.abs(got - want))) <= 1e-4 * float(np.max(np.abs(want)))


@pytest.mark.parametrize("dtype,m,n,split", [("bfloat16", 1000, 8192, 4), ("float32", 64, 1024, 8),
                                             ("float16", 9, 96, 2)])
def test_cluster_rowsum_example(dtype, m, n, split):
    mesh = jax.make_mesh((1,), ("x",), devices=jax.devices()[:1])
    assert cluster_rowsum.check(mesh, m=m, n=n, dtype=dtype, seed=m, split=split)
