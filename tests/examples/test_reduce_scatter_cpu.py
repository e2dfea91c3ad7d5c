"""examples/reduce_scatter.py (the ring reduce-scatter) on 2 and 4 simulated devices, float32 and
bf16, with and without a ragged last block, against jax.lax.psum_scatter(tiled=True) and numpy."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from tests.conftest import load_example

rs = load_example("reduce_scatter")


def mesh_of(n: int) -> jax.sharding.Mesh:
    return jax.make_mesh((n,), ("x",), devices=jax.devices()[:n])


@pytest.mark.parametrize("npes", [2, 4])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("m, block_m", [(64, 32), (40, 16)])  # 40 rows: two blocks of 16 and a ragged one of 8
def test_ring_reduce_scatter_matches_psum_scatter(npes, dtype, m, block_m):
    verdict = rs.check(mesh_of(npes), m=m, n=48, dtype=dtype, block_m=block_m, seed=npes + m)
    assert verdict, verdict


def test_ring_reduce_scatter_against_numpy():
    """Independent of jax.lax: PE p's output is the float64 sum of every PE's rows [p * m, (p + 1) * m)."""
    npes, m, n = 4, 24, 16
    mesh = mesh_of(npes)
    x = np.random.default_rng(3).standard_normal((npes, npes * m, n)).astype(np.float32)
    f = rs.reduce_scatter_fn(mesh, m, n, jnp.float32, block_m=16)  # blocks of 16 and 8 rows
    got = np.asarray(f(jax.device_put(x.reshape(-1, n), NamedSharding(mesh, P("x"))))).reshape(npes, m, n)
    want = x.astype(np.float64).sum(axis=0).reshape(npes, m, n)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * np.abs(want).max())


def test_the_check_catches_a_wrong_sum():
    """The example's check is not vacuous: a kernel that leaves out one PE's contribution fails it."""
    mesh = mesh_of(2)
    real = rs.reduce_scatter_fn
    try:
        rs.reduce_scatter_fn = lambda mesh, m, n, dtype, block_m=64: jax.jit(jax.shard_map(
            lambda a: a[: a.shape[0] // 2], mesh=mesh, in_specs=P("x"), out_specs=P("x")))
        assert not rs.check(mesh, m=32, n=16, dtype="float32", block_m=16)
    finally:
        rs.reduce_scatter_fn = real
