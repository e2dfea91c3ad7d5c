"""PE queries on a 2-D mesh: `T.get_pe` / `T.get_rank`, `T.get_pe_num` / `T.get_num_ranks`,
`T.axis_index`, `T.axis_size`, `T.pe_of` and `T.Scale("device")`, and a neighbour exchange
along one mesh axis named by coordinates (`T.pe_of(y=...)`).

Kernels have no scalar stores yet, so each queried value v is written by copying element v of an
iota input. Checked against `jax.lax.axis_index` and `jax.lax.ppermute` along "y". On GPUs:
`python -m jax_tilescale.launch -n 2 examples/nvshmem_queries.py` (a 1 x 2 mesh); with no GPU:
`python examples/nvshmem_queries.py` (a 2 x 2 mesh of simulated devices).
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import jax_tilescale as ts
from jax_tilescale import language as T

QUERIES = ("pe", "npes", "rank", "num_ranks", "x", "size_x", "y", "size_y", "scale_index", "scale_count",
           "pe_of_row_start", "pe_of_next_y")
IOTA = 256


# --- config + kernel --------------------------------------------------------------------------
def queries(m: int, n: int, dtype: jnp.dtype) -> ts.TileKernel:
    """values[k] = the k-th query of QUERIES; moved = the rows of the previous PE along "y"."""

    @ts.kernel(out_shape=(jax.ShapeDtypeStruct((len(QUERIES),), jnp.int32), jax.ShapeDtypeStruct((m, n), dtype)),
               grid=(1,), threads=128)
    def nvshmem_queries(iota, shard, values, moved):
        with T.Scale("device") as (index, count):  # TileScale's spelling of (get_pe(), get_pe_num())
            y, size_y = T.axis_index("y"), T.axis_size("y")
            next_y = T.pe_of(y=(y + 1) % size_y)  # same x, next y
            answers = [T.get_pe(), T.get_pe_num(), T.get_rank(), T.get_num_ranks(), T.axis_index("x"),
                       T.axis_size("x"), y, size_y, index, count, T.pe_of(y=0), next_y]
        for k, v in enumerate(answers):
            T.copy(iota[T.ds(v, 1)], values[k : k + 1])
        T.putmem_nbi_block(moved, shard, pe=next_y)

    return nvshmem_queries


def queries_fn(mesh: jax.sharding.Mesh, m: int, n: int, dtype: jnp.dtype):
    spec = P(("x", "y"))
    kern = queries(m, n, dtype)
    return jax.jit(jax.shard_map(kern, mesh=mesh, in_specs=(P(), spec), out_specs=(spec, spec), check_vma=False))


def xla_fn(mesh: jax.sharding.Mesh):
    size_y = mesh.shape["y"]
    ring = [(i, (i + 1) % size_y) for i in range(size_y)]

    def body(shard):
        pe, x, y = jax.lax.axis_index(("x", "y")), jax.lax.axis_index("x"), jax.lax.axis_index("y")
        npes = mesh.size
        vals = [pe, npes, pe, npes, x, mesh.shape["x"], y, size_y, pe, npes, x * size_y, x * size_y + (y + 1) % size_y]
        return jnp.stack([jnp.asarray(v, jnp.int32) for v in vals]), jax.lax.ppermute(shard, "y", ring)

    spec = P(("x", "y"))
    return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=spec, out_specs=(spec, spec), check_vma=False))


# --- check + entry point ----------------------------------------------------------------------
def check(mesh: jax.sharding.Mesh, m: int = 32, n: int = 64, dtype: str = "float32", seed: int = 0) -> bool:
    """Runs the kernel on a mesh with axes ("x", "y"); queries and the exchange must match jax.lax."""
    x = jax.random.normal(jax.random.key(seed), (mesh.size * m, n), jnp.float32).astype(dtype)
    x = jax.device_put(x, NamedSharding(mesh, P(("x", "y"))))
    iota = jax.device_put(np.arange(IOTA, dtype=np.int32), NamedSharding(mesh, P()))
    values, moved = queries_fn(mesh, m, n, jnp.dtype(dtype))(iota, x)
    want_values, want_moved = xla_fn(mesh)(x)
    return ts.testing.allclose(values, want_values) and ts.testing.allclose(moved, want_moved)


def mesh_2d(devices: int) -> jax.sharding.Mesh:
    """2 x (devices / 2) when the devices split in two rows of at least 2, else 1 x devices."""
    rows = 2 if devices % 2 == 0 and devices >= 4 else 1
    return jax.make_mesh((rows, devices // rows), ("x", "y"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--m", type=int, default=32, help="rows per PE")
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--dtype", default="float32")
    a = ap.parse_args()
    platform = ts.platform.setup()
    mesh = mesh_2d(platform.num_devices)
    ok = check(mesh, a.m, a.n, a.dtype)
    ts.testing.report("nvshmem_queries", platform, {
        f"mesh {dict(mesh.shape)}, PE queries equal to jax.lax.axis_index and the exchange "
        f"along y equal to jax.lax.ppermute": ok,
    })


if __name__ == "__main__":
    main()
