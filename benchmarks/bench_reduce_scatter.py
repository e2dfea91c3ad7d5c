"""Reduce-scatter bandwidth: examples/reduce_scatter.py's ring (written with the language) against
jax.lax.psum_scatter(tiled=True), same run.

    python -m jax_tilescale.launch -n 2 benchmarks/bench_reduce_scatter.py [--sizes 1M,256M,1G] [--dtype float32]
    python benchmarks/bench_reduce_scatter.py --sizes 4K,64K --reps 2     # CPU: the interpreter, 2 simulated devices

Sizes are the vector each rank reduces (its input, nccl-tests' size); each rank ends with 1/npes of
it. Bus bandwidth as nccl-tests counts it: bytes per rank x (npes - 1) / npes / time. Each size is
checked before timing: the kernel's result (float32 sums) against psum_scatter of the input in
float32, within tolerance() of examples/reduce_scatter.py; XLA's own result against the same within
npes roundings of the element type (NCCL may add 16-bit partials in 16 bits).
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
import reduce_scatter as rs


def float32_reference_fn(mesh: jax.sharding.Mesh):
    """psum_scatter of the input converted to float32: what the kernel's float32 sums approximate."""
    body = lambda a: rs.reduce_scatter_reference(a.astype(jnp.float32))
    return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("x"), out_specs=P("x")))


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    coll.add_common_options(ap)
    coll.add_row_options(ap, "output rows per block")
    a = ap.parse_args(argv)
    plat, mesh = coll.setup(a)
    dtype, npes = jnp.dtype(a.dtype), mesh.size
    exact = dtype == jnp.float32

    def make_case(nbytes: int) -> coll.Case:
        rows, n = coll.row_shape(nbytes, dtype.itemsize, a.n, rows_multiple=npes)
        m = rows // npes  # output rows per PE
        block_m = a.block_m or coll.block_rows(m, n * dtype.itemsize)
        x = coll.random_sharded(mesh, (npes * rows, n), dtype, P("x"), seed=nbytes)
        return coll.Case(
            bytes_per_rank=rows * n * dtype.itemsize, inputs=(x,),
            ours={"ring": rs.reduce_scatter_fn(mesh, m, n, dtype, block_m)},
            xla=rs.xla_reduce_scatter_fn(mesh), reference=None if exact else float32_reference_fn(mesh),
            tolerance=rs.tolerance(dtype, npes),
            xla_tolerance=None if exact else float(npes * jnp.finfo(dtype).eps),
            params={"ring": f"block_m={block_m}"})

    return coll.run(coll.REDUCE_SCATTER, make_case, a, plat, mesh, what=f"rows of up to {a.n}, float32 sums")


if __name__ == "__main__":
    sys.exit(main())
