"""The examples of issue 3's primitives on 2, 4 and 8 simulated CPU devices, through the
interpreter, on random data (each example checks itself against jax.lax), plus one independent
numpy check of the all-to-all."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from tests.conftest import load_example

all_to_all = load_example("all_to_all")
put_block = load_example("primitives/put_block")
get_block = load_example("primitives/get_block")
sync = load_example("primitives/sync")
queries = load_example("nvshmem_queries")

PES = [2, 4, 8]


def mesh_of(n: int) -> jax.sharding.Mesh:
    return jax.make_mesh((n,), ("x",), devices=jax.devices()[:n])


@pytest.mark.parametrize("npes", PES)
def test_all_to_all_matches_lax_all_to_all(npes: int) -> None:
    assert all_to_all.check(mesh_of(npes), tokens=32, hidden=32, dtype="float32", seed=npes)


@pytest.mark.parametrize("npes", [2, 3])
def test_all_to_all_with_offsets_from_the_host(npes: int) -> None:
    """The form the GPU suite runs with two PEs sharing one GPU (no XLA collective on the devices)."""
    assert all_to_all.check(mesh_of(npes), tokens=24, hidden=16, dtype="bfloat16", seed=10 + npes, offsets="host")


def test_recv_offsets_on_host_are_what_the_all_gather_computes() -> None:
    splits = np.array([[3, 0, 5], [1, 2, 0], [4, 4, 4]])
    assert all_to_all.recv_offsets_on_host(splits).tolist() == [[0, 0, 0], [3, 0, 5], [4, 2, 5]]
    with pytest.raises(ValueError, match="offsets must be"):
        all_to_all.dispatch_fn(mesh_of(2), 8, 8, np.dtype(np.float32), offsets="nccl")


def test_all_to_all_against_numpy() -> None:
    """Independent of the lax reference: segments packed in source order, then zeros."""
    npes, tokens, hidden = 4, 16, 8
    mesh = mesh_of(npes)
    rng = np.random.default_rng(7)
    splits = all_to_all.random_splits(rng, npes, tokens)
    x = rng.standard_normal((npes * tokens, hidden)).astype(np.float32)
    f = all_to_all.dispatch_fn(mesh, tokens, hidden, np.dtype(np.float32))
    got = np.asarray(f(jax.device_put(x, NamedSharding(mesh, P("x"))),
                       jax.device_put(splits.reshape(-1), NamedSharding(mesh, P("x")))))
    got = got.reshape(npes, npes * tokens, hidden)
    xs = x.reshape(npes, tokens, hidden)
    starts = np.concatenate([np.zeros((npes, 1), int), np.cumsum(splits, axis=1)], axis=1)
    for r in range(npes):
        want = np.concatenate([xs[s][starts[s, r] : starts[s, r + 1]] for s in range(npes)])
        np.testing.assert_array_equal(got[r][: len(want)], want)
        assert not got[r][len(want) :].any()


@pytest.mark.parametrize("npes", PES)
def test_put_block_matches_ppermute(npes: int) -> None:
    assert put_block.check(mesh_of(npes), m=64, n=64, dtype="bfloat16", seed=npes)


@pytest.mark.parametrize("npes", PES)
def test_get_block_matches_ppermute(npes: int) -> None:
    assert get_block.check(mesh_of(npes), m=64, n=64, dtype="float32", seed=npes)


@pytest.mark.parametrize("npes", PES)
def test_sync_matches_lax(npes: int) -> None:
    assert sync.check(mesh_of(npes), m=16, n=32, dtype="float32", seed=npes)


@pytest.mark.parametrize("npes", [4, 8])
def test_sync_over_teams_of_a_2d_mesh(npes: int) -> None:
    mesh = jax.make_mesh((2, npes // 2), ("x", "y"), devices=jax.devices()[:npes])
    assert sync.check(mesh, m=16, n=32, dtype="float16", seed=npes)


@pytest.mark.parametrize("npes", PES)
def test_nvshmem_queries_on_a_2d_mesh(npes: int) -> None:
    mesh = queries.mesh_2d(npes)
    mesh = jax.make_mesh(tuple(mesh.shape.values()), ("x", "y"), devices=jax.devices()[:npes])
    assert queries.check(mesh, m=16, n=32, seed=npes)
