"""Ring shift bandwidth: examples/simple_shift.py's kernel (every PE puts its block into the next
PE's output) against jax.lax.ppermute to the next PE, same run.

    python -m jax_tilescale.launch -n 2 benchmarks/bench_ring_shift.py [--sizes 1M,256M,1G]
    python benchmarks/bench_ring_shift.py --sizes 4K,64K --reps 2     # CPU: the interpreter, 2 simulated devices

Sizes are the block each rank sends (and receives). Bandwidth as nccl-tests counts sendrecv:
bytes per rank / time, bus factor 1. The kernel's result is checked against ppermute's at every
size before timing (exactly: data movement).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _collective as coll
import simple_shift as shift

import jax_tilescale as ts


def xla_shift_fn(mesh: jax.sharding.Mesh):
    """jax.lax.ppermute of each PE's block to the next PE along "x"."""
    ring = ts.testing.ring(mesh.size)
    return jax.jit(jax.shard_map(lambda a: jax.lax.ppermute(a, "x", ring), mesh=mesh, in_specs=P("x"),
                                 out_specs=P("x")))


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    coll.add_common_options(ap)
    coll.add_row_options(ap)
    a = ap.parse_args(argv)
    plat, mesh = coll.setup(a)
    dtype = jnp.dtype(a.dtype)

    def make_case(nbytes: int) -> coll.Case:
        m, n = coll.row_shape(nbytes, dtype.itemsize, a.n)
        block_m = a.block_m or coll.block_rows(m, n * dtype.itemsize)
        x = coll.random_sharded(mesh, (mesh.size * m, n), dtype, P("x"), seed=nbytes)
        return coll.Case(bytes_per_rank=m * n * dtype.itemsize, inputs=(x,),
                         ours={"put": shift.shift_fn(mesh, m, n, dtype, block_m)}, xla=xla_shift_fn(mesh),
                         params={"put": f"block_m={block_m}"})

    return coll.run(coll.RING_SHIFT, make_case, a, plat, mesh, what=f"rows of up to {a.n}")


if __name__ == "__main__":
    sys.exit(main())
