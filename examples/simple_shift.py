"""Ring shift: every PE puts its block into the next PE's output.

Checked against `jax.lax.ppermute` on random data. Needs at least 2 devices. On GPUs:
`python -m jax_tilescale.launch -n 2 examples/simple_shift.py`; with no GPU:
`python examples/simple_shift.py` (the interpreter on simulated CPU devices).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

import jax_tilescale as ts
from jax_tilescale import language as T


# --- config + kernel --------------------------------------------------------------------------
def simple_shift(m: int, n: int, dtype: jnp.dtype, block_m: int = 64) -> ts.TileKernel:
    """out[pe + 1] = in[pe]: each block of rows goes straight to the next PE (global to global)."""

    @ts.kernel(out_shape=jax.ShapeDtypeStruct((m, n), dtype), grid=(m // block_m,), threads=128)
    def shift(src, dst):
        rows = T.ds(T.program_id(0) * block_m, block_m)
        T.putmem_nbi_block(dst[rows, :], src[rows, :], pe=(T.get_pe() + 1) % T.get_pe_num())

    return shift


def shift_fn(mesh: jax.sharding.Mesh, m: int, n: int, dtype: jnp.dtype, block_m: int = 64):
    """The jitted shift over mesh axis "x" (rows sharded by PE)."""
    kern = simple_shift(m, n, jnp.dtype(dtype), block_m)
    return jax.jit(jax.shard_map(kern, mesh=mesh, in_specs=P("x"), out_specs=P("x")))


# --- check + entry point ----------------------------------------------------------------------
def check(mesh: jax.sharding.Mesh, m: int = 256, n: int = 128, dtype: str = "float32",
          seed: int = 0) -> ts.testing.Verdict:
    """The kernel on random data vs jax.lax.ppermute (computed on the host)."""
    return ts.testing.check_shift(shift_fn(mesh, m, n, dtype), mesh, m, n, dtype, seed)


if __name__ == "__main__":
    ts.testing.main(check, mesh=ts.platform.line(min_devices=2), option_help={"m": "rows per PE"})
