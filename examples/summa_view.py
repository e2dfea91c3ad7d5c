"""SUMMA written with distributed views: A, B and C are sharded in blocks over a P x P mesh (axes
"r", "c"; `P("r", "c")`), and the kernel reads them as whole arrays in global coordinates
(`T.view`). PE (i, j) computes C_ij = sum_k A_ik @ B_kj by copying the tiles of A's block row i
and B's block column j into shared memory: each `T.copy` from a view is a local copy when the
tile is this PE's and a load from the owner through `nvshmem_ptr` (getmem where the peer is not
load/store reachable) when it is not. No explicit puts, gets or signals; inputs never change, so
reading them from peers needs no synchronisation.

Checked against `jnp.dot` in float32 on the host, on random data. Needs a square number of
devices, at least 4: `python examples/summa_view.py` (4 simulated CPU devices; `--cpu-devices 9`:
3 x 3); on GPUs `python -m jax_tilescale.launch -n 4 examples/summa_view.py`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

import jax_tilescale as ts
from jax_tilescale import language as T

TOLERANCE = {"float32": 1e-5, "float16": 5e-3, "bfloat16": 2e-2}  # relative to max |C|
SPEC = P("r", "c")


# --- config + kernel --------------------------------------------------------------------------
def summa_view(bm: int, bk: int, bn: int, p: int, dtype: jnp.dtype, block_k: int = 32) -> ts.TileKernel:
    """Per PE: A block [bm, bk], B block [bk, bn] -> C block [bm, bn] (float32 accumulation)."""

    @ts.kernel(out_shape=jax.ShapeDtypeStruct((bm, bn), jnp.float32), grid=(1,), threads=128)
    def summa_view_kernel(a, b, c):
        i, j = T.axis_index("r"), T.axis_index("c")
        A = T.view(a, SPEC)  # [p * bm, p * bk], in global coordinates
        B = T.view(b, SPEC)  # [p * bk, p * bn]
        C = T.view(c, SPEC)  # [p * bm, p * bn]
        a_s = T.alloc((bm, block_k), dtype, level="l1")
        b_s = T.alloc((block_k, bn), dtype, level="l1")
        acc = T.alloc((bm, bn), jnp.float32, level="l0")
        T.clear(acc)
        for kk in T.serial(p * bk // block_k):  # over the whole K: tiles of PE (i, kk // ...) and (..., j)
            T.copy(A[T.ds(i * bm, bm), T.ds(kk * block_k, block_k)], a_s)
            T.copy(B[T.ds(kk * block_k, block_k), T.ds(j * bn, bn)], b_s)
            T.gemm(a_s, b_s, acc)
        T.copy(acc, C[T.ds(i * bm, bm), T.ds(j * bn, bn)])  # this PE's block: a local copy

    return summa_view_kernel


def mesh_2d(p: int) -> jax.sharding.Mesh:
    return jax.make_mesh((p, p), ("r", "c"), devices=jax.devices()[: p * p])


def summa_view_fn(mesh: jax.sharding.Mesh, bm: int, bk: int, bn: int, dtype: jnp.dtype, **blocks: int):
    kern = summa_view(bm, bk, bn, mesh.shape["r"], dtype, **blocks)
    return jax.jit(jax.shard_map(kern, mesh=mesh, in_specs=(SPEC, SPEC), out_specs=SPEC))


# --- check + entry point ----------------------------------------------------------------------
def check(mesh: jax.sharding.Mesh, bm: int = 64, bk: int = 64, bn: int = 64, dtype: str = "float32",
          seed: int = 0) -> ts.testing.Verdict:
    """C = A @ B for A [p*bm, p*bk], B [p*bk, p*bn] in p x p blocks vs jnp.dot in float32 on the host."""
    p = mesh.shape["r"]
    rng = np.random.default_rng(seed)
    a = ts.testing.random_array(rng, (p * bm, p * bk), dtype)
    b = ts.testing.random_array(rng, (p * bk, p * bn), dtype)
    got = summa_view_fn(mesh, bm, bk, bn, jnp.dtype(dtype))(ts.testing.place(a, mesh, SPEC),
                                                             ts.testing.place(b, mesh, SPEC))
    with jax.default_device(jax.local_devices(backend="cpu")[0]):
        want = np.asarray(jnp.dot(jnp.asarray(a, jnp.float32), jnp.asarray(b, jnp.float32),
                                  precision=jax.lax.Precision.HIGHEST))
    return ts.testing.compare(got, want, "C close to jnp.dot in float32", atol_of_max=TOLERANCE[dtype])


BLOCK_HELP = {"bm": "rows of each PE's A and C blocks", "bk": "columns of A blocks, rows of B blocks",
              "bn": "columns of each PE's B and C blocks"}

if __name__ == "__main__":
    ts.testing.main(check, mesh=ts.platform.square(), option_help=BLOCK_HELP)
