"""The Hopper plan for kernels that communicate (codegen/gemm_sm90_comm.py), on the overlap
examples' kernels: which statements run on every thread, what the producer does before it reads
a tile a peer wrote, and that the result builds with nvcc for sm_90a."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from jax_tilescale.codegen import generate_cuda
from jax_tilescale.codegen.gemm_sm90 import plan_with_reasons
from jax_tilescale.compiler import compile_cubin, ptxas_report
from tests.conftest import load_example

ag = load_example("allgather_gemm")
rs = load_example("gemm_reducescatter")
S = jax.ShapeDtypeStruct
BF16 = jnp.bfloat16


def ag_ir(npes=2, m_per_pe=512, k=512, n_per_pe=512):
    kern = ag.allgather_gemm(m_per_pe, k, n_per_pe, npes, BF16)
    return kern.trace(S((m_per_pe, k), BF16), S((k, n_per_pe), BF16), mesh_axes=("x",), num_pes=npes)


def rs_ir(npes=2, m=1024, k_per_pe=512, n=512):
    kern = rs.gemm_reducescatter(m, k_per_pe, n, npes, BF16)
    return kern.trace(S((m, k_per_pe), BF16), S((k_per_pe, n), BF16), mesh_axes=("x",), num_pes=npes)


@pytest.mark.parametrize("npes", [1, 2, 4])
def test_allgather_gemm_takes_wgmma(npes):
    plan, reasons = plan_with_reasons(ag_ir(npes), "sm_90")
    assert plan is not None and not reasons, reasons
    assert len(plan.loops) == (1 if npes == 1 else 2)  # local shard from A, peers' from where they landed
    mod = generate_cuda(ag_ir(npes), "sm_90")
    assert mod.arch == "sm_90a" and mod.uses_nvshmem and not mod.notes and mod.threads == 384
    assert mod.call_free  # puts as P2P stores, signals as release atomics (codegen/call_free.py)
    src = mod.source[mod.source.index("__global__"):]  # the kernel, not the header's helpers
    split = src.index("if (threadIdx.x >= 256) {")
    # the head (sends, the wait for the row block) runs on every thread, before the split
    assert src.index("ts_wait<TS_CMP_EQ") < split
    if npes > 1:
        assert src.index("ts_p2p_signal_") < split  # the put's signal, after its stores
        # both loops (1 box of A, 4 of B each: 64-column atoms), inside the producer's `if`
        assert src[split:].count("ts_tma_load_2d(") == 10 and "producer of the loop" in src[split:]
    assert "ts_fence_proxy_async_global();" in src[split:]
    assert "ts_tma_store_2d" in src  # the tile is stored with TMA


@pytest.mark.parametrize("npes", [2, 4])
def test_gemm_reducescatter_takes_wgmma_and_sends_after_the_join(npes):
    mod = generate_cuda(rs_ir(npes), "sm_90")
    assert mod.arch == "sm_90a" and not mod.notes and mod.call_free
    src = mod.source[mod.source.index("__global__"):]  # the kernel, not the header's helpers
    join = src.index("__syncthreads();  // the producer and the consumers meet")
    assert src.index("ts_setmaxnreg_inc<168>();") < join and src.index("ts_setmaxnreg_dec<168>();") < join
    # the block put (P2P stores by every thread, then one release atomic): after the join
    assert src.index("ts_peer_ptr(") > join and src.index("ts_p2p_signal_add(") > join
    assert src.index("ts_wait<TS_CMP_EQ") < join  # the owner's wait: consumer thread 0, in the split


def test_block_put_between_the_gemm_statements_is_refused():
    """A block-scoped put between the GEMM's first and last statements would miss the producer warpgroup."""
    from jax_tilescale import language as T
    from tests.codegen.kernels import build

    def kernel(a, b, c, out):
        acc = T.alloc_fragment((64, 64), jnp.float32)
        a_s = T.alloc_shared((64, 64), BF16)
        b_s = T.alloc_shared((64, 64), BF16)
        T.clear(acc)
        T.putmem_nbi_block(out[0:64, :], a[0:64, :], pe=(T.get_pe() + 1) % 2)
        for ko in T.Pipelined(2, num_stages=2):
            T.copy(a[0:64, T.ds(ko * 64, 64)], a_s)
            T.copy(b[T.ds(ko * 64, 64), 0:64], b_s)
            T.gemm(a_s, b_s, acc)
        T.copy(acc, c[0:64, 0:64])

    ir = build(kernel, name="bad", inputs=[((64, 128), BF16), ((128, 64), BF16)],
               outputs=[((64, 64), BF16), ((64, 128), BF16)], grid=(1,), num_pes=2)
    plan, reasons = plan_with_reasons(ir, "sm_90")
    assert plan is None and any("needs every thread of the block" in r for r in reasons), reasons


@pytest.mark.parametrize("which", ["ag", "rs"])
def test_overlap_kernels_build_for_sm90a(which, session_cache, require_nvshmem):
    mod = generate_cuda(ag_ir() if which == "ag" else rs_ir(), "sm_90")
    cubin = compile_cubin(mod.source, arch=mod.arch, entry=mod.entry, nvshmem=mod.uses_nvshmem)
    report = ptxas_report(cubin) or ""
    assert f"Compiling entry function '{mod.entry}' for 'sm_90a'" in report
