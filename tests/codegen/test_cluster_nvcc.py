"""nvcc builds the code of the cluster statements (codegen/cluster.py): the kernels of
tests/compute/cluster_kernels.py (a peer's tile as destination and as source, 1-, 2- and 3-D cluster
shapes) and examples/gemm.py's split-K whose splits add in a cluster, on the Hopper plan (the fragment
stored into the peer's tile from registers; the producer warpgroup meeting the cluster as often as the
consumers). What the code does is the GPU suite's to check (tests/gpu/test_cluster_gpu.py); here: it
builds for sm_90a, without spills, with the cluster shape on the entry and the meetings counted."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from jax_tilescale.codegen import generate_cuda
from jax_tilescale.compiler import compile_cubin, kernel_resources, ptxas_report
from tests.compute.cluster_kernels import M, N, pull, rotate, swap_partials
from tests.conftest import load_example

gemm_example = load_example("gemm")


@pytest.mark.parametrize("make,grid,cluster", [
    (rotate, (4,), (2,)), (rotate, (2, 4), (2, 2)), (pull, (3, 2, 2), (1, 2, 2)),
])
def test_cluster_copies_build(make, grid, cluster, require_nvcc, session_cache):
    tiles = 1
    for g in grid:
        tiles *= g
    dtype = jnp.bfloat16 if make is pull else jnp.float32
    mod = generate_cuda(make(grid, cluster).trace(jax.ShapeDtypeStruct((tiles * M, N), dtype)), "sm_90")
    dims = ", ".join(map(str, (*cluster, 1, 1)[:3]))
    assert f"__cluster_dims__({dims})" in mod.source
    assert "ts_cluster_map(" in mod.source
    assert compile_cubin(mod.source, arch=mod.arch, entry=mod.entry, nvshmem=mod.uses_nvshmem)


@pytest.mark.parametrize("splits", [2, 4])
def test_split_k_in_a_cluster_builds_on_the_hopper_plan(splits, require_nvcc, session_cache):
    m, n, k = 128, 4096, 4096
    kern = gemm_example.gemm(m, n, k, jnp.dtype("bfloat16"), block_m=64, block_n=128, block_k=64, num_stages=8,
                             threads=128, split_k=splits, split_reduce="cluster")
    a, b = jax.ShapeDtypeStruct((m, k), jnp.bfloat16), jax.ShapeDtypeStruct((k, n), jnp.bfloat16)
    mod = generate_cuda(kern.trace(a, b), "sm_90")
    assert mod.arch == "sm_90a" and f"__cluster_dims__(1, 1, {splits})" in mod.source
    # the producer meets the cluster once per top-level cluster_sync of the consumers: 2 * rounds - 1
    rounds = splits.bit_length() - 1
    assert f"ts_c < {2 * rounds - 1}; ++ts_c) ts_cluster_sync();" in mod.source
    cubin = compile_cubin(mod.source, arch=mod.arch, entry=mod.entry, nvshmem=False)
    got = kernel_resources(cubin, mod.entry)
    assert got is not None and got.registers is not None and got.spill_stores == 0, ptxas_report(cubin)


def test_a_peer_tile_into_the_register_accumulator_builds(require_nvcc, session_cache):
    """swap_partials: the wgmma accumulator loaded from a peer's tile (the plan's register load through the mapping)."""
    m, n, k = 128, 256, 1024
    kern = swap_partials(m, n, k)
    a, b = jax.ShapeDtypeStruct((m, k), jnp.bfloat16), jax.ShapeDtypeStruct((k, n), jnp.bfloat16)
    mod = generate_cuda(kern.trace(a, b), "sm_90")
    assert mod.arch == "sm_90a" and not mod.notes, mod.notes  # the Hopper plan, no fallback
    load = mod.source[mod.source.rindex("copy(cluster_tile(S"):]  # the statement's code, after its comment
    assert "ts_cluster_map(p_S, ts_rank)" in load and "ts_acc_C_f" in load[:4000]
    cubin = compile_cubin(mod.source, arch=mod.arch, entry=mod.entry, nvshmem=False)
    got = kernel_resources(cubin, mod.entry)
    assert got is not None and got.spill_stores == 0, ptxas_report(cubin)
