"""Row softmax of an [M, N] array with element-wise tile compute: each block loads `block_m` rows
into shared memory, takes the row maxima (T.reduce_max into a float32 fragment), exponentiates in
a T.Parallel loop (exp2 of (x - max) * log2(e), in float32), sums the rows (T.reduce_sum) and
writes x / sum in the input dtype. Rows are split over the PEs (shard_map); nothing is exchanged.
The rows per PE need not be a multiple of `block_m`: the last block's window ends past the input
(T.copy clips it: those rows load as zeros, a softmax nobody stores). Each block takes whole rows,
so no column is ever outside a tile.

Checked against jax.nn.softmax in float32 on random data. `python examples/softmax.py` runs it on
simulated CPU devices through the interpreter; the CUDA code generator lowers every statement it
uses (its nvcc build is tested), but it has not been run on a GPU yet.
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
    return jax.jit(jax.shard_map(kern, mesh=mesh, in_specs=P("x", None), out_specs=P("x", None), check_vma=False))


# --- check + entry point ----------------------------------------------------------------------
def check(mesh: jax.sharding.Mesh, m_per_pe: int = 32, n: int = 200, dtype: str = "bfloat16", seed: int = 0,
          **blocks) -> bool:
    """The kernel's softmax vs jax.nn.softmax of the same (rounded) input in float32."""
    x = (3 * jax.random.normal(jax.random.key(seed), (mesh.size * m_per_pe, n), jnp.float32)).astype(dtype)
    sharding = NamedSharding(mesh, P("x", None))
    got = softmax_fn(mesh, m_per_pe, n, dtype, **blocks)(jax.device_put(x, sharding))
    want = jax.device_put(jax.nn.softmax(x.astype(jnp.float32), axis=-1), sharding)
    ok = ts.testing.allclose(got.astype(jnp.float32), want, atol=TOLERANCE[dtype])
    sums = [np.abs(s.sum(axis=-1) - 1).max() for s in ts.testing.local_shards(got)]
    return ok and max(sums) < 4 * TOLERANCE[dtype]  # each row sums to 1 (up to the output rounding)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--m", type=int, default=64, help="rows per PE")
    ap.add_argument("--n", type=int, default=1000, help="columns (the softmax axis)")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--block-m", type=int, default=8)
    a = ap.parse_args()
    platform = ts.platform.setup()
    mesh = jax.make_mesh((platform.num_devices,), ("x",))
    ok = check(mesh, a.m, a.n, a.dtype, block_m=a.block_m)
    ts.testing.report("softmax", platform, {
        f"{mesh.size} PEs, {a.m}x{a.n} rows per PE, {a.dtype}, random data, close to jax.nn.softmax in float32": ok,
    })


if __name__ == "__main__":
    main()
