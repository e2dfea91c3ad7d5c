"""CUDA of per-thread code (issue 6): ifs (block-uniform and thread-dependent), conditions,
registers; read as text and built with nvcc against NVSHMEM."""

from __future__ import annotations

import numpy as np
import pytest

from jax_tilescale import language as T
from jax_tilescale.ast_rewrite import rewrite_kernel_function
from jax_tilescale.codegen import CudaModule, generate_cuda
from jax_tilescale.compiler import compile_cubin
from jax_tilescale.errors import KernelTraceError
from jax_tilescale.ir import verify_kernel
from jax_tilescale.language import control
from jax_tilescale.language.tracing import trace_kernel

I32 = np.int32


def seed_style(x, out):
    """TileScale's seed pattern: thread 0 puts with a signal, thread 0 waits for the peer's."""
    tx = T.get_thread_binding(0)
    me, npes = T.get_pe(), T.get_pe_num()
    sig = T.alloc_signal(2)
    count = T.alloc_var("int32", init=0)
    regs = T.alloc_local((4,), "int32")
    if tx == 0:
        T.putmem_signal_nbi(out[me, :], x[0, :], 64, sig[0], 1, T.SignalOp.ADD, pe=(me + 1) % npes)
        T.signal_wait_until(sig[0], T.Cmp.GE, 1)
    elif tx < 4 and me == 0:
        regs[tx] = tx * 3
        count = regs[tx] + 1
        T.wait_ge(sig[1], 0)
        T.quiet()
    if T.get_pe() == 0:  # block-uniform: the block-wide form stays allowed
        T.putmem_block(out[1:2, :], x[1:2, :], pe=(me + 1) % npes)
    if count > 2:
        T.signal_op(sig[1], T.if_then_else(tx == 1, 5, 6), T.SignalOp.SET, pe=me)


def build_seed(npes: int = 2):
    fn = rewrite_kernel_function(seed_style, control)
    kernel = trace_kernel(fn, name="seed_style", inputs=[((2, 16), I32)], outputs=[((npes, 16), I32)], grid=(1,),
                          threads=128, mesh_axes=("x",), num_pes=npes)
    return verify_kernel(kernel)


@pytest.fixture(scope="module")
def seed() -> CudaModule:
    return generate_cuda(build_seed())


def test_thread_dependent_if_is_per_thread_code_then_one_barrier(seed: CudaModule) -> None:
    src = seed.source
    first = src[src.index("if (((int64_t)(ts_tx == (int64_t)0)) != 0) {"):]
    body = first[: first.index("} else {")]
    # The put is issued by this thread (no thread-0 guard) and no block barrier is in the branch.
    assert "nvshmem_putmem_signal_nbi(ts_dst, ts_src, 64, ts_sig, ts_sig_value, NVSHMEM_SIGNAL_ADD, ts_target);" in body
    assert "nvshmem_signal_wait_until(ts_sig, NVSHMEM_CMP_GE" in body or "ts_wait<TS_CMP_GE" in body
    assert "__syncthreads" not in body and "if (threadIdx.x == 0)" not in body
    whole = first[: first.index("// [2] if (pe == 0)")]
    tail = [line.strip() for line in whole.splitlines() if line.strip() and not line.strip().startswith("#line")]
    assert tail[-3:] == ["}", "__syncthreads();", "}"]  # the block meets after the if (inside its scope)
    assert "&&" in whole  # `and` is C's short-circuit
    assert "const int64_t ts_tx = threadIdx.x;" in src
    assert "int32_t ts_r_regs[4];" in src and "int32_t ts_r_count[1];" in src
    assert "#define TS_FAIL_SYNC() __nanosleep(1000000)" in src


def test_block_uniform_if_keeps_block_code(seed: CudaModule) -> None:
    src = seed.source
    uniform = src[src.index("// [2] if (pe == 0)"):]
    uniform = uniform[: uniform.index("// [3] if (count[0] > 2)")]
    assert "if (((int64_t)(ts_pe == (int64_t)0)) != 0) {" in uniform and "nvshmemx_putmem_block(" in uniform


def test_registers_and_selects(seed: CudaModule) -> None:
    src = seed.source
    assert "ts_r_regs[ts_bound(ts_tx, 4, ts_where)] = (int32_t)((ts_tx * 3));" in src
    assert "((((int64_t)(ts_tx == (int64_t)1)) != 0) ? (int64_t)5 : (int64_t)6)" in src


def test_barrier_inside_an_if_is_refused_by_the_cuda_generator() -> None:
    def k(x, out):
        with T.If(T.get_pe() == 0):
            T.barrier_all_block()

    kernel = verify_kernel(trace_kernel(k, name="k", inputs=[((4,), I32)], outputs=[((4,), I32)], grid=(1,),
                                        threads=128, mesh_axes=("x",), num_pes=2))
    with pytest.raises(KernelTraceError, match="inside an `if` is not supported by the CUDA code generator"):
        generate_cuda(kernel)


def test_seed_style_kernel_compiles(seed: CudaModule, session_cache, require_nvshmem) -> None:
    cubin = compile_cubin(seed.source, arch="sm_90", entry=seed.entry, nvshmem=seed.uses_nvshmem)
    assert cubin.exists() and cubin.stat().st_size > 0


def test_thread_signal_example_compiles(session_cache, require_nvshmem) -> None:
    import jax
    import jax.numpy as jnp

    from tests.conftest import load_example

    kern = load_example("primitives/thread_signal").push(64, 32, jnp.float32)
    module = generate_cuda(kern.trace(jax.ShapeDtypeStruct((64, 32), jnp.float32), mesh_axes=("x",), num_pes=2))
    branch = module.source.split("// [0] if (tx < 4)")[1].split("// [1] if (tx == 0)")[0]
    assert "nvshmem_putmem_signal_nbi(" in branch and "threadIdx.x == 0" not in branch
    assert compile_cubin(module.source, arch="sm_90", entry=module.entry, nvshmem=True).exists()
