"""Ring shift: every PE puts its block into the next PE's output.

Checked against `jax.lax.ppermute`. Runs on GPUs under the launcher
(`python -m jax_tilescale.launch -n 2 examples/simple_shift.py`) or, with no GPU, on
simulated CPU devices through the interpreter (`python examples/simple_shift.py`).
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
def simple_shift(m: int, n: int, dtype: jnp.dtype, block_m: int = 64) -> ts.TileKernel:
    """out[pe + 1] = in[pe]: each block of rows goes straight to the next PE (global to global)."""

    @ts.kernel(out_shape=jax.ShapeDtypeStruct((m, n), dtype), grid=(m // block_m,), threads=128)
    def shift(src, dst):
        rows = T.ds(T.program_id(0) * block_m, block_m)
        T.putmem_nbi_block(dst[rows, :], src[rows, :], pe=(T.get_pe() + 1) % T.get_pe_num())

    return shift


# --- check + entry point ----------------------------------------------------------------------
def check(mesh: jax.sharding.Mesh, m: int = 256, n: int = 128, dtype: str = "float32", seed: int = 0) -> bool:
    """Runs the kernel on random data over mesh axis "x" and compares with jax.lax.ppermute."""
    npes = mesh.size
    ring = [(i, (i + 1) % npes) for i in range(npes)]
    shifted = jax.jit(jax.shard_map(simple_shift(m, n, jnp.dtype(dtype)), mesh=mesh, in_specs=P("x"),
                                    out_specs=P("x"), check_vma=False))
    expected = jax.jit(jax.shard_map(lambda a: jax.lax.ppermute(a, "x", ring), mesh=mesh, in_specs=P("x"),
                                     out_specs=P("x")))
    x = jax.random.normal(jax.random.key(seed), (npes * m, n), jnp.float32).astype(dtype)
    x = jax.device_put(x, NamedSharding(mesh, P("x")))
    return ts.testing.allclose(shifted(x), expected(x))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--m", type=int, default=256)
    ap.add_argument("--n", type=int, default=128)
    ap.add_argument("--dtype", default="float32")
    a = ap.parse_args()
    platform = ts.platform.setup()
    mesh = jax.make_mesh((platform.num_devices,), ("x",))
    ok = check(mesh, a.m, a.n, a.dtype)
    ts.testing.report("simple_shift", platform, {
        f"{mesh.size} PEs, {a.m}x{a.n} {a.dtype} per PE, random data, "
        f"every element equal to jax.lax.ppermute": ok,
    })


if __name__ == "__main__":
    main()
