"""A failed run-time check in a kernel generated call-free (codegen/call_free.py) is reported, not lost.

One process, one GPU, one PE: a GEMM tile on the Hopper plan, then a signal to a PE read from an input
(5, where the PE space has 1): the verifier cannot bound it, so the kernel checks it at run time, and a
call-free kernel cannot printf: the check fills the call site's record and traps; the watcher prints a
KernelCheckError naming the kernel, the line and what failed. The CUDA context is gone afterwards, so
this runs as its own process (tests/gpu/test_faults_gpu.py reads its output).

With `--cpu`: the same kernel in the interpreter, which reports the PE outside the PE space itself.
"""

from __future__ import annotations

import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

import jax_tilescale as ts
from jax_tilescale import language as T
from jax_tilescale.codegen import generate_cuda

M = N = K = 128
S = jax.ShapeDtypeStruct


@ts.kernel(out_shape=S((M, N), jnp.bfloat16), grid=(1, 1), threads=256)
def gemm_then_signal(a, b, pe, c):
    ready = T.alloc_signal(1)
    A_s = T.alloc_shared((M, 64), jnp.bfloat16)
    B_s = T.alloc_shared((64, N), jnp.bfloat16)
    C_f = T.alloc_fragment((M, N), jnp.float32)
    T.clear(C_f)
    for ko in T.Pipelined(K // 64, num_stages=2):
        T.copy(a[:, T.ds(ko * 64, 64)], A_s)
        T.copy(b[T.ds(ko * 64, 64), :], B_s)
        T.gemm(A_s, B_s, C_f)
    T.copy(C_f, c)
    T.signal_op(ready[0], 1, T.SignalOp.SET, T.load(pe[0]))  # CHECKED LINE


def main() -> None:
    a = jnp.asarray(np.random.default_rng(0).standard_normal((M, K)), jnp.bfloat16)
    b = jnp.asarray(np.random.default_rng(1).standard_normal((K, N)), jnp.bfloat16)
    pe = jnp.array([5], jnp.int32)
    if "--cpu" not in sys.argv:
        mod = generate_cuda(gemm_then_signal.trace(a, b, pe), "sm_90")
        print(f"call_free={mod.call_free} arch={mod.arch}", flush=True)
    try:
        jax.block_until_ready(jax.jit(gemm_then_signal)(a, b, pe))
        print("the call returned", flush=True)
    except Exception as e:  # the trap's CUDA error (or the interpreter's report)
        print(f"raised {type(e).__name__}: {str(e)[:400]}", flush=True)
    time.sleep(1.0)  # the watcher prints the record's report on stderr


if __name__ == "__main__":
    main()
