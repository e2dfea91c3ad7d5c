"""Team synchronisation and collectives over the kernel's PE space, from one block per PE:
`T.fcollect_block` (all-gather), `T.broadcast_block` (from the last PE), and a neighbour exchange
through symmetric scratch ordered by `T.barrier_all_block` (puts, then the barrier's quiet) and
by `T.sync_all_block` (direct stores, then a sync without quiet).

The kernel's PE space may be a subset of the mesh: with `--team`, the mesh is 2 x (devices / 2)
and the kernel spans axis "y" only, so each row of the mesh is a team of its own. Checked
against `jax.lax.all_gather`, a broadcast through `jax.lax.all_gather`, and `jax.lax.ppermute`.
On GPUs: `python -m jax_tilescale.launch -n 2 examples/primitives/sync.py`; with no GPU:
`python examples/primitives/sync.py [--team]`.
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
    return jax.jit(jax.shard_map(kern, mesh=mesh, in_specs=spec, out_specs=(spec,) * 4, check_vma=False))


def xla_fn(mesh: jax.sharding.Mesh):
    axis = mesh.axis_names[-1]
    npes = mesh.shape[axis]
    ring = [(i, (i + 1) % npes) for i in range(npes)]

    def body(a):
        everyone = jax.lax.all_gather(a, axis, tiled=True)
        last = jax.lax.all_gather(a, axis)[npes - 1]
        shifted = jax.lax.ppermute(a, axis, ring)
        return everyone, last, shifted, shifted

    spec = P(tuple(mesh.axis_names))
    return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=spec, out_specs=(spec,) * 4, check_vma=False))


# --- check + entry point ----------------------------------------------------------------------
def check(mesh: jax.sharding.Mesh, m: int = 64, n: int = 64, dtype: str = "float32", seed: int = 0) -> bool:
    """Runs the kernel on random data; every output must equal its jax.lax counterpart."""
    spec = P(tuple(mesh.axis_names))
    x = jax.random.normal(jax.random.key(seed), (mesh.size * m, n), jnp.float32).astype(dtype)
    x = jax.device_put(x, NamedSharding(mesh, spec))
    got = team_fn(mesh, m, n, jnp.dtype(dtype))(x)
    want = xla_fn(mesh)(x)
    return all(ts.testing.allclose(g, w) for g, w in zip(got, want))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--m", type=int, default=64, help="rows per PE")
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--team", action="store_true", help="a 2 x (devices / 2) mesh; the kernel spans axis y")
    a = ap.parse_args()
    platform = ts.platform.setup()
    if a.team:
        mesh = jax.make_mesh((2, platform.num_devices // 2), ("x", "y"))
    else:
        mesh = jax.make_mesh((platform.num_devices,), ("x",))
    ok = check(mesh, a.m, a.n, a.dtype)
    ts.testing.report("sync", platform, {
        f"mesh {dict(mesh.shape)}, kernel PE space {mesh.axis_names[-1]!r}, {a.m}x{a.n} {a.dtype} per "
        f"PE, random data, fcollect/broadcast/barrier/sync results equal to jax.lax": ok,
    })


if __name__ == "__main__":
    main()
