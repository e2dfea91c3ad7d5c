"""Buffers named by the user's code (issue 13) give CUDA that compiles whatever the names: C
keywords, CUDA built-ins, the generator's own names, non-ASCII letters, repeats."""

from __future__ import annotations

import numpy as np

from jax_tilescale import language as T
from jax_tilescale.ast_rewrite import rewrite_kernel_function
from jax_tilescale.codegen import generate_cuda
from jax_tilescale.compiler import compile_cubin
from jax_tilescale.ir import verify_kernel
from jax_tilescale.language import control
from jax_tilescale.language.tracing import trace_kernel

F32 = np.float32


def awkward(int, signal, ts_where):  # a parameter called like a C type
    me, npes = T.get_pe(), T.get_pe_num()
    threadIdx = T.alloc_signal(2)
    résumé = T.alloc_shared((8, 16), F32)
    for _ in range(2):
        float = T.alloc_symmetric((8, 16), F32)  # two allocations, one name: float_, float_1
    count = T.alloc_var("int32", init=0)
    T.copy(int, résumé)
    T.putmem_signal_nbi_block(float, résumé, sig=threadIdx[1], value=1, op=T.SignalOp.ADD, pe=(me + 1) % npes)
    T.signal_wait_until(threadIdx[1], T.Cmp.GE, 1)
    T.copy(float, ts_where)
    count = count + 1
    T.copy(signal, résumé)


def test_awkward_names_compile(session_cache, require_nvshmem) -> None:
    fn = rewrite_kernel_function(awkward, control)
    ir = verify_kernel(trace_kernel(fn, name="awkward", inputs=[((8, 16), F32)] * 2, outputs=[((8, 16), F32)],
                                    grid=(1,), threads=128, mesh_axes=("x",), num_pes=2))
    names = [b.name for b in (*ir.inputs, *ir.outputs, *ir.allocs)]
    assert names == ["int_", "signal", "ts_where_", "threadIdx_", "ru00e9sumu00e9", "float_", "float_1"]
    module = generate_cuda(ir)
    assert '"T.signal_wait_until on threadIdx_[1]"' in module.source and "ts_r_count[1]" in module.source
    cubin = compile_cubin(module.source, arch="sm_90", entry=module.entry, nvshmem=module.uses_nvshmem)
    assert cubin.exists() and cubin.stat().st_size > 0
