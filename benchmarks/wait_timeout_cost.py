"""Cost of the device-side wait timeout (issue 5): a signal ping-pong between PEs, timeout off vs on.

    python -m jax_tilescale.launch -n 2 benchmarks/wait_timeout_cost.py [--rounds 512] [--reps 9]

One block per PE; in each of `rounds` rounds every PE signals its right-hand neighbour (signal_op SET
to the round number, then quiet) and waits for its left-hand neighbour's signal of that round
(signal_wait_until >= round). Each round thus waits for a signal that is still in flight, so the
waits take the slow path (ts_wait_slow), where the timeout check lives. The kernel is the same for
every variant except its `wait_timeout_s` (0: the check is skipped at run time, the polling loop is
otherwise identical). Reported: the median time per call, per round, and the difference per wait of
each timed-out-capable variant against `off`. Rounds are unrolled (one pair of statements each).

On CPU (no launcher) it runs the interpreter on simulated devices, as a smoke test of the script only.
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import jax_tilescale as ts
from jax_tilescale import language as T


def ping_pong(rounds: int, wait_timeout_s: float) -> ts.TileKernel:
    @ts.kernel(out_shape=jax.ShapeDtypeStruct((8, 32), jnp.float32), grid=(1,), threads=32,
               wait_timeout_s=wait_timeout_s, name=f"ping_pong_{rounds}_{str(wait_timeout_s).replace('.', '_')}")
    def kernel(src, dst):
        sig = T.alloc_signal()
        right = (T.get_pe() + 1) % T.get_pe_num()
        for r in range(1, rounds + 1):
            T.signal_op(sig, r, T.SignalOp.SET, right)
            T.quiet()
            T.signal_wait_until(sig, T.Cmp.GE, r)
        T.copy(src, dst)

    return kernel


def median_time(f, x, reps: int) -> float:
    jax.block_until_ready(f(x))
    jax.block_until_ready(f(x))
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        jax.block_until_ready(f(x))
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=512, help="ping-pong rounds per call (unrolled)")
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--timeouts", default="0,60,0.001",
                    help="wait_timeout_s values; 0 is the baseline (check off); 0.001 s never fires here either, "
                         "since a round trip takes microseconds, but keeps the clock hot")
    a = ap.parse_args()
    platform = ts.platform.setup()
    mesh = jax.make_mesh((platform.num_devices,), ("x",))
    npes = mesh.size
    rounds = a.rounds if platform.kind == "gpu" else min(a.rounds, 4)
    x = jax.device_put(jnp.ones((npes * 8, 32), jnp.float32), NamedSharding(mesh, P("x")))
    results = {}
    for timeout in (float(t) for t in a.timeouts.split(",")):
        k = ping_pong(rounds, timeout)
        f = jax.jit(jax.shard_map(k, mesh=mesh, in_specs=P("x"), out_specs=P("x")))
        results[timeout] = median_time(f, x, a.reps if platform.kind == "gpu" else 1)
    if jax.process_index() == 0:
        print(f"wait timeout cost, {npes} PEs, {rounds} ping-pong rounds per call ({platform.describe()}):")
        print(f"{'wait_timeout_s':>15} {'per call us':>12} {'per round us':>13} {'vs off per wait ns':>19}")
        base = results.get(0.0)
        for timeout, t in results.items():
            diff = "" if base is None or timeout == 0.0 else f"{(t - base) / rounds * 1e9:19.1f}"
            print(f"{timeout:15g} {t * 1e6:12.1f} {t / rounds * 1e6:13.3f} {diff}")


if __name__ == "__main__":
    main()
