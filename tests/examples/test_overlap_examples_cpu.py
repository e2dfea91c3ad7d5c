"""AllGather-GEMM, GEMM-ReduceScatter and the tensor-parallel MLP block on the CPU interpreter (2 and
4 simulated devices, ragged shapes), against jax.lax's all_gather + jnp.dot and jnp.dot +
psum_scatter (evaluated on the host in float32), on random data."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import jax_tilescale as ts
from tests.conftest import load_example

ag = load_example("allgather_gemm")
rs = load_example("gemm_reducescatter")
mlp = load_example("tp_mlp")
SMALL = dict(block_m=64, block_n=64, block_k=64, threads=128)


def _mesh(npes: int) -> jax.sharding.Mesh:
    return jax.make_mesh((npes,), ("x",), devices=jax.devices()[:npes])


def _ag_reference(a, b):
    return jnp.dot(jax.lax.all_gather(a, "x", axis=0, tiled=True), b)


def _rs_reference(a, b):
    return jax.lax.psum_scatter(jnp.dot(a, b), "x", scatter_dimension=0, tiled=True)


@pytest.mark.parametrize("npes", [2, 4])
# ragged k and n per PE; the last: 3 row blocks a shard in groups of 2 (the grouped order's last group partial)
@pytest.mark.parametrize("m,k,n,group_m", [(128, 200, 72, 8), (64, 64, 130, 8), (192, 64, 136, 2)])
def test_allgather_gemm_matches_all_gather_and_dot(npes, m, k, n, group_m):
    mesh = _mesh(npes)
    rng = np.random.default_rng(m + k + n + npes)
    a = ts.testing.random_array(rng, (npes * m, k), "bfloat16")
    b = ts.testing.random_array(rng, (k, npes * n), "bfloat16")
    (want,) = ts.testing.lax_on_host(_ag_reference, mesh, (P("x", None), P(None, "x")), P(None, "x"))(
        np.asarray(a, np.float32), np.asarray(b, np.float32))
    got = ag.ag_gemm_fn(mesh, **SMALL, group_m=group_m)(ts.testing.place(a, mesh, P("x", None)),
                                                      ts.testing.place(b, mesh, P(None, "x")))
    assert ts.testing.compare(got, want, "close to all_gather + dot", atol_of_max=2e-2)


def test_allgather_gemm_refuses_row_blocks_across_shards():
    with pytest.raises(ValueError, match="multiple of block_m"):
        ag.allgather_gemm(100, 64, 64, 2, jnp.bfloat16, block_m=64)


@pytest.mark.parametrize("npes", [2, 4])
# ragged rows, k and n; the last: 4 row blocks an owner in groups of 3 (the grouped order's last group partial)
@pytest.mark.parametrize("m_per_pe,k,n,group_m", [(100, 72, 136, 8), (64, 200, 64, 8), (200, 64, 136, 3)])
def test_gemm_reducescatter_matches_dot_and_psum_scatter(npes, m_per_pe, k, n, group_m):
    mesh = _mesh(npes)
    rng = np.random.default_rng(m_per_pe + k + n + npes)
    a = ts.testing.random_array(rng, (npes * m_per_pe, npes * k), "bfloat16")
    b = ts.testing.random_array(rng, (npes * k, n), "bfloat16")
    (want,) = ts.testing.lax_on_host(_rs_reference, mesh, (P(None, "x"), P("x", None)), P("x", None))(
        np.asarray(a, np.float32), np.asarray(b, np.float32))
    got = rs.gemm_rs_fn(mesh, **SMALL, group_m=group_m)(ts.testing.place(a, mesh, P(None, "x")),
                                                      ts.testing.place(b, mesh, P("x", None)))
    assert ts.testing.compare(got, want, "close to dot + psum_scatter", atol_of_max=2e-2)


@pytest.mark.parametrize("npes", [2, 4])
def test_tp_mlp_matches_the_xla_block(npes):
    assert mlp.check(_mesh(npes), seed=npes)
