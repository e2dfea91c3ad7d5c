"""Fixed cost per kernel call: what a launch costs beyond its work, each figure against its baseline
measured in the same run (issue "Communicating kernels without the fixed tax").

    python benchmarks/bench_call_overhead.py                  # one GPU, one process (one PE)
    # two PEs on one GPU (../shared/notes/two_pes_one_gpu.md; tools/gpu_test.sh runs it as `bench_two_pes`):
    python -m jax_tilescale.launch ... benchmarks/bench_call_overhead.py --only shift

Rows (per call, median of `--reps` runs of a jitted `fori_loop` of `--iters` calls, so that the
host's dispatch of the loop is amortised and what remains is the per-iteration cost):
- plain:  a 128x128x64 bf16 GEMM tile kernel (one block, no NVSHMEM) vs `jnp.dot`: target at most 2 us more;
- launch: the launch alone: a one-block kernel adding 1 to 4 KiB vs XLA's fusion doing the same, so that
          what the custom call costs is not mixed with how fast our GEMM is against cuBLAS at a tiny size;
- comm:   the ring shift kernel (puts, end-of-call barrier) on this PE's mesh vs a plain copy kernel
          moving the same bytes: target at most 3 us more on one PE;
- shift:  the ring shift of 4 KiB and of 1 MiB per PE: targets 15 us and 30 us with two PEs on one GPU.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import gemm as gemm_example
import simple_shift

import jax_tilescale as ts
from jax_tilescale import language as T


def copy_kernel(m: int, n: int, dtype: jnp.dtype, block_m: int = 64) -> ts.TileKernel:
    """The shift's work without communication: each block copies its rows to the output."""

    @ts.kernel(out_shape=jax.ShapeDtypeStruct((m, n), dtype), grid=(m // block_m,), threads=128)
    def copy(src, dst):
        rows = T.ds(T.program_id(0) * block_m, block_m)
        T.copy(src[rows, :], dst[rows, :])

    return copy


# Host time our FFI handler spent per call in the last `per_call` of a kernel of ours: (whole execute
# handler, cuLaunchKernel alone) in seconds; what is left of a call's cost is XLA's and the GPU's.
HANDLER: dict[str, tuple[float, float]] = {}


def _take_handler_times() -> tuple[int, int, int]:
    try:
        from jax_tilescale import _ffi
    except ImportError:  # no GPU extension: nothing to read
        return (0, 0, 0)
    return _ffi.take_handler_times()


def per_call(step, x, iters: int, reps: int, label: str | None = None) -> float:
    """Seconds per call of `step` (x -> x), inside one jitted fori_loop of `iters` calls. With `label`,
    HANDLER[label] gets the handler's host time per call over the timed runs."""
    loop = jax.jit(lambda x: jax.lax.fori_loop(0, iters, lambda i, x: step(x), x))
    jax.block_until_ready(loop(x))
    _take_handler_times()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        jax.block_until_ready(loop(x))
        times.append((time.perf_counter() - t0) / iters)
    calls, execute_ns, launch_ns = _take_handler_times()
    if label is not None and calls:
        HANDLER[label] = (execute_ns / calls * 1e-9, launch_ns / calls * 1e-9)
    return float(np.median(times))


def add_one_kernel(m: int, n: int, dtype: jnp.dtype) -> ts.TileKernel:
    """The smallest useful kernel: one block adds 1 to an m x n tile."""

    @ts.kernel(out_shape=jax.ShapeDtypeStruct((m, n), dtype), grid=(1,), threads=128)
    def add_one(src, dst):
        t = T.alloc_fragment((m, n), dtype)
        T.copy(src, t)
        for i, j in T.Parallel(m, n):
            t[i, j] = t[i, j] + 1
        T.copy(t, dst)

    return add_one


def bench_launch(iters: int, reps: int) -> list[tuple[str, float, float]]:
    kern = add_one_kernel(8, 128, jnp.dtype(jnp.float32))  # 4 KiB
    x = jax.random.normal(jax.random.key(2), (8, 128), jnp.float32)
    np.testing.assert_array_equal(np.asarray(jax.jit(kern)(x)), np.asarray(x + 1))
    what = "launch: add 1 to 4 KiB, one block vs XLA fusion"
    return [(what, per_call(kern, x, iters, reps, what), per_call(lambda x: x + 1, x, iters, reps))]


def bench_plain(iters: int, reps: int) -> list[tuple[str, float, float]]:
    m, n, k = 128, 128, 64
    kern = gemm_example.gemm(m, n, k, jnp.bfloat16, block_m=128, block_n=128, block_k=64)
    a = jax.random.normal(jax.random.key(0), (m, k), jnp.bfloat16)
    b = jax.random.normal(jax.random.key(1), (k, n), jnp.bfloat16) * 0.05

    def ours(a):  # the product feeds the next call, so XLA can neither hoist nor drop it
        return kern(a, b)[:, :k]

    def xla(a):
        return jnp.dot(a, b)[:, :k]

    got, want = jax.jit(ours)(a), jax.jit(xla)(a)
    np.testing.assert_allclose(np.asarray(got, np.float32), np.asarray(want, np.float32), rtol=2e-2, atol=2e-2)
    what = "plain 128x128x64 GEMM vs jnp.dot"
    return [(what, per_call(ours, a, iters, reps, what), per_call(xla, a, iters, reps))]


def shift_and_copy(mesh, rows: int, n: int):
    """The ring shift and the copy kernel over mesh axis "x" (`rows` x `n` float32 per PE), checked once
    against the host's ppermute (no XLA collective: NCCL refuses two PEs on one GPU)."""
    dtype = jnp.dtype(jnp.float32)
    shift = simple_shift.simple_shift(rows, n, dtype, block_m=min(64, rows))
    copy = copy_kernel(rows, n, dtype, block_m=min(64, rows))
    wrap = lambda f: jax.shard_map(f, mesh=mesh, in_specs=P("x"), out_specs=P("x"))
    verdict = ts.testing.check_shift(jax.jit(wrap(shift)), mesh, rows, n, dtype, seed=3)
    if not verdict.ok:
        raise SystemExit(f"the ring shift is wrong: {verdict}")
    x = ts.testing.place(ts.testing.random_array(4, (rows * mesh.size, n), dtype), mesh, P("x"))
    return wrap(shift), wrap(copy), x


def bench_comm(mesh, iters: int, reps: int) -> list[tuple[str, float, float]]:
    shift, copy, x = shift_and_copy(mesh, 64, 16)  # 4 KiB per PE
    what = f"4 KiB shift ({mesh.size} PE) vs plain copy kernel"
    return [(what, per_call(shift, x, iters, reps, what), per_call(copy, x, iters, reps))]


def bench_shift(mesh, iters: int, reps: int) -> list[tuple[str, float, float]]:
    rows_out = []
    for label, rows, n in (("4 KiB", 64, 16), ("1 MiB", 256, 1024)):
        shift, copy, x = shift_and_copy(mesh, rows, n)
        what = f"{label} shift per PE ({mesh.size} PEs) vs plain copy"
        rows_out.append((what, per_call(shift, x, iters, reps, what), per_call(copy, x, iters, reps)))
    return rows_out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="launch,plain,comm,shift", help="rows to run: launch, plain, comm, shift")
    ap.add_argument("--iters", type=int, default=500)
    ap.add_argument("--reps", type=int, default=7)
    a = ap.parse_args()
    platform = ts.platform.setup()
    mesh = jax.make_mesh((platform.num_devices,), ("x",))
    want = set(a.only.split(","))
    rows: list[tuple[str, float, float]] = []
    if "launch" in want:
        rows += bench_launch(a.iters, a.reps)
    if "plain" in want:
        rows += bench_plain(a.iters, a.reps)
    if "comm" in want:
        rows += bench_comm(mesh, a.iters, a.reps)
    if "shift" in want:
        rows += bench_shift(mesh, a.iters, a.reps)
    if jax.process_index() != 0:
        return
    print(f"\n{platform.describe()}; per call, median of {a.reps} x {a.iters} calls in a jitted fori_loop")
    print("(handler: host time in our FFI handler per call, of it cuLaunch: in cuLaunchKernel)")
    head = ("ours us", "base us", "diff us")
    print(f"{'what':58s} {head[0]:>9s} {head[1]:>9s} {head[2]:>9s} {'ratio':>6s} {'handler':>8s} {'cuLaunch':>8s}")
    for what, ours, base in rows:
        handler, launch = (f"{t * 1e6:8.2f}" for t in HANDLER[what]) if what in HANDLER else ("-", "-")
        print(f"{what:58s} {ours * 1e6:9.2f} {base * 1e6:9.2f} {(ours - base) * 1e6:9.2f} {ours / base:6.2f} "
              f"{handler:>8s} {launch:>8s}")


if __name__ == "__main__":
    main()
