"""Row softmax of an [M, N] array with element-wise tile compute: each block loads `block_m` rows
into shared memory, takes the row maxima (T.reduce_max into a float32 fragment), exponentiates in
a T.Parallel loop (exp2 of (x - max) * log2(e), in float32), sums the rows (T.reduce_sum) and
writes x / sum in the input dtype. Rows are split over the PEs (shard_map); nothing is exchanged.
The rows per PE need not be a multiple of `block_m`: the last block's window ends past the input
(T.copy clips it: those rows load as zeros, a softmax nobody stores). Each block takes whole rows,
so no column is ever outside a tile.

Checked against jax.nn.softmax in float32 (computed on the host) on random data. Runs on any
number of devices. `python examples/softmax.py` runs it on simulated CPU devices through the
interpreter; the CUDA code generator lowers every statement it uses (its nvcc build is tested).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

import jax_tilescale as ts
from jax_tilescale import language as T

LOG2E = math.log2(math.e)
TOLERANCE = {"float32": 1e-6, "float16": 1e-3, "bfloat16": 8e-3}  # absolute (softmax values are in [0, 1])


# --- config + kernel --------------------------------------------------------------------------
def softmax(m: int, n: int, dtype: jnp.dtype, block_m: int = 8) -> ts.TileKernel:
    """Input and output [m, n] of `dtype` (one PE's rows); one block per `block_m` rows (the last
    block's rows past m are clipped)."""

    @ts.kernel(out_shape=jax.ShapeDtypeStruct((m, n), dtype), grid=(T.ceildiv(m, block_m),), threads=128)
    def row_softmax(x, y):
        bx = T.program_id(0)
        x_s = T.alloc_shared((block_m, n), dtype)
        e = T.alloc_fragment((block_m, n), jnp.float32)
        row_max = T.alloc_fragment((block_m,), jnp.float32)
        row_sum = T.alloc_fragment((block_m,), jnp.float32)
        T.copy(x[T.ds(bx * block_m, block_m), :], x_s)  # rows past m: zeros
        T.reduce_max(x_s, row_max, dim=1)  # in float32
        for i, j in T.Parallel(block_m, n):
            e[i, j] = T.exp2((x_s[i, j] - row_max[i]) * LOG2E)
        T.reduce_sum(e, row_sum, dim=1)
        for i, j in T.Parallel(block_m, n):
            e[i, j] = e[i, j] / row_sum[i]
        T.copy(e, y[T.ds(bx * block_m, block_m), :])  # rounded once, to `dtype`; rows past m are skipped

    return row_softmax


def softmax_ir(m: int, n: int, dtype: jnp.dtype, block_m: int = 8):
    """The kernel's verified IR (for code-generation tests)."""
    return softmax(m, n, dtype, block_m).trace(jax.ShapeDtypeStruct((m, n), dtype))


def softmax_fn(mesh: jax.sharding.Mesh, m_per_pe: int, n: int, dtype: jnp.dtype, **blocks):
    kern = softmax(m_per_pe, n, jnp.dtype(dtype), **blocks)
    return jax.jit(jax.shard_map(kern, mesh=mesh, in_specs=P("x", None), out_specs=P("x", None)))


# --- check + entry point ----------------------------------------------------------------------
def check(mesh: jax.sharding.Mesh, m: int = 32, n: int = 200, dtype: str = "bfloat16", seed: int = 0,
          block_m: int = 8) -> ts.testing.Verdict:
    """The kernel's softmax of random rows (m per PE) vs jax.nn.softmax of the same (rounded) input
    in float32 on the host; and each row of the result sums to 1 (up to the output rounding)."""
    x = ts.testing.random_array(seed, (mesh.size * m, n), dtype, scale=3.0)
    got = softmax_fn(mesh, m, n, dtype, block_m=block_m)(ts.testing.place(x, mesh, P("x", None)))
    (want,) = ts.testing.on_host(lambda a: jax.nn.softmax(a.astype(jnp.float32), axis=-1), x)
    off = max(float(np.abs(s.sum(axis=-1) - 1).max()) for s in ts.testing.local_shards(got))
    sums = ts.testing.Verdict("every row sums to 1", off < 4 * TOLERANCE[dtype], f"max |sum - 1| {off:.3g}")
    return ts.testing.compare(got, want, "close to jax.nn.softmax", atol=TOLERANCE[dtype]) & sums


if __name__ == "__main__":
    ts.testing.main(check, mesh=ts.platform.line(min_devices=1), option_help={"m": "rows per PE", "n": "columns"})
