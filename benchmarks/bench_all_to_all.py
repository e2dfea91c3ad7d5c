"""All-to-all bandwidth, two cases, each against its jax.lax equivalent in the same run:

- equal splits: examples/all_to_all.py's `all_to_all_equal` against jax.lax.all_to_all(tiled=True);
- MoE-skewed splits: examples/all_to_all.py's variable-split kernel (`dispatch_fn`, splits read on
  the device) against jax.lax.ragged_all_to_all with the same offsets (both exchange the splits
  with jax.lax.all_gather first). Each PE sends its `tokens` rows to the PEs by a Zipf-like routing
  (a hot destination per PE, different for each); the receive buffers hold npes x tokens rows.

    python -m jax_tilescale.launch -n 2 benchmarks/bench_all_to_all.py [--sizes 1M,256M,1G] [--cases equal]
    python benchmarks/bench_all_to_all.py --sizes 4K,64K --reps 2     # CPU: the interpreter, 2 simulated devices

Sizes are each rank's send buffer. Bandwidth as nccl-tests counts all-to-all: algbw = bytes per
rank / time, busbw = algbw x (npes - 1) / npes (for skewed splits the bytes that really leave a PE
differ; the nominal count keeps the two cases comparable). Every kernel is checked before timing:
the equal case against jax.lax.all_to_all exactly, the skewed case against examples/all_to_all.py's
reference (jax.lax.all_to_all of the padded segments, then packed); ragged_all_to_all is checked
against the same. Where ragged_all_to_all does not run (XLA:CPU has no ragged-all-to-all), the
output says so and our kernel is still checked and timed.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _collective as coll
import all_to_all as a2a

import jax_tilescale as ts

SKEWED = coll.Family("all-to-all, MoE-skewed splits", "all_to_all_skewed", "jax.lax.ragged_all_to_all",
                     coll.ALL_TO_ALL.alg_ranks, coll.ALL_TO_ALL.bus_factor)


def skewed_splits(rng: np.random.Generator, npes: int, tokens: int, zipf: float = 1.5) -> np.ndarray:
    """[npes (source), npes (destination)] int32, rows summing to `tokens`: weights 1 / k^zipf over
    the destinations, permuted per source (each PE has its own hot destination)."""
    weights = 1.0 / np.arange(1, npes + 1) ** zipf
    rows = [np.bincount(rng.choice(npes, size=tokens, p=(w := rng.permutation(weights)) / w.sum()), minlength=npes)
            for _ in range(npes)]
    return np.stack(rows).astype(np.int32)


def equal_xla_fn(mesh: jax.sharding.Mesh):
    return jax.jit(jax.shard_map(a2a.equal_reference, mesh=mesh, in_specs=P("x"), out_specs=P("x")))


def ragged_xla_fn(mesh: jax.sharding.Mesh, tokens: int):
    """jax.lax.ragged_all_to_all into zeroed receive buffers of npes x tokens rows, segments packed
    in source order (examples/all_to_all.py's layout); None when this JAX lacks it."""
    if not hasattr(jax.lax, "ragged_all_to_all"):
        return None
    npes = mesh.size

    def body(send, splits):
        all_splits = jax.lax.all_gather(splits, "x")  # [source, destination]
        me = jax.lax.axis_index("x")
        input_offsets = (jnp.cumsum(splits) - splits).astype(jnp.int32)
        before_me = jnp.arange(npes)[:, None] < me
        output_offsets = jnp.sum(jnp.where(before_me, all_splits, 0), axis=0).astype(jnp.int32)  # on each receiver
        recv_sizes = all_splits[:, me].astype(jnp.int32)
        out = jnp.zeros((npes * tokens, send.shape[1]), send.dtype)
        return jax.lax.ragged_all_to_all(send, out, input_offsets, splits.astype(jnp.int32), output_offsets,
                                         recv_sizes, axis_name="x")

    return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(P("x"), P("x")), out_specs=P("x")))


def ragged_reference_fn(mesh: jax.sharding.Mesh, tokens: int):
    return jax.jit(jax.shard_map(a2a.lax_body(mesh.size, tokens), mesh=mesh, in_specs=(P("x"), P("x")),
                                 out_specs=P("x")))


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    coll.add_common_options(ap)
    ap.add_argument("--hidden", type=int, default=8192, help="row (token) length in elements (default 8192)")
    ap.add_argument("--block-m", type=int, default=0, help="equal splits: rows per block; 0: sized (block_rows)")
    ap.add_argument("--cases", default="equal,skewed", help="equal, skewed or both (default equal,skewed)")
    a = ap.parse_args(argv)
    plat, mesh = coll.setup(a)
    dtype, npes = jnp.dtype(a.dtype), mesh.size
    cases = {c.strip() for c in a.cases.split(",")}
    if not cases <= {"equal", "skewed"}:
        raise SystemExit(f"--cases: equal and/or skewed, not {a.cases!r}")

    def equal_case(nbytes: int) -> coll.Case:
        rows, n = coll.row_shape(nbytes, dtype.itemsize, a.hidden, rows_multiple=npes)
        rows_per_peer = rows // npes
        block_m = a.block_m or coll.block_rows(rows_per_peer, n * dtype.itemsize)
        x = coll.random_sharded(mesh, (npes * rows, n), dtype, P("x"), seed=nbytes)
        return coll.Case(bytes_per_rank=rows * n * dtype.itemsize, inputs=(x,),
                         ours={"equal": a2a.equal_fn(mesh, rows_per_peer, n, dtype, block_m)},
                         xla=equal_xla_fn(mesh), params={"equal": f"block_m={block_m}"})

    def skewed_case(nbytes: int) -> coll.Case:
        tokens, n = coll.row_shape(nbytes, dtype.itemsize, a.hidden, rows_multiple=16)  # enough tokens to route
        x = coll.random_sharded(mesh, (npes * tokens, n), dtype, P("x"), seed=nbytes)
        splits = skewed_splits(np.random.default_rng(nbytes), npes, tokens)
        hot = splits.max(axis=1) / tokens
        return coll.Case(bytes_per_rank=tokens * n * dtype.itemsize,
                         inputs=(x, ts.testing.place(splits.reshape(-1), mesh, P("x"))),
                         ours={"skewed": a2a.dispatch_fn(mesh, tokens, n, dtype)},
                         xla=ragged_xla_fn(mesh, tokens), reference=ragged_reference_fn(mesh, tokens),
                         params={"skewed": f"hot={hot.min():.0%}-{hot.max():.0%}"})

    status = 0
    if "equal" in cases:
        status |= coll.run(coll.ALL_TO_ALL, equal_case, a, plat, mesh, what=f"rows of up to {a.hidden}")
    if "skewed" in cases:
        status |= coll.run(SKEWED, skewed_case, a, plat, mesh, what=f"tokens of up to {a.hidden}")
    return status


if __name__ == "__main__":
    sys.exit(main())
