"""T.Scale at every level of the HDA: thread, warp and warpgroup indices in per-thread branches,
the block index over a 2-D grid, the device, and the node from a simulated launch layout
(InterpretOptions(pes_per_node=)); the errors (unknown level, a per-thread index where a block
statement needs one value) name the user's line."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_tilescale as ts
from jax_tilescale import language as T
from jax_tilescale.codegen import generate_cuda
from jax_tilescale.errors import KernelTraceError
from tests.compute.test_elementwise import rand, run1
from tests.primitives.util import mesh_of, shard_run

SDS = jax.ShapeDtypeStruct


def _line_of(marker: str) -> str:
    """`file:line` of the line of this file holding `marker` (what errors name)."""
    lines = open(__file__).read().splitlines()
    return f"{__file__}:{next(i + 1 for i, t in enumerate(lines) if t.endswith(marker))}"


@pytest.mark.parametrize("level,per", [("thread", 1), ("warp", 32), ("warpgroup", 128)])
def test_thread_levels_index_and_count_in_per_thread_branches(level, per):
    """The first thread of each unit puts x[i] into out[count - 1 - i]: every slot is written once,
    reversed, which needs both the index and the count right."""
    threads = 256
    units = threads // per

    @ts.kernel(out_shape=SDS((units,), jnp.float32), grid=(1,), threads=threads)
    def k(x, out):
        tx = T.thread_id()
        with T.Scale(level) as (i, n):
            if tx % per == 0:
                T.putmem(out[T.ds(n - 1 - i, 1)], x[T.ds(i, 1)], pe=T.get_pe())

    x = rand(np.random.default_rng(80), (units,), np.float32)
    (got,) = run1(k, x)
    np.testing.assert_array_equal(got, x[::-1])


def test_block_level_is_the_linear_block_index_x_fastest():
    @ts.kernel(out_shape=SDS((6, 2), jnp.int32), grid=(3, 2))
    def k(x, out):
        b, nb = T.Scale("block")
        for _j in T.Parallel(1):
            out[b, 0] = T.program_id(0) + 3 * T.program_id(1) + x[0] * 0
            out[b, 1] = nb

    (got,) = run1(k, np.zeros((1,), np.int32))
    np.testing.assert_array_equal(got, np.stack([np.arange(6), np.full(6, 6)], axis=1))


def test_device_level_is_the_pe_and_count():
    @ts.kernel(out_shape=SDS((1, 2), jnp.int32), grid=(1,))
    def k(x, out):
        with T.Scale("device") as (pe, n):
            for _j in T.Parallel(1):
                out[0, 0] = pe + x[0, 0] * 0
                out[0, 1] = n

    (got,) = shard_run(k, mesh_of((4,)), np.zeros((4, 1), np.int32))
    got = np.asarray(got)
    np.testing.assert_array_equal(got, np.stack([np.arange(4), np.full(4, 4)], axis=1))


@pytest.mark.parametrize("pes_per_node,want_nodes", [(2, 2), (1, 4), (None, 1), (3, 2)])
def test_node_level_from_the_simulated_launch_layout(pes_per_node, want_nodes):
    """Kernel PEs are placed node-major, pes_per_node each; a kernel branches on the node (an
    intra-node vs inter-node choice) and reports its node and the count."""
    opts = ts.InterpretOptions(pes_per_node=pes_per_node)

    @ts.kernel(out_shape=SDS((1, 3), jnp.int32), grid=(1,), interpret=opts)
    def k(x, out):
        node, nodes = T.Scale("node")
        for _j in T.Parallel(1):
            out[0, 0] = node + x[0, 0] * 0
            out[0, 1] = nodes
        if node == 0:
            for _j in T.Parallel(1):
                out[0, 2] = 1
        else:
            for _j in T.Parallel(1):
                out[0, 2] = 2

    (got,) = shard_run(k, mesh_of((4,)), np.zeros((4, 1), np.int32))
    got = np.asarray(got)
    per = 4 if pes_per_node is None else pes_per_node
    nodes = np.arange(4) // per
    np.testing.assert_array_equal(got[:, 0], nodes)
    np.testing.assert_array_equal(got[:, 1], np.full(4, want_nodes))
    np.testing.assert_array_equal(got[:, 2], np.where(nodes == 0, 1, 2))


def test_node_level_reads_nvshmem_on_the_gpu():
    @ts.kernel(out_shape=SDS((1, 2), jnp.int32), grid=(1,))
    def k(x, out):
        node, nodes = T.Scale("node")
        for _j in T.Parallel(1):
            out[0, 0] = node + x[0, 0] * 0
            out[0, 1] = nodes

    ir = k.trace(SDS((1, 1), jnp.int32), mesh_axes=("x",), num_pes=2)
    assert ir.uses_nvshmem() and ir.reads_node()
    src = generate_cuda(ir, "sm_90").source
    assert "nvshmem_my_pe() / nvshmem_team_n_pes(NVSHMEMX_TEAM_NODE)" in src
    assert "nvshmem_n_pes() / nvshmem_team_n_pes(NVSHMEMX_TEAM_NODE)" in src


def test_unknown_level_names_the_line():
    @ts.kernel(out_shape=SDS((8,), jnp.float32), grid=(1,))
    def k(x, out):
        T.Scale("core")  # the bad scale

    with pytest.raises(KernelTraceError) as e:
        k.trace(SDS((8,), jnp.float32))
    assert "T.Scale('core') is not a scale" in str(e.value) and "'warpgroup'" in str(e.value)
    assert _line_of("# the bad scale") in str(e.value)


def test_warp_index_in_a_block_statement_is_refused_naming_the_line():
    @ts.kernel(out_shape=SDS((8, 32), jnp.float32), grid=(1,), threads=256)
    def k(x, out):
        warp, _ = T.Scale("warp")
        s = T.alloc((1, 32), jnp.float32, level="l1")
        T.copy(x[T.ds(warp, 1), :], s)  # the bad copy
        T.copy(s, out[T.ds(0, 1), :])

    with pytest.raises(KernelTraceError) as e:
        k.trace(SDS((8, 32), jnp.float32))
    assert _line_of("# the bad copy") in str(e.value)
