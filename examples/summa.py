"""SUMMA on a P x P mesh (axes "r", "c"): PE (i, j) holds blocks A_ij, B_ij and computes
C_ij = sum_k A_ik @ B_kj. In step k the A blocks of column k are broadcast along the rows and the
B blocks of row k along the columns; here every PE broadcasts its own blocks with puts (A_ij to
every PE of row i, B_ij to every PE of column j, one signal per slot, PE-space helpers
`T.axis_index` / `T.pe_of`), and step k waits for slot k of both and accumulates with T.gemm.

Checked against a float64 product on the host, on random data. Needs a square number of devices,
at least 4 (a 2 x 2 mesh or larger): `python examples/summa.py` runs it on 4 simulated CPU devices
(`--cpu-devices 9`: 3 x 3); on GPUs, `python -m jax_tilescale.launch -n 4 examples/summa.py`.
Its GEMM takes the portable lowering.
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
def summa(bm: int, bk: int, bn: int, p: int, dtype: jnp.dtype, block_k: int = 32) -> ts.TileKernel:
    """Per PE: A block [bm, bk], B block [bk, bn] -> C block [bm, bn] (float32 accumulation, output `dtype`)."""

    @ts.kernel(out_shape=jax.ShapeDtypeStruct((bm, bn), dtype), grid=(1,), threads=128)
    def summa_kernel(a, b, c):
        i, j = T.axis_index("r"), T.axis_index("c")
        a_row = T.alloc_symmetric((p, bm, bk), dtype)  # slot k: A_ik, from PE (i, k)
        b_col = T.alloc_symmetric((p, bk, bn), dtype)  # slot k: B_kj, from PE (k, j)
        a_sig, b_sig = T.alloc_signal(p), T.alloc_signal(p)
        a_s = T.alloc_shared((bm, block_k), dtype)
        b_s = T.alloc_shared((block_k, bn), dtype)
        acc = T.alloc_fragment((bm, bn), jnp.float32)
        # broadcasts: my A block along my row, my B block along my column
        for t in T.serial(p):
            T.putmem_signal_nbi_block(a_row[T.ds(j, 1), :, :], a, sig=a_sig[j], value=1, op=T.SignalOp.SET,
                                      pe=T.pe_of(c=t))
            T.putmem_signal_nbi_block(b_col[T.ds(i, 1), :, :], b, sig=b_sig[i], value=1, op=T.SignalOp.SET,
                                      pe=T.pe_of(r=t))
        T.clear(acc)
        for k in T.serial(p):
            T.signal_wait_until(a_sig[k], T.Cmp.EQ, 1)
            T.signal_wait_until(b_sig[k], T.Cmp.EQ, 1)
            for ko in T.Pipelined(bk // block_k, num_stages=3):
                T.copy(a_row[T.ds(k, 1), :, T.ds(ko * block_k, block_k)], a_s)
                T.copy(b_col[T.ds(k, 1), T.ds(ko * block_k, block_k), :], b_s)
                T.gemm(a_s, b_s, acc)
        T.copy(acc, c)

    return summa_kernel


def mesh_2d(p: int) -> jax.sharding.Mesh:
    return jax.make_mesh((p, p), ("r", "c"), devices=jax.devices()[: p * p])


def block_fn(kern: ts.TileKernel, mesh: jax.sharding.Mesh):
    spec = P("r", "c")
    return jax.jit(jax.shard_map(kern, mesh=mesh, in_specs=(spec, spec), out_specs=spec))


def check_2d(make, mesh: jax.sharding.Mesh, bm: int, bk: int, bn: int, dtype: str, seed: int) -> ts.testing.Verdict:
    """C = A @ B for A [p*bm, p*bk], B [p*bk, p*bn] in p x p blocks (kernel `make`) vs a float64
    product on the host (tolerance per dtype, relative to max |C|)."""
    p = mesh.shape["r"]
    rng = np.random.default_rng(seed)
    a = ts.testing.random_array(rng, (p * bm, p * bk), dtype)
    b = ts.testing.random_array(rng, (p * bk, p * bn), dtype)
    spec = P("r", "c")
    got = block_fn(make(bm, bk, bn, p, jnp.dtype(dtype)), mesh)(ts.testing.place(a, mesh, spec),
                                                               ts.testing.place(b, mesh, spec))
    want = a.astype(np.float64) @ b.astype(np.float64)
    return ts.testing.compare(got, want, "C close to the float64 product", atol_of_max=TOLERANCE[dtype])


# --- check + entry point ----------------------------------------------------------------------
def check(mesh: jax.sharding.Mesh, bm: int = 64, bk: int = 64, bn: int = 64, dtype: str = "bfloat16",
          seed: int = 0) -> ts.testing.Verdict:
    return check_2d(summa, mesh, bm, bk, bn, dtype, seed)


BLOCK_HELP = {"bm": "rows of each PE's A and C blocks", "bk": "columns of A blocks, rows of B blocks",
              "bn": "columns of each PE's B and C blocks"}

if __name__ == "__main__":
    ts.testing.main(check, mesh=ts.platform.square(), option_help=BLOCK_HELP)
