"""GEMM + all-reduce written with distributed views, in the seed's layouts: A is `T.FullCol`
(each PE holds a slab of A's columns), B `T.FullRow` (the matching slab of B's rows) and C
`T.Replica` (every PE holds all of C). Each PE multiplies its slabs (its tiles of the views are
local, so the copies are plain copies) and `T.atomic_add`s its partial C tile into the Replica
view, which reduces: when the call returns every PE's C is the sum over PEs, i.e. A @ B. No
explicit puts, gets or signals.

Checked against `jnp.dot` in float32 on the host, on random data. Needs at least 2 devices:
`python examples/gemm_allreduce_view.py` (simulated CPU devices); on GPUs
`python -m jax_tilescale.launch -n 2 examples/gemm_allreduce_view.py`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

import jax_tilescale as ts
from jax_tilescale import language as T

TOLERANCE = {"float32": 1e-5, "float16": 5e-3, "bfloat16": 2e-2}  # relative to max |C|


# --- config + kernel --------------------------------------------------------------------------
def gemm_allreduce_view(m: int, k_per_pe: int, n: int, npes: int, dtype: jnp.dtype, block_m: int = 32,
                        block_n: int = 32, block_k: int = 32) -> ts.TileKernel:
    """Inputs: A columns [m, k_per_pe], B rows [k_per_pe, n]; output C [m, n] (float32), the same on
    every PE. Block (bx, by) computes C's tile (bx, by)."""

    @ts.kernel(out_shape=jax.ShapeDtypeStruct((m, n), jnp.float32), grid=(m // block_m, n // block_n),
               threads=128, replicated=True)
    def gemm_allreduce_view_kernel(a, b, c):
        bx, by, me = T.program_id(0), T.program_id(1), T.get_pe()
        A = T.view(a, T.FullCol)  # [m, npes * k_per_pe]
        B = T.view(b, T.FullRow)  # [npes * k_per_pe, n]
        C = T.view(c, T.Replica)  # [m, n] on every PE
        a_s = T.alloc((block_m, block_k), dtype, level="l1")
        b_s = T.alloc((block_k, block_n), dtype, level="l1")
        c_s = T.alloc((block_m, block_n), jnp.float32, level="l1")
        acc = T.alloc((block_m, block_n), jnp.float32, level="l0")
        rows, cols = T.ds(bx * block_m, block_m), T.ds(by * block_n, block_n)
        T.clear(acc)
        for kk in T.serial(k_per_pe // block_k):  # this PE's slab of K: local tiles
            T.copy(A[rows, T.ds(me * k_per_pe + kk * block_k, block_k)], a_s)
            T.copy(B[T.ds(me * k_per_pe + kk * block_k, block_k), cols], b_s)
            T.gemm(a_s, b_s, acc)
        T.copy(acc, c_s)
        T.clear(acc)
        T.copy(acc, c[rows, cols])  # this PE's replica of the tile starts at zero
        T.atomic_add(C[rows, cols], c_s)  # every PE's partial tile into every replica

    return gemm_allreduce_view_kernel


def gemm_allreduce_fn(mesh: jax.sharding.Mesh, m: int, k: int, n: int, dtype: jnp.dtype, **blocks: int):
    kern = gemm_allreduce_view(m, k, n, mesh.size, dtype, **blocks)
    return jax.jit(jax.shard_map(kern, mesh=mesh, in_specs=(P(None, "x"), P("x", None)), out_specs=P()))


# --- check + entry point ----------------------------------------------------------------------
def check(mesh: jax.sharding.Mesh, m: int = 64, k: int = 64, n: int = 64, dtype: str = "float32",
          seed: int = 0, **blocks: int) -> ts.testing.Verdict:
    """A [m, PEs * k] @ B [PEs * k, n] through the kernel vs jnp.dot in float32 on the host; k
    columns of A and rows of B per PE."""
    rng = np.random.default_rng(seed)
    a = ts.testing.random_array(rng, (m, mesh.size * k), dtype)
    b = ts.testing.random_array(rng, (mesh.size * k, n), dtype)
    got = gemm_allreduce_fn(mesh, m, k, n, jnp.dtype(dtype), **blocks)(ts.testing.place(a, mesh, P(None, "x")),
                                                                       ts.testing.place(b, mesh, P("x", None)))
    with jax.default_device(jax.local_devices(backend="cpu")[0]):
        want = np.asarray(jnp.dot(jnp.asarray(a, jnp.float32), jnp.asarray(b, jnp.float32),
                                  precision=jax.lax.Precision.HIGHEST))
    return ts.testing.compare(got, want, "C close to jnp.dot in float32", atol_of_max=TOLERANCE[dtype])


if __name__ == "__main__":
    ts.testing.main(check, mesh=ts.platform.line(min_devices=2),
                    option_help={"k": "columns of A and rows of B per PE"})
