"""Zero-copy on GPUs (docs/calling_convention.md, "Zero-copy"; runtime/peer_memory.py): every process
has mapped every other's XLA memory pool, and call-free kernels write into and read from their peers'
XLA buffers directly, with no staging copy. Each result is compared with numpy on the host (NCCL
refuses two ranks on one GPU, so no XLA collective is the reference), on fresh random data."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import jax_tilescale as ts
from jax_tilescale import language as T
from jax_tilescale.codegen import generate_cuda
from jax_tilescale.runtime import nvshmem_bootstrap, peer_memory
from tests.primitives.util import F32, assert_equal, per_device, random_rows, shard_run

ROWS, COLS, BM = 256, 512, 64


@ts.kernel(out_shape=jax.ShapeDtypeStruct((ROWS, COLS), F32), grid=(ROWS // BM,))
def push(src, dst):
    """Ring shift by puts: the peer writes this PE's output."""
    rows = T.ds(T.program_id(0) * BM, BM)
    T.putmem_nbi_block(dst[rows, :], src[rows, :], pe=(T.get_pe() + 1) % T.get_pe_num())


@ts.kernel(out_shape=jax.ShapeDtypeStruct((ROWS, COLS), F32), grid=(ROWS // BM,))
def pull(src, dst):
    """Ring shift by gets: this PE reads the previous PE's input."""
    rows = T.ds(T.program_id(0) * BM, BM)
    n = T.get_pe_num()
    T.getmem_block(dst[rows, :], src[rows, :], pe=(T.get_pe() + n - 1) % n)


def _ffi():
    from jax_tilescale import _ffi

    return _ffi


def _shifted(x: np.ndarray, n: int, by: int) -> np.ndarray:
    return np.roll(per_device(x, n), by, axis=0).reshape(x.shape)


def test_every_pe_mapped_its_peers_pools(gpu_mesh):
    nvshmem_bootstrap.ensure_initialized()  # where the pools are exchanged (also on a kernel's first lowering)
    status = peer_memory.status()
    assert status.on, f"zero-copy is off: {status.reason}"
    me = jax.process_index()
    assert set(status.mapped) == set(range(jax.process_count())) - {me}
    assert status.pool[1] >= 64 << 20 and all(s > 0 for _, s, _ in status.mapped.values())


@pytest.mark.parametrize("kern", [push, pull], ids=["push", "pull"])
def test_a_ring_shift_uses_the_peers_xla_buffers(gpu_mesh, kern):
    n = gpu_mesh.size
    ir = kern.trace(jax.ShapeDtypeStruct((ROWS, COLS), F32), mesh_axes=tuple(gpu_mesh.axis_names), num_pes=n)
    assert generate_cuda(ir, "sm_90").call_free  # what makes its peer-touched buffer zero-copy
    rng = np.random.default_rng(11)
    _ffi().take_zero_copy_counts()
    for _ in range(3):
        x = random_rows(rng, n, (ROWS, COLS))
        (got,) = shard_run(kern, gpu_mesh, x)
        assert_equal(got, _shifted(x, n, 1))
    direct, staged = _ffi().take_zero_copy_counts()
    assert direct >= 3 and staged == 0, (direct, staged)


def test_a_jitted_loop_of_shifts_follows_the_buffers_xla_alternates(gpu_mesh):
    """XLA hands each iteration other buffers (the loop carry alternates): every launch publishes
    its own, and 7 shifts move each block 7 PEs on."""
    n, steps = gpu_mesh.size, 7
    spec = jax.sharding.PartitionSpec(tuple(gpu_mesh.axis_names))
    loop = jax.jit(jax.shard_map(lambda x: jax.lax.fori_loop(0, steps, lambda i, x: push(x), x), mesh=gpu_mesh,
                                 in_specs=spec, out_specs=spec))
    x = random_rows(np.random.default_rng(12), n, (ROWS, COLS))
    got = loop(ts.testing.place(x, gpu_mesh, spec))
    assert_equal(got, _shifted(x, n, steps))
