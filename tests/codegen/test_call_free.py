"""Which communicating kernels are generated call-free (codegen/call_free.py) and what that code is:
every communication statement of a kernel on the Hopper plan lowered to P2P loads, stores and release
atomics, no NVSHMEM call left, and ptxas keeping the wgmma pipeline (no C7509). The overlap examples'
kernels are checked at the issue's size in test_overlap_ptxas.py; their results on the GPU in
tests/gpu/test_overlap_gpu.py."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

import jax_tilescale as ts
from jax_tilescale import abi
from jax_tilescale import language as T
from jax_tilescale.codegen import generate_cuda
from jax_tilescale.compiler import compile_cubin, ptxas_report

S = jax.ShapeDtypeStruct
BF16 = jnp.bfloat16
M = N = K = 256
BM, BN, BK = 128, 128, 64


def _gemm_then(comm: str):
    """A 2-PE GEMM kernel on the Hopper plan (a pipelined wgmma loop) that then communicates in the
    way `comm` names."""

    @ts.kernel(out_shape=(S((M, N), BF16), S((M, N), BF16)), grid=(N // BN, M // BM), threads=256)
    def gemm_comm(a, b, c, inbox):
        me = T.get_pe()
        peer = (me + 1) % T.get_pe_num()
        tm, tn = T.program_id(1), T.program_id(0)
        ready = T.alloc_signal(1)
        A_s = T.alloc_shared((BM, BK), BF16)
        B_s = T.alloc_shared((BK, BN), BF16)
        C_f = T.alloc_fragment((BM, BN), jnp.float32)
        T.clear(C_f)
        for ko in T.Pipelined(K // BK, num_stages=3):
            T.copy(a[T.ds(tm * BM, BM), T.ds(ko * BK, BK)], A_s)
            T.copy(b[T.ds(ko * BK, BK), T.ds(tn * BN, BN)], B_s)
            T.gemm(A_s, B_s, C_f)
        T.copy(C_f, c[T.ds(tm * BM, BM), T.ds(tn * BN, BN)])
        rows = T.ds(tm * BM, BM), T.ds(tn * BN, BN)
        if comm == "block":
            T.putmem_signal_nbi_block(inbox[rows], c[rows], sig=ready[0], value=1, op=T.SignalOp.ADD, pe=peer)
            T.quiet()
            T.fence()
            T.signal_op(ready[0], 1, T.SignalOp.SET, peer)
            T.barrier_all()
        elif comm == "warp":
            T.getmem_warp(c[rows], inbox[rows], pe=peer)
        else:  # one thread's put: no call-free form (a copy loop of one thread)
            T.putmem_nbi(inbox[rows], c[rows], pe=peer)

    x = S((M, K), BF16)
    return gemm_comm.trace(x, S((K, N), BF16), mesh_axes=("x",), num_pes=2)


@pytest.mark.parametrize("comm", ["block", "warp"])
def test_a_communicating_hopper_kernel_is_generated_without_nvshmem_calls(comm):
    mod = generate_cuda(_gemm_then(comm), "sm_90")
    assert mod.arch == "sm_90a" and mod.uses_nvshmem and mod.call_free
    body = mod.source.split("__global__", 1)[1]
    assert "nvshmem_quiet" not in body and "nvshmemx_" not in body and "nvshmem_fence" not in body
    assert "ts_fault_sink_set(args);" in body  # where a failed check reports, set first
    if comm == "block":
        assert "ts_p2p_signal_add(ts_peer_sig, " in body and "ts_p2p_signal_set(ts_peer_sig, " in body
        assert "ts_peer_ptr(ts_sig, " in body  # the signal word is symmetric scratch: nvshmem_ptr
    # `inbox` (param 3) is what peers touch: zero-copy, so its peer copy is found through what the
    # peer publishes at the start of the launch (its address), not through nvshmem_ptr
    assert mod.staged == (0, 0, 0, abi.STAGE_COPY_OUT | abi.STAGE_P2P)
    assert "ts_publish_params(args, ts_seq, 0x8u, " in body
    assert "ts_peer_param_ptr(args, ts_seq, 3, " in body


def test_a_one_thread_put_keeps_the_calls_and_the_header_says_why():
    mod = generate_cuda(_gemm_then("thread"), "sm_90")
    assert mod.arch == "sm_90a" and not mod.call_free
    assert "#define TS_CALL_FREE 1" not in mod.source
    assert mod.staged == (0, 0, 0, abi.STAGE_COPY_OUT)  # staged and copied: NVSHMEM's calls need symmetric memory
    assert "// not call-free (any wgmma serialised by ptxas, every peer-touched param staged): T.putmem_nbi of " \
           "one thread at" in mod.source
    assert "test_call_free.py" in mod.source.split("// not call-free", 1)[1].splitlines()[0]


def _shift():
    @ts.kernel(out_shape=S((64, 64), jnp.float32), grid=(1,), threads=128)
    def shift(x, y):
        T.putmem_block(y[:, :], x[:, :], pe=(T.get_pe() + 1) % T.get_pe_num())

    return shift.trace(S((64, 64), jnp.float32), mesh_axes=("x",), num_pes=2)


def test_call_free_puts_fence_only_where_their_data_counts_for_a_peer():
    """A P2P put issues no system fence of its own (NVSHMEM's P2P path fences where the data must count:
    the signal's release, quiet, fence, barriers, the end of call); a blocking block put ends with the
    block's barrier, so that a later signal_op's release by thread 0 covers every thread's stores."""

    @ts.kernel(out_shape=(S((64, 64), jnp.float32), S((64, 64), jnp.float32)), grid=(1,), threads=128)
    def puts(x, y, z):
        flag = T.alloc_signal(1)
        peer = (T.get_pe() + 1) % T.get_pe_num()
        T.putmem_block(y[:, :], x[:, :], pe=peer)
        T.signal_op(flag[0], 1, T.SignalOp.SET, peer)
        T.putmem_nbi_block(z[:, :], x[:, :], pe=peer)
        T.signal_wait_until(flag[0], T.Cmp.EQ, 1)

    mod = generate_cuda(puts.trace(S((64, 64), jnp.float32), mesh_axes=("x",), num_pes=2), "sm_90")
    assert mod.call_free
    body = mod.source.split("__global__", 1)[1]
    blocking, signal, nbi = (body[body.index(f"// [{i}] "):body.index(f"// [{i + 1}] ")] for i in range(3))
    assert "ts_dst[ts_c0] = ts_r[ts_u];" in blocking and "__threadfence_system" not in blocking + nbi
    assert blocking.index("ts_dst[ts_c0] = ts_r[ts_u];") < blocking.index("__syncthreads();")
    assert "ts_p2p_signal_set(" in signal and "__syncthreads();" not in nbi


@pytest.mark.parametrize("arch", ["sm_90", "sm_80"])
def test_a_kernel_without_wgmma_is_call_free_too_and_its_output_zero_copy(arch):
    mod = generate_cuda(_shift(), arch)
    body = mod.source.split("__global__", 1)[1]
    assert mod.uses_nvshmem and mod.call_free and "#define TS_CALL_FREE 1" in mod.source
    assert "nvshmemx_" not in body and "nvshmem_quiet" not in body
    assert mod.staged == (0, abi.STAGE_COPY_OUT | abi.STAGE_P2P)
    assert "ts_publish_params(args, ts_seq, 0x2u, " in body and "ts_peer_param_ptr(args, ts_seq, 1, " in body


def test_the_variable_keeps_nvshmem_calls_and_every_peer_touched_param_staged(monkeypatch):
    monkeypatch.setenv("TILESCALE_CALL_FREE", "0")
    mod = generate_cuda(_shift(), "sm_90")
    assert not mod.call_free and mod.staged == (0, abi.STAGE_COPY_OUT)
    assert "nvshmemx_putmem_block(" in mod.source and "ts_publish_params(args" not in mod.source.split("__global__")[1]
    assert "$TILESCALE_CALL_FREE=0" in mod.source


def test_zero_copy_code_compiles(session_cache, require_nvshmem):
    """The call-free shift, with its publish and its peer-address translation, through nvcc and ptxas."""
    mod = generate_cuda(_shift(), "sm_90")
    assert compile_cubin(mod.source, arch=mod.arch, entry=mod.entry, nvshmem=True)


@pytest.mark.parametrize("comm", ["block", "warp"])
def test_call_free_code_compiles_without_serialised_wgmma(comm, session_cache, require_nvshmem):
    mod = generate_cuda(_gemm_then(comm), "sm_90")
    report = ptxas_report(compile_cubin(mod.source, arch=mod.arch, entry=mod.entry, nvshmem=True)) or ""
    assert "(C7509)" not in report, report


def test_a_launch_over_several_machines_keeps_nvshmem_calls():
    """Peers on other machines are reached through NVSHMEM's network path, not loads and stores
    (lowering/cuda.py passes p2p_peers=False when process_layout().hosts > 1)."""
    mod = generate_cuda(_gemm_then("block"), "sm_90", p2p_peers=False)
    assert not mod.call_free and "nvshmemx_putmem_nbi_block(" in mod.source.split("__global__", 1)[1]
    assert "// not call-free (any wgmma serialised by ptxas, every peer-touched param staged): the launch spans " \
           "several nodes" in mod.source
