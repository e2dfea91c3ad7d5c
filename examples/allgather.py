"""Ring all-gather, as in TileScale's example: block (bx, by) puts rows bx of this PE's shard
into the output of PE (me + by) % npes, so every PE ends with every shard (its own included).

Checked against `jax.lax.all_gather`. On GPUs: `python -m jax_tilescale.launch -n 2
examples/allgather.py`; with no GPU: `python examples/allgather.py` (interpreter).
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import jax_tilescale as ts
from jax_tilescale import language as T


# --- config + kernel --------------------------------------------------------------------------
def allgather(m_per_pe: int, n: int, npes: int, dtype: jnp.dtype, block_m: int = 64) -> ts.TileKernel:
    """Output [npes * m_per_pe, n] on every PE; grid = (row blocks, target PEs)."""

    @ts.kernel(out_shape=jax.ShapeDtypeStruct((npes * m_per_pe, n), dtype), grid=(m_per_pe // block_m, npes),
               threads=128)
    def ring_allgather(shard, gathered):
        bx, by = T.program_id(0), T.program_id(1)
        me, npes_ = T.get_pe(), T.get_pe_num()
        rows = T.ds(bx * block_m, block_m)
        T.putmem_nbi_block(gathered[T.ds(me * m_per_pe + bx * block_m, block_m), :], shard[rows, :],
                           pe=(me + by) % npes_)

    return ring_allgather


def allgather_pull(m_per_pe: int, n: int, npes: int, dtype: jnp.dtype, block_m: int = 64) -> ts.TileKernel:
    """The same result by reading: block (bx, by) gets rows bx of PE (me + by)'s shard into its own output.

    Peers read the input, so the runtime stages the *input* in symmetric memory (one shard copied in)
    and the output stays XLA's own buffer (nothing copied out): fewer bytes than pushing.
    """

    @ts.kernel(out_shape=jax.ShapeDtypeStruct((npes * m_per_pe, n), dtype), grid=(m_per_pe // block_m, npes),
               threads=128)
    def ring_allgather_pull(shard, gathered):
        bx, by = T.program_id(0), T.program_id(1)
        src = (T.get_pe() + by) % T.get_pe_num()
        T.getmem_nbi_block(gathered[T.ds(src * m_per_pe + bx * block_m, block_m), :],
                           shard[T.ds(bx * block_m, block_m), :], pe=src)

    return ring_allgather_pull


def gather_fn(mesh: jax.sharding.Mesh, m_per_pe: int, n: int, dtype: jnp.dtype, block_m: int = 64,
              pull: bool = False):
    """The jitted all-gather over mesh axis "x" (input sharded by rows, output replicated)."""
    kern = (allgather_pull if pull else allgather)(m_per_pe, n, mesh.size, dtype, block_m)
    return jax.jit(jax.shard_map(kern, mesh=mesh, in_specs=P("x"), out_specs=P(None), check_vma=False))


def xla_gather_fn(mesh: jax.sharding.Mesh):
    return jax.jit(jax.shard_map(lambda a: jax.lax.all_gather(a, "x", tiled=True), mesh=mesh, in_specs=P("x"),
                                 out_specs=P(None), check_vma=False))


# --- check + entry point ----------------------------------------------------------------------
def check(mesh: jax.sharding.Mesh, m_per_pe: int = 256, n: int = 128, dtype: str = "float16", seed: int = 0,
          pull: bool = False) -> bool:
    """Runs the kernel on random data over mesh axis "x" and compares with jax.lax.all_gather."""
    x = jax.random.normal(jax.random.key(seed), (mesh.size * m_per_pe, n), jnp.float32).astype(dtype)
    x = jax.device_put(x, NamedSharding(mesh, P("x")))
    got = gather_fn(mesh, m_per_pe, n, jnp.dtype(dtype), pull=pull)(x)
    return ts.testing.allclose(got, xla_gather_fn(mesh)(x))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--m", type=int, default=256, help="rows per PE")
    ap.add_argument("--n", type=int, default=128)
    ap.add_argument("--dtype", default="float16")
    a = ap.parse_args()
    platform = ts.platform.setup()
    mesh = jax.make_mesh((platform.num_devices,), ("x",))
    ts.testing.report("allgather", platform, {
        f"{how}, {mesh.size} PEs, {a.m}x{a.n} {a.dtype} per PE, random data, every element equal to "
        "jax.lax.all_gather": check(mesh, a.m, a.n, a.dtype, pull=how == "pull")
        for how in ("push", "pull")
    })


if __name__ == "__main__":
    main()
