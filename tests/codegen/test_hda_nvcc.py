"""The CUDA of issue 17's language: a view copy of a region on this PE is the plain copy, one of a
peer's region loads through nvshmem_ptr with a getmem fallback (tools/view_cuda.py prints both);
replica writes store through nvshmem_ptr with a putmem + quiet fallback; a Replica atomic_add,
T.Scale("node") and T.alloc(level="global") kernels; nvcc builds each (sm_90, NVSHMEM)."""

from __future__ import annotations

import importlib.util

import jax
import jax.numpy as jnp
import pytest

import jax_tilescale as ts
from jax_tilescale import language as T
from jax_tilescale.codegen import generate_cuda
from jax_tilescale.compiler import compile_cubin
from tests.conftest import ROOT

SDS = jax.ShapeDtypeStruct
F32 = jnp.float32

_spec = importlib.util.spec_from_file_location("view_cuda", ROOT / "tools" / "view_cuda.py")
view_cuda = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(view_cuda)


def test_local_region_is_a_plain_copy_and_remote_region_a_peer_load_or_getmem():
    _, local = view_cuda.lowered(remote=False)
    assert "nvshmem" not in local
    # over several machines: through nvshmem_ptr where the peer is mapped, else a getmem
    _, remote = view_cuda.lowered(remote=True, one_machine=False)
    assert "nvshmem_ptr(p_x, ts_peer_nv)" in remote and "nvshmemx_getmem_block(" in remote
    # on one machine (call-free): loads through the peer's copy of x, which it publishes (zero-copy)
    _, remote = view_cuda.lowered(remote=True)
    assert "ts_peer_param_ptr(args, ts_seq, 0, p_x, p_x, ts_peer_nv," in remote and "nvshmemx_" not in remote


def _replica_write():
    @ts.kernel(out_shape=SDS((8, 16), F32), grid=(1,), replicated=True)
    def k(x, out):
        s = T.alloc((4, 16), F32, level="l1")
        T.copy(x, s)
        T.copy(s, T.view(out, T.Replica)[T.ds(T.get_pe() * 4, 4), :])

    return k.trace(SDS((4, 16), F32), mesh_axes=("x",), num_pes=2)


def _replica_reduce():
    @ts.kernel(out_shape=SDS((4, 16), F32), grid=(1,), replicated=True)
    def k(x, out):
        s = T.alloc((4, 16), F32, level="l1")
        T.copy(x, s)
        T.copy(s, out)
        T.atomic_add(T.view(out, T.Replica)[0:4, :], s)

    return k.trace(SDS((4, 16), F32), mesh_axes=("x",), num_pes=2)


def _node_and_global():
    @ts.kernel(out_shape=SDS((1, 2), jnp.int32), grid=(2,))
    def k(x, out):
        node, nodes = T.Scale("node")
        g = T.alloc((2,), jnp.int32, level="global")
        for _j in T.Parallel(1):
            g[T.program_id(0)] = node + nodes + x[0, 0]
        if T.program_id(0) == 0:
            for _j in T.Parallel(1):
                out[0, 0] = g[0]
                out[0, 1] = nodes

    return k.trace(SDS((1, 1), jnp.int32), mesh_axes=("x",), num_pes=2)


def test_replica_write_stores_through_nvshmem_ptr_or_puts_and_quiets():
    src = generate_cuda(_replica_write(), "sm_90", p2p_peers=False).source  # several machines
    assert "nvshmem_ptr(p_out, ts_peer_nv)" in src and "nvshmemx_putmem_block(" in src and "nvshmem_quiet();" in src
    body = generate_cuda(_replica_write(), "sm_90").source.split("__global__", 1)[1]  # one machine: call-free
    assert "ts_peer_param_ptr(args, ts_seq, 1, p_out, p_out, ts_peer_nv," in body and "nvshmemx_" not in body


@pytest.mark.parametrize("make", [_replica_write, _replica_reduce, _node_and_global],
                         ids=["replica_write", "replica_reduce", "node_and_global"])
def test_nvcc_builds(make, require_nvshmem, session_cache):
    mod = generate_cuda(make(), "sm_90")
    assert compile_cubin(mod.source, arch=mod.arch, entry=mod.entry, nvshmem=mod.uses_nvshmem).exists()


def test_nvcc_builds_the_tools_two_view_copies(require_nvshmem, session_cache):
    for remote in (False, True):
        kern = view_cuda.view_copy_kernel(remote)
        mod = generate_cuda(kern.trace(SDS((16, 64), F32), mesh_axes=("x",), num_pes=2), "sm_90")
        assert compile_cubin(mod.source, arch=mod.arch, entry=mod.entry, nvshmem=mod.uses_nvshmem).exists()
