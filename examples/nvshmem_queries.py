"""PE queries on a 2-D mesh: `T.get_pe` / `T.get_rank`, `T.get_pe_num` / `T.get_num_ranks`,
`T.axis_index`, `T.axis_size`, `T.pe_of` and `T.Scale("device")`, and a neighbour exchange
along one mesh axis named by coordinates (`T.pe_of(y=...)`).

Kernels have no scalar stores yet, so each queried value v is written by copying element v of an
iota input. Checked against `jax.lax.axis_index` and `jax.lax.ppermute` along "y", on random
data. Needs at least 2 devices: 2 x (devices / 2) when they are even and at least 4, else
1 x devices. On GPUs: `python -m jax_tilescale.launch -n 2 examples/nvshmem_queries.py` (a 1 x 2
mesh); with no GPU: `python examples/nvshmem_queries.py` (a 2 x 2 mesh of simulated devices).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
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
    return jax.jit(jax.shard_map(kern, mesh=mesh, in_specs=(P(), spec), out_specs=(spec, spec)))


def lax_body(mesh: jax.sharding.Mesh):
    """The queries and the exchange in jax.lax terms (per PE of the ("x", "y") mesh)."""
    size_x, size_y = mesh.shape["x"], mesh.shape["y"]

    def body(shard):
        pe, x, y = jax.lax.axis_index(("x", "y")), jax.lax.axis_index("x"), jax.lax.axis_index("y")
        npes = size_x * size_y
        vals = [pe, npes, pe, npes, x, size_x, y, size_y, pe, npes, x * size_y, x * size_y + (y + 1) % size_y]
        moved = jax.lax.ppermute(shard, "y", ts.testing.ring(size_y))
        return jnp.stack([jnp.asarray(v, jnp.int32) for v in vals]), moved

    return body


# --- check + entry point ----------------------------------------------------------------------
MESH = ts.platform.MeshPlan(("x", "y"), "at least 2 devices",
                            lambda n: None if n < 2 else (2, n // 2) if n % 2 == 0 and n >= 4 else (1, n))


def mesh_2d(devices: int) -> jax.sharding.Mesh:
    """The example's mesh over the first `devices` devices: 2 x (devices / 2), else 1 x devices."""
    return MESH.make(jax.devices()[:devices])


def check(mesh: jax.sharding.Mesh, m: int = 32, n: int = 64, dtype: str = "float32",
          seed: int = 0) -> ts.testing.Verdict:
    """The kernel on a mesh with axes ("x", "y"); queries and the exchange vs jax.lax (on the host)."""
    spec = P(("x", "y"))
    x = ts.testing.random_array(seed, (mesh.size * m, n), dtype)
    iota = np.arange(IOTA, dtype=np.int32)
    got = queries_fn(mesh, m, n, jnp.dtype(dtype))(ts.testing.place(iota, mesh, P()), ts.testing.place(x, mesh, spec))
    want = ts.testing.lax_on_host(lax_body(mesh), mesh, spec, (spec, spec))(x)
    return ts.testing.compare(got, want, "PE queries equal to jax.lax.axis_index, the exchange along y to "
                              "jax.lax.ppermute")


if __name__ == "__main__":
    ts.testing.main(check, mesh=MESH, option_help={"m": "rows per PE"})
