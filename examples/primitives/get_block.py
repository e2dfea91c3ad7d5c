"""Direct peer loads (TileScale's IPC style) and NVSHMEM gets: every PE pulls the previous PE's
input. `pulled` comes through `T.get_block` / `T.get_warp` (plain loads through `nvshmem_ptr`,
complete when they return); `fetched` through `T.getmem_nbi_block` into a shared tile, complete
only after `T.quiet()`. Peers read an *input* here, so the runtime stages it in symmetric memory
(copied in before the launch).

Checked against `jax.lax.ppermute` on random data; needs at least 2 devices. On GPUs:
`python -m jax_tilescale.launch -n 2 examples/primitives/get_block.py`; with no GPU:
`python examples/primitives/get_block.py`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

import jax_tilescale as ts
from jax_tilescale import language as T


# --- config + kernel --------------------------------------------------------------------------
def pull(m: int, n: int, dtype: jnp.dtype, block_m: int = 32) -> ts.TileKernel:
    """pulled[pe] = fetched[pe] = shard[pe - 1]."""
    out = jax.ShapeDtypeStruct((m, n), dtype)

    @ts.kernel(out_shape=(out, out), grid=(m // block_m,), threads=128)
    def pull_from_previous(shard, pulled, fetched):
        bx, me, npes = T.program_id(0), T.get_pe(), T.get_pe_num()
        prv = (me + npes - 1) % npes
        rows = T.ds(bx * block_m, block_m)
        tile = T.alloc_shared((block_m, n), dtype)
        # TileScale's order: (src, dst, size in elements, src_pe).
        T.get_block(shard[rows, 0 : n // 2], pulled[rows, 0 : n // 2], block_m * (n // 2), prv)
        T.get_warp(shard[rows, n // 2 : n], pulled[rows, n // 2 : n], src_pe=prv)
        # NVSHMEM's order: (dst, src, bytes, pe); the tile is undefined until the quiet.
        T.getmem_nbi_block(tile, shard[rows, :], block_m * n * jnp.dtype(dtype).itemsize, prv)
        T.quiet()
        T.copy(tile, fetched[rows, :])

    return pull_from_previous


def pull_fn(mesh: jax.sharding.Mesh, m: int, n: int, dtype: jnp.dtype):
    kern = pull(m, n, dtype)
    return jax.jit(jax.shard_map(kern, mesh=mesh, in_specs=P("x"), out_specs=(P("x"), P("x"))))


# --- check + entry point ----------------------------------------------------------------------
def check(mesh: jax.sharding.Mesh, m: int = 128, n: int = 128, dtype: str = "float32",
          seed: int = 0) -> ts.testing.Verdict:
    """Both outputs on random data vs jax.lax.ppermute (computed on the host)."""
    return ts.testing.check_shift(pull_fn(mesh, m, n, jnp.dtype(dtype)), mesh, m, n, dtype, seed)


if __name__ == "__main__":
    ts.testing.main(check, mesh=ts.platform.line(min_devices=2), option_help={"m": "rows per PE"})
