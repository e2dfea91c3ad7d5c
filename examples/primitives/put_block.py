"""Direct peer stores (TileScale's IPC style): every PE writes its block into the next PE's
output with `T.put_block` (half of the columns) and `T.put_warp` (the other half): plain stores
through `nvshmem_ptr`, the peer's mapping of the symmetric heap over NVLink. It then notifies the
peer (fence, signal_op); the peer waits for the signal and copies what arrived to a second output.

Checked against `jax.lax.ppermute` on random data; needs at least 2 devices. On GPUs:
`python -m jax_tilescale.launch -n 2 examples/primitives/put_block.py`; with no GPU:
`python examples/primitives/put_block.py`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

import jax_tilescale as ts
from jax_tilescale import language as T


# --- config + kernel --------------------------------------------------------------------------
def push(m: int, n: int, dtype: jnp.dtype, block_m: int = 32) -> ts.TileKernel:
    """received[pe + 1] = shard[pe], echoed[pe + 1] = the same rows, copied after the signal."""
    out = jax.ShapeDtypeStruct((m, n), dtype)

    @ts.kernel(out_shape=(out, out), grid=(m // block_m,), threads=128)
    def push_to_next(shard, received, echoed):
        bx, me, npes = T.program_id(0), T.get_pe(), T.get_pe_num()
        nxt = (me + 1) % npes
        rows = T.ds(bx * block_m, block_m)
        arrived = T.alloc_signal(m // block_m)
        tile = T.alloc_shared((block_m, n), dtype)
        T.copy(shard[rows, :], tile)
        # TileScale's order: (src, dst, size in elements, dst_pe).
        T.put_block(tile[:, 0 : n // 2], received[rows, 0 : n // 2], block_m * (n // 2), nxt)
        T.put_warp(tile[:, n // 2 : n], received[rows, n // 2 : n], dst_pe=nxt)
        T.fence()
        T.signal_op(arrived[bx], 1, T.SignalOp.SET, nxt)
        T.signal_wait_until(arrived[bx], T.Cmp.EQ, 1)  # the previous PE's rows bx are here
        T.copy(received[rows, :], echoed[rows, :])

    return push_to_next


def push_fn(mesh: jax.sharding.Mesh, m: int, n: int, dtype: jnp.dtype):
    kern = push(m, n, dtype)
    return jax.jit(jax.shard_map(kern, mesh=mesh, in_specs=P("x"), out_specs=(P("x"), P("x"))))


# --- check + entry point ----------------------------------------------------------------------
def check(mesh: jax.sharding.Mesh, m: int = 128, n: int = 128, dtype: str = "float16",
          seed: int = 0) -> ts.testing.Verdict:
    """Both outputs on random data vs jax.lax.ppermute (computed on the host)."""
    return ts.testing.check_shift(push_fn(mesh, m, n, jnp.dtype(dtype)), mesh, m, n, dtype, seed)


if __name__ == "__main__":
    ts.testing.main(check, mesh=ts.platform.line(min_devices=2), option_help={"m": "rows per PE"})
