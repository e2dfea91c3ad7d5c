"""All-gather bandwidth: examples/allgather.py's kernels (push and pull) against jax.lax.all_gather, same run.

    python -m jax_tilescale.launch -n 2 benchmarks/bench_allgather.py [--mib 1,16,256,1024]

Bus bandwidth as nccl-tests counts it for all-gather: bytes per rank * (npes - 1) / time.
Times are medians over repetitions of a jitted call, each rep `iters` calls then one
block_until_ready (so launch overhead overlaps, as in a real program).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import allgather as ag

import jax_tilescale as ts


def block_rows(m: int, row_bytes: int, target_blocks: int = 64, max_block_bytes: int = 2 << 20) -> int:
    """Rows per block: about `target_blocks` row blocks per PE (one block-wide put sustains only
    a few tens of GB/s, so small shards need many blocks), each moving at most ~2 MiB."""
    rows = max(1, min(m // target_blocks, max(1, max_block_bytes // row_bytes)))
    while m % rows:
        rows -= 1
    return rows


def median_time(f, x, iters: int, reps: int) -> float:
    jax.block_until_ready(f(x))
    jax.block_until_ready(f(x))
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(iters):
            out = f(x)
        jax.block_until_ready(out)
        times.append((time.perf_counter() - t0) / iters)
    return float(np.median(times))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--mib", default="1,16,256,1024", help="MiB per rank, comma separated")
    ap.add_argument("--n", type=int, default=8192, help="row length (bf16 elements)")
    ap.add_argument("--block-m", type=int, default=0, help="rows per block; 0: sized to the shard (see block_rows)")
    ap.add_argument("--reps", type=int, default=7)
    a = ap.parse_args()
    platform = ts.platform.setup()
    mesh = jax.make_mesh((platform.num_devices,), ("x",))
    npes = mesh.size
    rows = []
    for mib in [int(v) for v in a.mib.split(",")]:
        per_rank = mib << 20
        m = per_rank // (a.n * 2)
        block_m = a.block_m or block_rows(m, a.n * 2)
        x = jax.device_put(
            jax.random.normal(jax.random.key(mib), (npes * m, a.n), jnp.float32).astype(jnp.bfloat16),
            NamedSharding(mesh, P("x")),
        )
        push = ag.gather_fn(mesh, m, a.n, jnp.bfloat16, block_m)
        pull = ag.gather_fn(mesh, m, a.n, jnp.bfloat16, block_m, pull=True)
        xla = ag.xla_gather_fn(mesh)
        want = xla(x)
        ok = ts.testing.allclose(push(x), want) and ts.testing.allclose(pull(x), want)
        del want
        iters = 20 if mib <= 64 else 5
        t_push, t_pull, t_xla = (median_time(f, x, iters, a.reps) for f in (push, pull, xla))
        bus = [per_rank * (npes - 1) / t / 1e9 for t in (t_push, t_pull, t_xla)]
        rows.append((mib, block_m, ok, t_push * 1e3, bus[0], t_pull * 1e3, bus[1], t_xla * 1e3, bus[2],
                     t_xla / t_push, t_xla / t_pull))
        del x
    if platform.is_lead:
        print(f"all-gather, {npes} x {jax.devices()[0].device_kind}, bf16, {platform.describe()}")
        head = ("MiB/rank", "block_m", "ok", "push ms", "GB/s", "pull ms", "GB/s", "xla ms", "GB/s",
                "push/xla", "pull/xla")
        print("{:>9} {:>8} {:>5} {:>9} {:>7} {:>9} {:>7} {:>9} {:>7} {:>9} {:>9}".format(*head))
        for mib, bm, ok, tp, bp, tq, bq, tx, bx, rp, rq in rows:
            print(f"{mib:>9} {bm:>8} {ok!s:>5} {tp:>9.3f} {bp:>7.1f} {tq:>9.3f} {bq:>7.1f} {tx:>9.3f} {bx:>7.1f} "
                  f"{rp:>8.2f}x {rq:>8.2f}x")


if __name__ == "__main__":
    main()
