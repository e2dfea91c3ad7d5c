"""A kernel written with distributed views against the same kernel written with plain T.copy, on
one GPU with one PE (issue 17: a view costs nothing when everything is local).

The kernel is examples/gemm.py's bf16 GEMM (T.Pipelined copies into shared tiles, T.gemm into a
float32 fragment, the accumulator copied out), once with `A`, `B`, `C` used directly and once
through `T.view(A, T.FullRow)`, `T.view(B, T.Replica)`, `T.view(C, T.FullRow)` in global
coordinates. With one PE every view region is this PE's, so the views lower to the same copies;
the script says whether the generated CUDA is identical, checks both results against jnp.dot in
float32, then times both (interleaved rounds of `reps` jitted calls, medians) and prints the
ratio (target: within 5%).

    python benchmarks/bench_view.py [--size 4096] [--reps 20] [--rounds 7]
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

import jax_tilescale as ts
from jax_tilescale import language as T
from jax_tilescale.codegen import generate_cuda


def gemm_kernel(m: int, n: int, k: int, views: bool, bm: int = 128, bn: int = 256, bk: int = 64,
                stages: int = 4) -> ts.TileKernel:
    dtype = jnp.bfloat16

    @ts.kernel(out_shape=jax.ShapeDtypeStruct((m, n), dtype), grid=(n // bn, m // bm), threads=256,
               name="gemm_views" if views else "gemm_plain")
    def kern(a, b, c):
        A = T.view(a, T.FullRow) if views else a
        B = T.view(b, T.Replica) if views else b
        C = T.view(c, T.FullRow) if views else c
        tn, tm = T.program_id(0), T.program_id(1)
        A_s = T.alloc((bm, bk), dtype, level="l1")
        B_s = T.alloc((bk, bn), dtype, level="l1")
        C_f = T.alloc((bm, bn), jnp.float32, level="l0")
        T.clear(C_f)
        for ko in T.Pipelined(k // bk, num_stages=stages):
            T.copy(A[T.ds(tm * bm, bm), T.ds(ko * bk, bk)], A_s)
            T.copy(B[T.ds(ko * bk, bk), T.ds(tn * bn, bn)], B_s)
            T.gemm(A_s, B_s, C_f)
        T.copy(C_f, C[T.ds(tm * bm, bm), T.ds(tn * bn, bn)])

    return kern


def same_cuda(m: int, n: int, k: int) -> bool:
    """Whether both kernels generate the same CUDA, up to the kernel's name."""
    sds = (jax.ShapeDtypeStruct((m, k), jnp.bfloat16), jax.ShapeDtypeStruct((k, n), jnp.bfloat16))
    src = [generate_cuda(gemm_kernel(m, n, k, v).trace(*sds), "sm_90").source.replace(name, "K")
           for v, name in ((False, "gemm_plain"), (True, "gemm_views"))]
    return src[0] == src[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=4096)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    s = args.size
    print(f"generated CUDA identical (up to the name): {same_cuda(s, s, s)}")
    if jax.default_backend() != "gpu":
        print("no GPU: nothing timed")
        return
    rng = np.random.default_rng(0)
    a = jnp.asarray(rng.standard_normal((s, s)), jnp.bfloat16)
    b = jnp.asarray(rng.standard_normal((s, s)), jnp.bfloat16)
    want = np.asarray(jnp.dot(a, b, preferred_element_type=jnp.float32))
    fns = {v: jax.jit(gemm_kernel(s, s, s, v)) for v in (False, True)}
    for v, f in fns.items():
        got = np.asarray(f(a, b).astype(jnp.float32))
        err = float(np.max(np.abs(got - want))) / float(np.max(np.abs(want)))
        print(f"{'views' if v else 'plain'}: max |error| / max |C| = {err:.2e}")
        assert err < 2e-2, err
    times: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(args.rounds):
        for v, f in fns.items():
            f(a, b).block_until_ready()
            t0 = time.perf_counter()
            for _ in range(args.reps):
                out = f(a, b)
            out.block_until_ready()
            times[v].append((time.perf_counter() - t0) / args.reps)
    flops = 2 * s**3
    for v in (False, True):
        t = statistics.median(times[v])
        print(f"{'views' if v else 'plain'}: {t * 1e3:.3f} ms, {flops / t / 1e12:.0f} TFLOP/s")
    ratio = statistics.median(times[True]) / statistics.median(times[False])
    print(f"views / plain time: {ratio:.3f} (target <= 1.05)")


if __name__ == "__main__":
    main()
