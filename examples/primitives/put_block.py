"""Direct peer stores (TileScale's IPC style): every PE writes its block into the next PE's
output with `T.put_block` (half of the columns) and `T.put_warp` (the other half): plain stores
through `nvshmem_ptr`, the peer's mapping of the symmetric heap over NVLink. It then notifies the
peer (fence, signal_op); the peer waits for the signal and copies what arrived to a second output.

Checked against `jax.lax.ppermute`. On GPUs: `python -m jax_tilescale.launch -n 2
examples/primitives/put_block.py`; with no GPU: `python examples/primitives/put_block.py`.
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
    return jax.jit(jax.shard_map(kern, mesh=mesh, in_specs=P("x"), out_specs=(P("x"), P("x")), check_vma=False))


def xla_shift_fn(mesh: jax.sharding.Mesh):
    ring = [(i, (i + 1) % mesh.size) for i in range(mesh.size)]
    return jax.jit(jax.shard_map(lambda a: jax.lax.ppermute(a, "x", ring), mesh=mesh, in_specs=P("x"),
                                 out_specs=P("x")))


# --- check + entry point ----------------------------------------------------------------------
def check(mesh: jax.sharding.Mesh, m: int = 128, n: int = 128, dtype: str = "float16", seed: int = 0) -> bool:
    """Runs the kernel on random data over mesh axis "x" and compares both outputs with ppermute."""
    x = jax.random.normal(jax.random.key(seed), (mesh.size * m, n), jnp.float32).astype(dtype)
    x = jax.device_put(x, NamedSharding(mesh, P("x")))
    received, echoed = push_fn(mesh, m, n, jnp.dtype(dtype))(x)
    want = xla_shift_fn(mesh)(x)
    return ts.testing.allclose(received, want) and ts.testing.allclose(echoed, want)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--m", type=int, default=128, help="rows per PE")
    ap.add_argument("--n", type=int, default=128)
    ap.add_argument("--dtype", default="float16")
    a = ap.parse_args()
    platform = ts.platform.setup()
    mesh = jax.make_mesh((platform.num_devices,), ("x",))
    ok = check(mesh, a.m, a.n, a.dtype)
    ts.testing.report("put_block", platform, {
        f"{mesh.size} PEs, {a.m}x{a.n} {a.dtype} per PE, random data, "
        f"every element equal to jax.lax.ppermute": ok,
    })


if __name__ == "__main__":
    main()
