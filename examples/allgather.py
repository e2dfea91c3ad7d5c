"""Ring all-gather, as in TileScale's example: block (bx, by) puts rows bx of this PE's shard
into the output of PE (me + by) % npes, so every PE ends with every shard (its own included).
Each put carries a signal on the word of its block, which the receiver's block (bx, by) awaits: the
kernel proves its own completion and ends without the end-of-call meeting (codegen/end_of_call.py).

Both kernels (`--kernel push`, `pull` or `both`) are checked against `jax.lax.all_gather` on
random data. Needs at least 2 devices. On GPUs: `python -m jax_tilescale.launch -n 2
examples/allgather.py`; with no GPU: `python examples/allgather.py` (interpreter).
"""

from __future__ import annotations

from typing import Literal

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

import jax_tilescale as ts
from jax_tilescale import language as T


# --- config + kernel --------------------------------------------------------------------------
def allgather(m_per_pe: int, n: int, npes: int, dtype: jnp.dtype, block_m: int = 64) -> ts.TileKernel:
    """Output [npes * m_per_pe, n] on every PE; grid = (row blocks, target PEs)."""

    @ts.kernel(out_shape=jax.ShapeDtypeStruct((npes * m_per_pe, n), dtype), grid=(m_per_pe // block_m, npes),
               threads=128, replicated=True)
    def ring_allgather(shard, gathered):
        arrived = T.alloc_signal((m_per_pe // block_m) * npes)  # one word per block: (bx, by)
        bx, by = T.program_id(0), T.program_id(1)
        me, npes_ = T.get_pe(), T.get_pe_num()
        rows = T.ds(bx * block_m, block_m)
        word = arrived[bx * npes + by]  # block (bx, by) of PE me - by puts into this PE's word (bx, by)
        T.putmem_signal_nbi_block(gathered[T.ds(me * m_per_pe + bx * block_m, block_m), :], shard[rows, :],
                                  sig=word, value=1, op=T.SignalOp.SET, pe=(me + by) % npes_)
        T.signal_wait_until(word, T.Cmp.EQ, 1)

    return ring_allgather


def allgather_pull(m_per_pe: int, n: int, npes: int, dtype: jnp.dtype, block_m: int = 64) -> ts.TileKernel:
    """The same result by reading: block (bx, by) gets rows bx of PE (me + by)'s shard into its own output.

    Peers read the input, so the runtime stages the *input* in symmetric memory (one shard copied in)
    and the output stays XLA's own buffer (nothing copied out): fewer bytes than pushing.
    """

    @ts.kernel(out_shape=jax.ShapeDtypeStruct((npes * m_per_pe, n), dtype), grid=(m_per_pe // block_m, npes),
               threads=128, replicated=True)
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
    return jax.jit(jax.shard_map(kern, mesh=mesh, in_specs=P("x"), out_specs=P(None)))


def xla_gather_fn(mesh: jax.sharding.Mesh):
    """jax.lax.all_gather on the devices (an XLA collective: benchmarks and GPU tests compare with it)."""
    # JAX types all_gather's result as varying over "x" (0.10, 0.11), so out_specs=P(None) needs check_vma=False here.
    return jax.jit(jax.shard_map(gather_reference, mesh=mesh, in_specs=P("x"), out_specs=P(None), check_vma=False))


def gather_reference(shard: jax.Array) -> jax.Array:
    return jax.lax.all_gather(shard, "x", tiled=True)


# --- check + entry point ----------------------------------------------------------------------
def check(mesh: jax.sharding.Mesh, m: int = 256, n: int = 128, dtype: str = "float16", seed: int = 0,
          kernel: Literal["push", "pull", "both"] = "both") -> ts.testing.Verdict:
    """The push and/or pull kernel on random data over mesh axis "x" vs jax.lax.all_gather (on the host)."""
    x = ts.testing.random_array(seed, (mesh.size * m, n), dtype)
    (want,) = ts.testing.lax_on_host(gather_reference, mesh, P("x"), P(None))(x)
    placed = ts.testing.place(x, mesh, P("x"))
    verdicts = [
        ts.testing.compare(gather_fn(mesh, m, n, jnp.dtype(dtype), pull=how == "pull")(placed), want,
                           f"{how}: every element equal to jax.lax.all_gather")
        for how in (("push", "pull") if kernel == "both" else (kernel,))
    ]
    return verdicts[0] if len(verdicts) == 1 else verdicts[0] & verdicts[1]


if __name__ == "__main__":
    ts.testing.main(check, mesh=ts.platform.line(min_devices=2), option_help={"m": "rows per PE"})
