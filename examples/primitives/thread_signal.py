"""TileScale's seed style with per-thread code: threads 0..3 of each block each put a quarter of
the block's rows into the next PE with `putmem_signal_nbi` (signal ADD 1), thread 0 waits until
the four signals from the previous PE have arrived, and the block then copies what arrived to a
second output. `if tx < 4:` issues four puts per block; `if tx == 0:` one wait.

Checked against `jax.lax.ppermute` on random data; needs at least 2 devices. On GPUs:
`python -m jax_tilescale.launch -n 2 examples/primitives/thread_signal.py`; with no GPU:
`python examples/primitives/thread_signal.py`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

import jax_tilescale as ts
from jax_tilescale import language as T

PUTTERS = 4  # threads that each put a quarter of a block's rows


# --- config + kernel --------------------------------------------------------------------------
def push(m: int, n: int, dtype: jnp.dtype, block_m: int = 32) -> ts.TileKernel:
    """received[pe + 1] = shard[pe], echoed[pe + 1] = the same rows, copied after the signals."""
    out = jax.ShapeDtypeStruct((m, n), dtype)
    quarter = block_m // PUTTERS
    row_bytes = n * jnp.dtype(dtype).itemsize

    @ts.kernel(out_shape=(out, out), grid=(m // block_m,), threads=128)
    def push_to_next(shard, received, echoed):
        tx = T.get_thread_binding(0)
        bx, me, npes = T.program_id(0), T.get_pe(), T.get_pe_num()
        arrived = T.alloc_signal(m // block_m)
        if tx < PUTTERS:
            rows = T.ds(bx * block_m + tx * quarter, quarter)
            T.putmem_signal_nbi(received[rows, :], shard[rows, :], quarter * row_bytes, arrived[bx], 1,
                                T.SignalOp.ADD, pe=(me + 1) % npes)
        if tx == 0:
            T.signal_wait_until(arrived[bx], T.Cmp.EQ, PUTTERS)  # the previous PE's rows bx are here
        T.copy(received[T.ds(bx * block_m, block_m), :], echoed[T.ds(bx * block_m, block_m), :])

    return push_to_next


def push_fn(mesh: jax.sharding.Mesh, m: int, n: int, dtype: jnp.dtype):
    kern = push(m, n, dtype)
    return jax.jit(jax.shard_map(kern, mesh=mesh, in_specs=P("x"), out_specs=(P("x"), P("x"))))


# --- check + entry point ----------------------------------------------------------------------
def check(mesh: jax.sharding.Mesh, m: int = 128, n: int = 128, dtype: str = "float32",
          seed: int = 0) -> ts.testing.Verdict:
    """Both outputs on random data vs jax.lax.ppermute (computed on the host)."""
    return ts.testing.check_shift(push_fn(mesh, m, n, jnp.dtype(dtype)), mesh, m, n, dtype, seed)


if __name__ == "__main__":
    ts.testing.main(check, mesh=ts.platform.line(min_devices=2), option_help={"m": "rows per PE"})
