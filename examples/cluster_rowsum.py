"""Row sums of a long [M, N] array, each block of rows split over a thread-block cluster: the blocks of
a cluster (Hopper's, `ts.kernel(cluster=)`) each sum `block_m` rows over their share of the columns, then
add their partial sums through distributed shared memory (no global round trip, no second kernel).

Each block loads its [block_m, n / split] slice into shared memory and sums its rows in float32
(T.reduce_sum) into a fragment; it copies that into row `rank` of the `slots` tile of block 0 of its
cluster (`T.cluster_tile`); the cluster meets (`T.cluster_sync`); block 0 sums the slots down their
`split` rows and stores the result in the input dtype. Rows are split over the PEs (shard_map);
nothing crosses devices. M per PE need not be a multiple of `block_m` (the last block's window clips).

Checked against a float64 sum of the (rounded) input on the host, random data. `python
examples/cluster_rowsum.py` runs it on simulated CPU devices through the interpreter (which runs a
cluster's blocks together and reports a peer store no `cluster_sync` orders as a race); on an H100/H200
as written (sm_90: clusters, `mapa`, `barrier.cluster`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

import jax_tilescale as ts
from jax_tilescale import language as T

TOLERANCE = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1e-2}  # relative to max |row sum|


# --- config + kernel --------------------------------------------------------------------------
def rowsum(m: int, n: int, dtype: jnp.dtype, block_m: int = 8, split: int = 4) -> ts.TileKernel:
    """Input [m, n] and output [m] of `dtype` (one PE's rows); a cluster of `split` blocks per `block_m` rows,
    each taking n / split columns."""
    if n % split or not 1 <= split <= 8:
        raise ValueError(f"split={split} must divide n={n} and be at most 8 (a cluster's blocks)")
    cols = n // split

    @ts.kernel(out_shape=jax.ShapeDtypeStruct((m,), dtype), grid=(split, T.ceildiv(m, block_m)), threads=128,
               cluster=(split, 1))
    def cluster_rowsum(x, y):
        rank, rows = T.cluster_rank(), T.program_id(1) * block_m
        x_s = T.alloc_shared((block_m, cols), dtype)
        part = T.alloc_fragment((block_m,), jnp.float32)
        slots = T.alloc_shared((split, block_m), jnp.float32)  # block 0's: one row per block of the cluster
        total = T.alloc_fragment((block_m,), jnp.float32)
        T.copy(x[T.ds(rows, block_m), T.ds(rank * cols, cols)], x_s)  # rows past m: zeros
        T.reduce_sum(x_s, part, dim=1)  # in float32
        T.copy(part, T.cluster_tile(slots[rank, :], 0))
        T.cluster_sync()  # every block's slot is written before block 0 reads them
        if rank == 0:
            T.reduce_sum(slots, total, dim=0)
            T.copy(total, y[T.ds(rows, block_m)])  # rounded once, to `dtype`; rows past m are skipped

    return cluster_rowsum


def rowsum_fn(mesh: jax.sharding.Mesh, m_per_pe: int, n: int, dtype: jnp.dtype, **config):
    kern = rowsum(m_per_pe, n, jnp.dtype(dtype), **config)
    return jax.jit(jax.shard_map(kern, mesh=mesh, in_specs=P("x", None), out_specs=P("x")))


# --- check + entry point ----------------------------------------------------------------------
def check(mesh: jax.sharding.Mesh, m: int = 20, n: int = 256, dtype: str = "bfloat16", seed: int = 0,
          block_m: int = 8, split: int = 4) -> ts.testing.Verdict:
    """The kernel's row sums of random rows (m per PE) against a float64 sum of the same input on the host."""
    x = ts.testing.random_array(seed, (mesh.size * m, n), dtype)
    got = rowsum_fn(mesh, m, n, dtype, block_m=block_m, split=split)(ts.testing.place(x, mesh, P("x", None)))
    want = np.asarray(x, np.float64).sum(axis=1)
    return ts.testing.compare(got, want, "close to the float64 row sums",
                              atol=TOLERANCE[dtype] * float(np.max(np.abs(want))))


if __name__ == "__main__":
    ts.testing.main(check, mesh=ts.platform.line(min_devices=1),
                    option_help={"m": "rows per PE", "n": "columns", "split": "blocks per cluster"})
