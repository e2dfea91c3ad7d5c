"""Issue 3's primitives on real GPUs (NVSHMEM), one process per GPU, compared with numpy and
jax.lax. The kernels and checks are the CPU suite's (tests/primitives, examples): each check
compares the shards this process holds.

    python -m jax_tilescale.launch -n 2 -m pytest tests/gpu -q -o addopts=''
"""

from __future__ import annotations

import jax
import pytest

from tests.conftest import load_example
from tests.primitives import test_sync as sync_checks
from tests.primitives import test_transfers as transfer_checks

all_to_all = load_example("all_to_all")
put_block = load_example("primitives/put_block")
get_block = load_example("primitives/get_block")
sync = load_example("primitives/sync")
queries = load_example("nvshmem_queries")


@pytest.mark.parametrize(
    "check",
    [
        transfer_checks.check_putmem,
        transfer_checks.check_putmem_signal,
        transfer_checks.check_getmem,
        transfer_checks.check_run_time_sizes,
        transfer_checks.check_peer_copies,
        transfer_checks.check_loaded_peers,
        sync_checks.check_notify,
        sync_checks.check_waits,
        sync_checks.check_remote_poll,
        sync_checks.check_sync_all,
        sync_checks.check_many_blocks,
    ],
    ids=lambda f: f.__name__,
)
def test_primitive(gpu_mesh, check):
    for seed in range(3):  # repeated launches: scratch, signals and barrier counters start from zero
        check(gpu_mesh, seed)


@pytest.mark.parametrize("quiet", [True, False], ids=["barrier", "sync"])
@pytest.mark.parametrize("scope", ["block", "warp"])
def test_team_barriers(gpu_mesh, quiet, scope):
    sync_checks.check_team_barrier(gpu_mesh, quiet, scope, "x")


def test_collectives(gpu_mesh):
    sync_checks.check_collectives(gpu_mesh, "x", 0)


def test_teams_of_one_pe(gpu_mesh):
    """A 2-D mesh whose kernel axis has size 1: every GPU is a team of its own, so kernel PE 0 is
    a different NVSHMEM PE on each GPU (the PE map at work), and the team barrier has one member."""
    mesh = jax.make_mesh((gpu_mesh.size, 1), ("x", "y"))
    for quiet in (True, False):
        sync_checks.check_team_barrier(mesh, quiet, "block", "y")
    sync_checks.check_collectives(mesh, "y", 1)


A2A_CASES = [(64, 128, "bfloat16"), (1024, 1024, "bfloat16"), (256, 512, "float32")]


@pytest.mark.parametrize("tokens,hidden,dtype", A2A_CASES)
@pytest.mark.own_gpu  # the example's receive offsets come from jax.lax.all_gather on the devices (NCCL)
def test_all_to_all(gpu_mesh, tokens, hidden, dtype):
    assert all_to_all.check(gpu_mesh, tokens=tokens, hidden=hidden, dtype=dtype, seed=tokens)


@pytest.mark.parametrize("tokens,hidden,dtype", A2A_CASES)
def test_all_to_all_with_offsets_from_the_host(gpu_mesh, tokens, hidden, dtype):
    """The same kernels with the receive offsets computed in numpy: no XLA collective, so this runs with two PEs
    sharing one GPU too (the reference is jax.lax.all_to_all on the host)."""
    assert all_to_all.check(gpu_mesh, tokens=tokens, hidden=hidden, dtype=dtype, seed=tokens + 1, offsets="host")


@pytest.mark.parametrize("m,n", [(64, 64), (1024, 512)])
def test_put_block(gpu_mesh, m, n):
    assert put_block.check(gpu_mesh, m=m, n=n, dtype="bfloat16", seed=m)


@pytest.mark.parametrize("m,n", [(64, 64), (1024, 512)])
def test_get_block(gpu_mesh, m, n):
    assert get_block.check(gpu_mesh, m=m, n=n, dtype="float32", seed=m)


def test_sync_example(gpu_mesh):
    assert sync.check(gpu_mesh, m=256, n=128, dtype="float32")


def test_sync_example_over_teams(gpu_mesh):
    assert sync.check(jax.make_mesh((gpu_mesh.size, 1), ("x", "y")), m=64, n=64, dtype="float16")


def test_nvshmem_queries(gpu_mesh):
    assert queries.check(queries.mesh_2d(gpu_mesh.size), m=64, n=128)
