"""Team synchronisation and collectives over the kernel's PE space, from one block per PE:
`T.fcollect_block` (all-gather), `T.broadcast_block` (from the last PE), and a neighbour exchange
through symmetric scratch ordered by `T.barrier_all_block` (puts, then the barrier's quiet) and
by `T.sync_all_block` (direct stores, then a sync without quiet).

The kernel's PE space may be a subset of the mesh: with `--mesh teams`, the mesh is 2 x (devices
/ 2) and the kernel spans axis "y" only, so each row of the mesh is a team of its own. Checked
against `jax.lax.all_gather`, a broadcast through `jax.lax.all_gather`, and `jax.lax.ppermute`, on
random data. Needs at least 2 devices (`--mesh teams`: an even number, at least 4). On GPUs:
`python -m jax_tilescale.launch -n 2 examples/primitives/sync.py`; with no GPU:
`python examples/primitives/sync.py [--mesh teams]`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

import jax_tilescale as ts
from jax_tilescale import language as T


# --- config + kernel --------------------------------------------------------------------------
def team_ops(m: int, n: int, npes: int, dtype: jnp.dtype, axis: str) -> ts.TileKernel:
    """gathered = all rows of the team, bcast = the last PE's rows, pushed / stored = previous PE's rows."""
    rows = jax.ShapeDtypeStruct((m, n), dtype)
    gathered = jax.ShapeDtypeStruct((npes * m, n), dtype)

    @ts.kernel(out_shape=(gathered, rows, rows, rows), grid=(1,), threads=128, mesh_axes=(axis,))
    def sync_example(shard, gathered, bcast, pushed, stored):
        me, npes_ = T.get_pe(), T.get_pe_num()
        nxt = (me + 1) % npes_
        inbox = T.alloc_symmetric((m, n), dtype)
        mailbox = T.alloc_symmetric((m, n), dtype)
        T.fcollect_block(gathered, shard)  # PE 0..npes-1 blocks stacked along rows
        T.broadcast_block(bcast, shard, npes - 1)
        T.putmem_nbi_block(inbox, shard, pe=nxt)
        T.barrier_all_block()  # quiet, then every PE meets: every inbox is complete
        T.copy(inbox, pushed)
        T.put_block(shard, mailbox, dst_pe=nxt)  # plain stores through nvshmem_ptr
        T.sync_all_block()  # stores are visible once every PE is past it (no quiet needed)
        T.copy(mailbox, stored)

    return sync_example


def team_fn(mesh: jax.sharding.Mesh, m: int, n: int, dtype: jnp.dtype):
    axis = mesh.axis_names[-1]
    kern = team_ops(m, n, mesh.shape[axis], dtype, axis)
    spec = P(tuple(mesh.axis_names))
    return jax.jit(jax.shard_map(kern, mesh=mesh, in_specs=spec, out_specs=(spec,) * 4))


def lax_body(axis: str, npes: int):
    """What each output must be, in jax.lax terms, over the kernel's axis."""

    def body(a):
        shifted = jax.lax.ppermute(a, axis, ts.testing.ring(npes))
        return jax.lax.all_gather(a, axis, tiled=True), jax.lax.all_gather(a, axis)[npes - 1], shifted, shifted

    return body


# --- check + entry point ----------------------------------------------------------------------
def check(mesh: jax.sharding.Mesh, m: int = 64, n: int = 64, dtype: str = "float32",
          seed: int = 0) -> ts.testing.Verdict:
    """Every output on random data vs its jax.lax counterpart (computed on the host)."""
    axis, spec = mesh.axis_names[-1], P(tuple(mesh.axis_names))
    x = ts.testing.random_array(seed, (mesh.size * m, n), dtype)
    got = team_fn(mesh, m, n, jnp.dtype(dtype))(ts.testing.place(x, mesh, spec))
    want = ts.testing.lax_on_host(lax_body(axis, mesh.shape[axis]), mesh, spec, (spec,) * 4)(x)
    return ts.testing.compare(got, want, f"over axis {axis!r}: fcollect, broadcast, barrier and sync outputs equal "
                              "to jax.lax")


if __name__ == "__main__":
    ts.testing.main(check, mesh={"ring": ts.platform.line(min_devices=2), "teams": ts.platform.rows(2)},
                    option_help={"m": "rows per PE"})
