"""Ring reduce-scatter: each PE holds a vector of `npes * m` rows; PE p ends with the sum over all
PEs of row block p (rows [p * m, (p + 1) * m)), as `jax.lax.psum_scatter(x, "x", tiled=True)`.

The textbook ring, npes - 1 steps: at step 0 every PE puts its own rows of block (me - 1) into the
next PE's `first` buffer with a signal; at step s it waits for the partial sum of block
(me - s - 2) from the previous PE, adds its own rows of that block in float32 and puts the sum on
to the next PE (float32 on the wire), until at the last step the partial of block `me` arrives:
plus its own rows, that is its output, rounded once to the output type. One thread block per
`block_m` rows of the output, each with its own signal words (blocks never wait for each other);
when `m` is not a multiple of `block_m` the last block takes the rest of the rows (a ragged tail).

float32 and bf16 (and float16) inputs; sums in float32. Checked against jax.lax.psum_scatter on
random data (on the host: float32 there, so a bf16 result is within one rounding of it). Needs at
least 2 devices. On GPUs: `python -m jax_tilescale.launch -n 2 examples/reduce_scatter.py`; with
no GPU: `python examples/reduce_scatter.py` (interpreter).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

import jax_tilescale as ts
from jax_tilescale import language as T

ACC_DTYPE = jnp.float32  # partial sums: computed and sent in float32


# --- config + kernel --------------------------------------------------------------------------
def ring_reduce_scatter(m: int, n: int, npes: int, dtype: jnp.dtype, block_m: int = 64) -> ts.TileKernel:
    """x [npes * m, n] per PE -> out [m, n] = sum over PEs of their rows [pe * m, (pe + 1) * m)."""
    block_m = min(block_m, m)
    nblocks = -(-m // block_m)
    tail = m - (nblocks - 1) * block_m  # rows of the last block (block_m unless m is ragged)
    steps = npes - 1

    @ts.kernel(out_shape=jax.ShapeDtypeStruct((m, n), dtype), grid=(nblocks,), threads=128)
    def ring_rs(x, out):
        bx = T.program_id(0)
        me, npes_ = T.get_pe(), T.get_pe_num()
        nxt = (me + 1) % npes_
        first = T.alloc_symmetric((m, n), dtype)  # step 0's partial: the sender's own rows, as they are
        sig = T.alloc_signal(steps * nblocks)  # word s * nblocks + bx: block bx's partial of step s arrived
        if steps > 1:
            recv = T.alloc_symmetric((steps - 1, m, n), ACC_DTYPE)  # slot s - 1: the partial of step s
            part = T.alloc_symmetric((steps - 1, m, n), ACC_DTYPE)  # slot s: the partial sent at step s + 1

        def ring(row0, rows):  # the whole ring for output rows [row0, row0 + rows)
            block = T.ds(row0, rows)
            chunk0 = (me + npes_ - 1) % npes_
            T.putmem_signal_nbi_block(first[block, :], x[T.ds(chunk0 * m + row0, rows), :], sig=sig[bx],
                                      value=1, op=T.SignalOp.SET, pe=nxt)
            for s in range(steps):  # unrolled: npes - 1 static steps
                T.signal_wait_until(sig[s * nblocks + bx], T.Cmp.EQ, 1)
                chunk = (me + 2 * npes_ - s - 2) % npes_  # the block whose partial arrived at step s

                def got(r, j, s=s):  # element (r, j) of the partial that arrived at step s
                    return first[r, j] if s == 0 else recv[s - 1, r, j]

                if s < steps - 1:
                    for i, j in T.Parallel(rows, n):
                        part[s, row0 + i, j] = got(row0 + i, j) + x[chunk * m + row0 + i, j]
                    T.putmem_signal_nbi_block(recv[s, block, :], part[s, block, :], sig=sig[(s + 1) * nblocks + bx],
                                              value=1, op=T.SignalOp.SET, pe=nxt)
                else:  # chunk == me: this PE's result
                    for i, j in T.Parallel(rows, n):
                        out[row0 + i, j] = got(row0 + i, j) + x[chunk * m + row0 + i, j]

        if tail == block_m:
            ring(bx * block_m, block_m)
        elif bx < nblocks - 1:
            ring(bx * block_m, block_m)
        else:
            ring((nblocks - 1) * block_m, tail)

    return ring_rs


def reduce_scatter_fn(mesh: jax.sharding.Mesh, m: int, n: int, dtype: jnp.dtype, block_m: int = 64):
    """The jitted reduce-scatter over mesh axis "x": global input [npes * npes * m, n] (each PE's
    shard [npes * m, n]) -> global output [npes * m, n] (PE p's rows: its reduced block)."""
    kern = ring_reduce_scatter(m, n, mesh.size, jnp.dtype(dtype), block_m)
    return jax.jit(jax.shard_map(kern, mesh=mesh, in_specs=P("x"), out_specs=P("x")))


def reduce_scatter_reference(shard: jax.Array) -> jax.Array:
    return jax.lax.psum_scatter(shard, "x", scatter_dimension=0, tiled=True)


def xla_reduce_scatter_fn(mesh: jax.sharding.Mesh):
    """jax.lax.psum_scatter on the devices (an XLA collective: benchmarks and GPU tests compare with it)."""
    return jax.jit(jax.shard_map(reduce_scatter_reference, mesh=mesh, in_specs=P("x"), out_specs=P("x")))


def tolerance(dtype: jnp.dtype, npes: int) -> float:
    """|ours - reference| allowed, as a fraction of max|reference|: the sums run in different orders
    (float32 roundings, one per addition) and a 16-bit output rounds once more, by up to half an
    ulp of its type, which may be a different neighbour than the reference's."""
    rounding = np.finfo(np.float32).eps * npes
    dt = jnp.dtype(dtype)
    return float(rounding + (jnp.finfo(dt).eps if dt.itemsize < 4 else 0.0))


# --- check + entry point ----------------------------------------------------------------------
def check(mesh: jax.sharding.Mesh, m: int = 96, n: int = 64, dtype: str = "bfloat16", block_m: int = 64,
          seed: int = 0) -> ts.testing.Verdict:
    """The kernel on random data vs jax.lax.psum_scatter(tiled=True) in float32 on the host."""
    npes = mesh.size
    x = ts.testing.random_array(seed, (npes * npes * m, n), dtype)
    (want,) = ts.testing.lax_on_host(reduce_scatter_reference, mesh, P("x"), P("x"))(x.astype(np.float32))
    got = reduce_scatter_fn(mesh, m, n, jnp.dtype(dtype), block_m)(ts.testing.place(x, mesh, P("x")))
    ragged = f", ragged: last block {m % block_m} of {block_m} rows" if m % block_m else ""
    return ts.testing.compare(got, want, f"close to jax.lax.psum_scatter (float32 sums{ragged})",
                              atol_of_max=tolerance(jnp.dtype(dtype), npes))


if __name__ == "__main__":
    ts.testing.main(check, mesh=ts.platform.line(min_devices=2),
                    option_help={"m": "output rows per PE", "block_m": "output rows per thread block"})
