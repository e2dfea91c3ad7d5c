"""SUMMA on a P x P mesh (axes "r", "c"): PE (i, j) holds blocks A_ij, B_ij and computes
C_ij = sum_k A_ik @ B_kj. In step k the A blocks of column k are broadcast along the rows and the
B blocks of row k along the columns; here every PE broadcasts its own blocks with puts (A_ij to
every PE of row i, B_ij to every PE of column j, one signal per slot, PE-space helpers
`T.axis_index` / `T.pe_of`), and step k waits for slot k of both and accumulates with T.gemm.

Checked against a float64 product on the host, on random data. `python examples/summa.py` runs it on
simulated CPU devices (a square number of them). On GPUs it needs a square number of them too
(4: `python -m jax_tilescale.launch -n 4 examples/summa.py`), which the GPU machines lent so far
do not have (issue 4). Its GEMM takes the portable lowering.
"""

from __future__ import annotations

import argparse
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
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
    return jax.jit(jax.shard_map(kern, mesh=mesh, in_specs=(spec, spec), out_specs=spec, check_vma=False))


def check_2d(make, mesh: jax.sharding.Mesh, bm: int, bk: int, bn: int, dtype: str, seed: int) -> bool:
    """C = A @ B for A [p*bm, p*bk], B [p*bk, p*bn] in p x p blocks vs a float64 product on the host."""
    p = mesh.shape["r"]
    ka, kb = jax.random.split(jax.random.key(seed))
    a = jax.random.normal(ka, (p * bm, p * bk), jnp.float32).astype(dtype)
    b = jax.random.normal(kb, (p * bk, p * bn), jnp.float32).astype(dtype)
    sharding = NamedSharding(mesh, P("r", "c"))
    got = block_fn(make(bm, bk, bn, p, jnp.dtype(dtype)), mesh)(jax.device_put(a, sharding),
                                                                 jax.device_put(b, sharding))
    # on the host, so that every process holds the same reference (GPU dots may differ per process)
    want = (np.asarray(a, np.float64) @ np.asarray(b, np.float64)).astype(np.float32)
    scale = float(np.max(np.abs(want)))
    return ts.testing.allclose(got.astype(jnp.float32), jax.device_put(want, sharding),
                               atol=TOLERANCE[dtype] * scale)


# --- check + entry point ----------------------------------------------------------------------
def check(mesh: jax.sharding.Mesh, bm: int = 64, bk: int = 64, bn: int = 64, dtype: str = "bfloat16",
          seed: int = 0) -> bool:
    return check_2d(summa, mesh, bm, bk, bn, dtype, seed)


def main(name: str = "summa", make_check=check) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--block", type=int, default=64, help="rows and columns of each PE's blocks")
    ap.add_argument("--dtype", default="bfloat16")
    a = ap.parse_args()
    platform = ts.platform.setup()
    p = math.isqrt(platform.num_devices)
    mesh = mesh_2d(p)
    ok = make_check(mesh, a.block, a.block, a.block, a.dtype)
    ts.testing.report(name, platform, {
        f"{p}x{p} PEs, {a.block}x{a.block} {a.dtype} blocks, random data, close to the float64 product": ok,
    })


if __name__ == "__main__":
    main()
