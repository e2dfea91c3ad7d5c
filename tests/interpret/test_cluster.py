"""Thread-block clusters in the interpreter (ir/cluster.py, interpret/cluster_rules.py): a peer's shared
tile as either side of T.copy, the cluster's rank order, the barrier, the races it orders, and the errors."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import jax_tilescale as ts
from jax_tilescale import language as T
from jax_tilescale.codegen import generate_cuda
from jax_tilescale.errors import KernelRuntimeError, KernelTraceError, RaceError
from tests.compute.cluster_kernels import M, N, pull, rotate, rotate_reference, swap_partials, swap_partials_reference

SHAPES = [((4,), (2,)), ((4,), (4,)), ((2, 4), (2, 2)), ((3, 2, 2), (1, 2, 2)), ((2, 2, 2), (2, 1, 2))]


@pytest.mark.parametrize("grid,cluster", SHAPES)
@pytest.mark.parametrize("through_fragment", [True, False])
def test_rotate_in_cluster_order(grid, cluster, through_fragment):
    """Each block's tile reaches the block one rank after it in its cluster (rank: x fastest)."""
    a = np.random.default_rng(sum(grid)).standard_normal((int(np.prod(grid)) * M, N)).astype(np.float32)
    got = np.asarray(jax.jit(rotate(grid, cluster, through_fragment=through_fragment))(a))
    assert np.array_equal(got, rotate_reference(a, grid, cluster))


@pytest.mark.parametrize("grid,cluster", SHAPES[:3])
def test_pull_from_a_peer_tile_casts(grid, cluster):
    a = np.random.default_rng(7).standard_normal((int(np.prod(grid)) * M, N)).astype(ml_dtypes.bfloat16)
    got = np.asarray(jax.jit(pull(grid, cluster))(a))
    assert got.dtype == np.float32
    assert np.array_equal(got, rotate_reference(a.astype(np.float32), grid, cluster))


def test_a_peer_store_that_no_cluster_sync_orders_is_a_race():
    a = np.ones((4 * M, N), np.float32)
    with pytest.raises(RaceError, match=r"shared tile S .*block \(1,\)|shared tile S .*block \(0,\)"):
        jax.jit(rotate((4,), (2,), sync=False))(a)


def _kernel(body, grid=(4,), cluster=(2,)):
    return ts.kernel(out_shape=jax.ShapeDtypeStruct((4 * M, N), jnp.float32), grid=grid, threads=128,
                     cluster=cluster)(body)


def _run(kern):
    return jax.jit(kern)(np.ones((4 * M, N), np.float32))


def test_cluster_statements_need_a_cluster():
    def body(A, C):
        T.cluster_sync()

    with pytest.raises(KernelTraceError, match="the kernel has no cluster"):
        _run(_kernel(body, cluster=None))


@pytest.mark.parametrize("cluster,match", [
    (3, "must divide the grid"),
    ((2, 2), "at most 1 for the grid"),
    ((0,), "positive int"),
])
def test_bad_cluster_shapes_are_refused(cluster, match):
    def body(A, C):
        T.copy(A, C)

    with pytest.raises(KernelTraceError, match=match):
        _run(_kernel(body, cluster=cluster))


def test_more_than_eight_blocks_is_refused():
    def body(A, C):
        T.copy(A, C)

    with pytest.raises(KernelTraceError, match="at most 8"):
        _run(_kernel(body, grid=(16,), cluster=16))


def test_cluster_sync_inside_a_branch_or_loop_is_refused():
    def in_branch(A, C):
        if T.program_id(0) == 0:
            T.cluster_sync()

    def in_loop(A, C):
        for _ in T.serial(2):
            T.cluster_sync()

    for body in (in_branch, in_loop):
        with pytest.raises(KernelTraceError, match="top level of the kernel's body"):
            _run(_kernel(body))


def test_a_rank_past_the_cluster_is_an_error():
    def body(A, C):
        S, L = T.alloc_shared((M, N), jnp.float32), T.alloc_shared((M, N), jnp.float32)
        T.copy(A[T.ds(T.program_id(0) * M, M), :], L)
        T.copy(L, T.cluster_tile(S, T.program_id(0) % 2 + 1))
        T.cluster_sync()

    with pytest.raises(KernelRuntimeError, match=r"cluster rank 2 .* out of range: the cluster \(2,\) has blocks 0..1"):
        _run(_kernel(body))


def test_a_static_rank_past_the_cluster_is_refused_when_traced():
    def body(A, C):
        S, L = T.alloc_shared((M, N), jnp.float32), T.alloc_shared((M, N), jnp.float32)
        T.copy(L, T.cluster_tile(S, 2))

    with pytest.raises(KernelTraceError, match="cluster rank 2 is out of range"):
        _run(_kernel(body))


def test_a_peer_tile_must_be_shared_and_the_other_side_on_chip():
    def fragment(A, C):
        F, G = T.alloc_fragment((M, N), jnp.float32), T.alloc_fragment((M, N), jnp.float32)
        T.copy(G, T.cluster_tile(F, 1))

    def from_global(A, C):
        S = T.alloc_shared((M, N), jnp.float32)
        T.copy(A[0:M, :], T.cluster_tile(S, 1))

    with pytest.raises(KernelTraceError, match="cluster tile F is a fragment buffer"):
        _run(_kernel(fragment))
    with pytest.raises(KernelTraceError, match="local side of a cluster copy A is a input buffer"):
        _run(_kernel(from_global))


def test_the_code_generator_refuses_clusters_before_sm90_and_with_a_grid_barrier():
    kern = rotate((4,), (2,))
    a = jax.ShapeDtypeStruct((4 * M, N), jnp.float32)
    with pytest.raises(KernelTraceError, match="need an sm_90 GPU"):
        generate_cuda(kern.trace(a), "sm_80")

    def body(A, C):
        T.barrier_all()
        T.copy(A, C)

    with pytest.raises(KernelTraceError, match="barrier_all/sync_all between the blocks"):
        generate_cuda(_kernel(body).trace(a), "sm_90")


def test_a_peer_tile_loaded_into_a_gemm_accumulator():
    m, n, k = 64, 128, 256
    rng = np.random.default_rng(3)
    a = rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((k, n)).astype(ml_dtypes.bfloat16)
    got = np.asarray(jax.jit(swap_partials(m, n, k))(a, b), np.float64)
    want = swap_partials_reference(a.astype(np.float32), b.astype(np.float32))
    assert np.max(np.abs(got - want)) <= 1e-4 * np.max(np.abs(want))
