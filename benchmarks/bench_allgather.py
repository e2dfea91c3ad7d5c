"""All-gather bandwidth: examples/allgather.py's kernels (push and pull) against jax.lax.all_gather, same run.

    python -m jax_tilescale.launch -n 2 benchmarks/bench_allgather.py [--sizes 1M,16M,256M,1G]
    python benchmarks/bench_allgather.py --sizes 4K,64K --reps 2     # CPU: the interpreter, 2 simulated devices

Sizes are the shard each rank holds; rows of --n bf16 elements (fewer for shards smaller than a
row), each kernel's grid sized to the shard (benchmarks/_collective.py `block_rows`). Bus bandwidth
as nccl-tests counts it for all-gather: bytes per rank x (npes - 1) / time. Each kernel is checked
against jax.lax.all_gather at every size before it is timed; the table, bench_allgather.csv and
bench_allgather.png go as benchmarks/_collective.py says.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _collective as coll
import allgather as ag


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    coll.add_common_options(ap)
    coll.add_row_options(ap)
    ap.add_argument("--staged", action="store_true",
                    help="also the push and pull kernels with NVSHMEM's calls, staged (what zero-copy replaced)")
    a = ap.parse_args(argv)
    plat, mesh = coll.setup(a)
    dtype = jnp.dtype(a.dtype)

    def make_case(nbytes: int) -> coll.Case:
        m, n = coll.row_shape(nbytes, dtype.itemsize, a.n)
        block_m = a.block_m or coll.block_rows(m, n * dtype.itemsize)
        x = coll.random_sharded(mesh, (mesh.size * m, n), dtype, P("x"), seed=nbytes)
        params = f"block_m={block_m}"
        ours = {"push": ag.gather_fn(mesh, m, n, dtype, block_m),
                "pull": ag.gather_fn(mesh, m, n, dtype, block_m, pull=True)}
        if a.staged:
            ours |= {f"{name}, staged": coll.with_nvshmem_calls(ag.gather_fn(mesh, m, n, dtype, block_m, pull=pull))
                     for name, pull in (("push", False), ("pull", True))}
        return coll.Case(bytes_per_rank=m * n * dtype.itemsize, inputs=(x,), ours=ours, xla=ag.xla_gather_fn(mesh),
                         params=dict.fromkeys(ours, params))

    return coll.run(coll.ALL_GATHER, make_case, a, plat, mesh, what=f"rows of up to {a.n}")


if __name__ == "__main__":
    sys.exit(main())
