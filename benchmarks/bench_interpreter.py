"""Interpreter speed: a ring reduce-scatter on 8 simulated CPU devices, checked against
`jax.lax.psum_scatter(..., tiled=True)` in the same run.

    python benchmarks/bench_interpreter.py [--mib 1,4,16] [--reps 3] [--profile FILE]

Each PE's input is [npes * m, n] float32 (`--mib` MiB per PE); its output [m, n] is the sum over
the PEs of their row block `pe`. The kernel is the textbook ring: at step s every PE sends a
partial sum to the next PE with `putmem_signal_nbi_block`, waits for the partial from the
previous one, and adds its own rows to it in a `T.Parallel` loop (npes - 1 steps). Prints the
median seconds per call for each size, the process's CPU seconds per call (which a loaded
machine does not stretch) and whether the result matched (benchmarks/NOTES.md, "Interpreter
speed").
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import time

from jax_tilescale.platform import request_cpu_devices

if __name__ == "__main__":
    request_cpu_devices(8)  # before JAX starts its backends

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import jax_tilescale as ts
from jax_tilescale import language as T

N = 1024  # row length (float32 elements)


def ring_reduce_scatter(m: int, n: int, npes: int, block_m: int = 64) -> ts.TileKernel:
    """Input [npes * m, n] float32 per PE, output [m, n]: out = sum over PEs of their rows
    [pe * m, (pe + 1) * m). One block per `block_m` rows of the output; each block runs the ring
    for its rows, with its own signal word per step (so blocks never wait for each other)."""
    assert m % block_m == 0, (m, block_m)
    nblocks = m // block_m
    steps = npes - 1

    @ts.kernel(out_shape=jax.ShapeDtypeStruct((m, n), jnp.float32), grid=(nblocks,), threads=128)
    def ring_rs(x, out):
        bx = T.program_id(0)
        me, npes_ = T.get_pe(), T.get_pe_num()
        nxt = (me + 1) % npes_
        recv = T.alloc_symmetric((steps, m, n), jnp.float32)  # slot s: the partial received at step s
        part = T.alloc_symmetric((steps, m, n), jnp.float32)  # slot s: the partial sent at step s + 1
        sig = T.alloc_signal(steps * nblocks)
        row0 = bx * block_m
        rows = T.ds(row0, block_m)
        # Step 0 sends this PE's own rows of chunk me - 1 (straight from the input).
        first = (me + npes_ - 1) % npes_
        T.putmem_signal_nbi_block(recv[0, rows, :], x[T.ds(first * m + row0, block_m), :],
                                  sig=sig[bx], value=1, op=T.SignalOp.SET, pe=nxt)
        for s in T.serial(steps):
            T.signal_wait_until(sig[s * nblocks + bx], T.Cmp.EQ, 1)
            chunk = (me + 2 * npes_ - s - 2) % npes_  # the chunk whose partial arrived at step s
            if s < steps - 1:
                for i, j in T.Parallel(block_m, n):
                    part[s, row0 + i, j] = recv[s, row0 + i, j] + x[chunk * m + row0 + i, j]
                T.putmem_signal_nbi_block(recv[s + 1, rows, :], part[s, rows, :],
                                          sig=sig[(s + 1) * nblocks + bx], value=1, op=T.SignalOp.SET, pe=nxt)
            else:  # the last partial is chunk `me`: add this PE's rows and store the result
                for i, j in T.Parallel(block_m, n):
                    out[row0 + i, j] = recv[s, row0 + i, j] + x[chunk * m + row0 + i, j]

    return ring_rs


def reduce_scatter_fn(mesh: jax.sharding.Mesh, m: int, n: int, block_m: int = 64):
    """The jitted kernel over mesh axis "x": global input [npes * npes * m, n] (each PE's shard
    [npes * m, n]), global output [npes * m, n]."""
    kern = ring_reduce_scatter(m, n, mesh.size, block_m)
    return jax.jit(jax.shard_map(kern, mesh=mesh, in_specs=P("x"), out_specs=P("x")))


def xla_reduce_scatter_fn(mesh: jax.sharding.Mesh):
    return jax.jit(jax.shard_map(lambda a: jax.lax.psum_scatter(a, "x", scatter_dimension=0, tiled=True),
                                 mesh=mesh, in_specs=P("x"), out_specs=P("x")))


def check(mesh: jax.sharding.Mesh, m: int, n: int = N, block_m: int = 64, seed: int = 0) -> tuple[bool, object]:
    """Runs the kernel once on random data; returns (matches psum_scatter, the jitted kernel, the input)."""
    npes = mesh.size
    x = jax.device_put(jax.random.normal(jax.random.key(seed), (npes * npes * m, n), jnp.float32),
                       NamedSharding(mesh, P("x")))
    f = reduce_scatter_fn(mesh, m, n, block_m)
    got = np.asarray(f(x))
    want = np.asarray(xla_reduce_scatter_fn(mesh)(x))
    # Summation orders differ (the ring adds in ring order): float32 rounding, a few ulp of the sum.
    return bool(np.allclose(got, want, rtol=1e-5, atol=1e-5)), (f, x)


def profile_one_call(f, x, path: str) -> None:
    """cProfile of one call, every simulated device's thread included (each `run` profiled on its
    own thread, the statistics merged into `path`), the top of it printed."""
    from jax_tilescale.interpret import InterpreterSession

    plain = InterpreterSession.run
    profiles = []

    def profiled(self, *args, **kwargs):
        prof = cProfile.Profile()
        profiles.append(prof)
        return prof.runcall(plain, self, *args, **kwargs)

    InterpreterSession.run = profiled
    try:
        jax.block_until_ready(f(x))
    finally:
        InterpreterSession.run = plain
    stats = pstats.Stats(profiles[0])
    for prof in profiles[1:]:
        stats.add(prof)
    stats.dump_stats(path)
    stats.sort_stats("tottime").print_stats(30)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--mib", default="1,4,16", help="MiB of input per PE, comma separated")
    ap.add_argument("--block-m", type=int, default=64)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--profile", default="", help="write a cProfile of one call of the largest size here")
    a = ap.parse_args()
    mesh = jax.make_mesh((len(jax.devices()),), ("x",))
    npes = mesh.size
    rows = []
    for mib in [int(v) for v in a.mib.split(",")]:
        m = (mib << 20) // (npes * N * 4)
        ok, (f, x) = check(mesh, m, N, min(a.block_m, m))
        times, cpu = [], []
        for _ in range(a.reps):
            t0, c0 = time.perf_counter(), time.process_time()
            jax.block_until_ready(f(x))
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
        rows.append((mib, m, ok, float(np.median(times)), min(times), float(np.median(cpu))))
    if a.profile:
        profile_one_call(f, x, a.profile)
    load = os.getloadavg()[0]
    print(f"ring reduce-scatter on {npes} simulated devices, float32 rows of {N}; load average {load:.2f}, "
          f"{os.cpu_count()} CPUs")
    print("| MiB per PE | rows per PE out | matches psum_scatter | median s per call | best s | median CPU s |")
    print("| ---: | ---: | :---: | ---: | ---: | ---: |")
    for mib, m, ok, med, best, cpu_s in rows:
        print(f"| {mib} | {m} | {'yes' if ok else 'NO'} | {med:.2f} | {best:.2f} | {cpu_s:.2f} |")
    if not all(r[2] for r in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
