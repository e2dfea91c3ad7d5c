"""Fixed cost per kernel call: what a launch costs beyond its work, each figure against its baseline
measured in the same run (issue "Communicating kernels without the fixed tax").

    python benchmarks/bench_call_overhead.py                  # one GPU, one process (one PE)
    # two PEs on one GPU (../shared/notes/two_pes_one_gpu.md; tools/gpu_test.sh runs it as `bench_two_pes`):
    python -m jax_tilescale.launch ... benchmarks/bench_call_overhead.py --only shift

Rows (per call, median of `--reps` runs of a jitted `fori_loop` of `--iters` calls, so that the
host's dispatch of the loop is amortised and what remains is the per-iteration cost; ours and the
baseline run alternately, rep by rep, since two runs of the same loop minutes apart differed by up to
30%; the "handler" columns are our FFI handler's own host time per call):
- plain:  a 128x128x64 bf16 GEMM tile kernel (one block, no NVSHMEM) vs `jnp.dot`: target at most 2 us more;
- launch: the launch alone: a one-block kernel adding 1 to 4 KiB vs XLA's fusion doing the same, so that
          what the custom call costs is not mixed with how fast our GEMM is against cuBLAS at a tiny size;
          "launch, in place": the same kernel with `input_output_aliases={0: 0}`, so that, like XLA's
          fusion, it updates the loop carry in place instead of writing a fresh buffer XLA then copies;
- comm:   the ring shift kernel (puts, end-of-call barrier) on this PE's mesh vs a plain copy kernel
          moving the same bytes: target at most 3 us more on one PE;
- shift:  the ring shift of 4 KiB and of 1 MiB per PE: targets 15 us and 30 us with two PEs on one GPU;
          "4 KiB signalled", "1 MiB signalled": the shift whose blocks signal their rows, which ends without the
          meeting when call-free, and with NVSHMEM's calls ($TILESCALE_CALL_FREE=0) copies its staged output
          out itself, each block its rows once their signal arrived ($TILESCALE_KERNEL_STAGING=0: the
          handler copies it after the kernel, for comparison);
- copy_out (only when asked for): that comparison in one run, both forms of the signalled shift compiled with
          NVSHMEM's calls, ours copying out in the kernel, the baseline leaving it to the handler.
The comm and shift rows also run as "[chain]" (`--loop`): jitted programs of 50 calls written out, with no
while loop, whose per-iteration cost (counter, condition, their launches: 9-17 us on the H200 machine, the
plain copy kernel's own figure) every fori row pays whatever the kernel does. XLA does not record a while
loop into a command buffer by default; with XLA_FLAGS="--xla_gpu_enable_command_buffer=+WHILE,+CONDITIONAL
--xla_gpu_graph_min_graph_size=1" (tools/gpu_test.sh step bench_call_overhead_graphs) the fori rows time a
loop recorded as one CUDA graph, whose iterations do not return to the host. The header prints XLA_FLAGS.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import re
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


def signalled_shift_kernel(m: int, n: int, dtype: jnp.dtype, block_m: int = 64) -> ts.TileKernel:
    """The ring shift with each block's rows announced by a signal its receiver waits for: the kernel
    proves its own completion and ends without the end-of-call meeting (codegen/end_of_call.py)."""

    @ts.kernel(out_shape=jax.ShapeDtypeStruct((m, n), dtype), grid=(m // block_m,), threads=128)
    def signalled_shift(src, dst):
        arrived = T.alloc_signal(m // block_m)
        pid = T.program_id(0)
        rows = T.ds(pid * block_m, block_m)
        T.putmem_signal_nbi_block(dst[rows, :], src[rows, :], sig=arrived[pid], value=1, op=T.SignalOp.SET,
                                  pe=(T.get_pe() + 1) % T.get_pe_num())
        T.signal_wait_until(arrived[pid], T.Cmp.EQ, 1)

    return signalled_shift


SHOW_HLO = False  # --hlo: print each row's compiled loop body
# what, ours s, base s, handler (whole s, cuLaunch s, handler calls per launch), the reps' lowest and highest
# (ours lo, ours hi, base lo, base hi, s): a median far from its lowest rep says some reps ran apart from the rest
Row = tuple[str, float, float, tuple[float, float, float] | None, tuple[float, float, float, float]]


def _take_handler_times() -> tuple[int, int, int]:
    try:
        from jax_tilescale import _ffi
    except ImportError:  # no GPU extension: nothing to read
        return (0, 0, 0)
    return _ffi.take_handler_times()


CHAIN = 50  # calls per jitted program in --loop chain


def _loop(step, iters: int, kind: str = "fori"):
    """`iters` calls of `step` (x -> x): one jitted fori_loop ("fori"), or ("chain") a jitted program of
    CHAIN calls written out one after another, dispatched iters / CHAIN times back to back. The chain has
    no while loop, so it measures a call without the loop's own per-iteration cost (XLA's counter,
    condition and their launches, which every row pays alike in "fori"); only for rows whose baseline
    XLA cannot fuse across calls (a chain of `x + 1` fusions becomes one fusion)."""
    if kind == "fori":
        return jax.jit(lambda x: jax.lax.fori_loop(0, iters, lambda i, x: step(x), x))

    def chain(x):
        for _ in range(CHAIN):
            x = step(x)
        return x

    program = jax.jit(chain)

    def run(x):
        for _ in range(max(1, iters // CHAIN)):
            x = program(x)
        return x

    run.lower = program.lower  # for --hlo
    return run


_SKIP_OPS = {"parameter", "get-tuple-element", "tuple", "constant", "bitcast", "copy-start", "copy-done"}


def loop_body_ops(loop, x) -> str:
    """What XLA runs per iteration of `loop` (its compiled while body): the ops that launch work,
    e.g. "custom-call jax_tilescale_launch, fusion, add". Read from the optimised HLO, so that a row's
    difference can be told apart from an extra op one side pays (a slice, a copy of the loop carry)."""
    text = loop.lower(x).compile().as_text()
    bodies = re.findall(r"while\(.*?body=(%?[\w.\-]+)", text)
    if not bodies:
        return "no while loop (unrolled?)"
    name = bodies[0].lstrip("%")
    m = re.search(r"^\s*%?" + re.escape(name) + r" .*?\{\n(.*?)^\}", text, re.S | re.M)
    if m is None:
        return "while body not found"
    ops = []
    for line in m.group(1).splitlines():
        op = re.search(r"=\s*[^ ]+\s+([a-z\-]+)\(", line)
        if op is None or op.group(1) in _SKIP_OPS:
            continue
        target = re.search(r'custom_call_target="([^"]+)"|kind=(k\w+)|calls=%?([\w.\-]+)', line)
        ops.append(op.group(1) + (f" {next(g for g in target.groups() if g)}" if target else ""))
    return ", ".join(ops)


def _time(loop, x, iters: int) -> float:
    t0 = time.perf_counter()
    jax.block_until_ready(loop(x))
    return (time.perf_counter() - t0) / iters


@contextlib.contextmanager
def environment(values: dict[str, str]):
    """`values` set in os.environ while a loop is compiled (switches the code generator reads then)."""
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextlib.contextmanager
def collector_paused():
    """No garbage collection inside (as timeit does), after one collection: with PEs in several processes, one
    process's pause holds up every peer whose kernels wait for its kernels (reps of 100-1300 us per call were seen)."""
    gc.collect()
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


def paired(what: str, ours, base, x, iters: int, reps: int, x_base=None, loop: str = "fori",
           envs: tuple[dict[str, str], dict[str, str]] = ({}, {})) -> Row:
    """Seconds per call of `ours` and of `base` (each x -> x, `iters` calls as `_loop` of kind `loop` runs
    them), timed alternately rep by rep so that clock and host drift fall on both alike; medians.
    Also our FFI handler's host time per call during ours' runs (whole handler, cuLaunchKernel).
    `envs`: the environment each is compiled in."""
    x_base = x if x_base is None else x_base
    loop_ours, loop_base = _loop(ours, iters, loop), _loop(base, iters, loop)
    if loop == "chain":
        iters = max(1, iters // CHAIN) * CHAIN
        what = f"{what} [chain]"
    if SHOW_HLO and jax.process_index() == 0:
        print(f"{what}\n  ours' loop body: {loop_body_ops(loop_ours, x)}\n  base's loop body: "
              f"{loop_body_ops(loop_base, x_base)}")
    with environment(envs[0]):
        jax.block_until_ready(loop_ours(x))
    with environment(envs[1]):
        jax.block_until_ready(loop_base(x_base))
    t_ours, t_base = [], []
    calls = execute_ns = launch_ns = 0
    with collector_paused():
        for _ in range(reps):
            _take_handler_times()
            t_ours.append(_time(loop_ours, x, iters))
            c, e, lt = _take_handler_times()
            calls, execute_ns, launch_ns = calls + c, execute_ns + e, launch_ns + lt
            t_base.append(_time(loop_base, x_base, iters))
    # per handler call, and handler calls per launch of ours (below 1: XLA replayed launches from a command buffer)
    handler = (execute_ns / calls * 1e-9, launch_ns / calls * 1e-9, calls / (reps * iters)) if calls else None
    spread = (min(t_ours), max(t_ours), min(t_base), max(t_base))
    return (what, float(np.median(t_ours)), float(np.median(t_base)), handler, spread)


def add_one_kernel(m: int, n: int, dtype: jnp.dtype, in_place: bool = False) -> ts.TileKernel:
    """The smallest useful kernel: one block adds 1 to an m x n tile (`in_place`: in the input's buffer)."""

    @ts.kernel(out_shape=jax.ShapeDtypeStruct((m, n), dtype), grid=(1,), threads=128,
               input_output_aliases={0: 0} if in_place else None)
    def add_one(src, dst):
        t = T.alloc_fragment((m, n), dtype)
        T.copy(src, t)
        for i, j in T.Parallel(m, n):
            t[i, j] = t[i, j] + 1
        T.copy(t, dst)

    return add_one


def bench_launch(iters: int, reps: int) -> list[Row]:
    kern = add_one_kernel(8, 128, jnp.dtype(jnp.float32))  # 4 KiB
    x = jax.random.normal(jax.random.key(2), (8, 128), jnp.float32)
    np.testing.assert_array_equal(np.asarray(jax.jit(kern)(x)), np.asarray(x + 1))
    in_place = add_one_kernel(8, 128, jnp.dtype(jnp.float32), in_place=True)
    np.testing.assert_array_equal(np.asarray(jax.jit(in_place)(x)), np.asarray(x + 1))
    return [paired("launch: add 1 to 4 KiB, one block vs XLA fusion", kern, lambda x: x + 1, x, iters, reps),
            paired("launch, in place: the same aliased {0: 0} vs XLA fusion", in_place, lambda x: x + 1, x, iters,
                   reps)]


def bench_plain(iters: int, reps: int) -> list[Row]:
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
    # The same without the slice, whose cost the two sides need not share (XLA may move a slice of a dot
    # into the dot's operand, outside the loop): a square product whose output is the next call's input.
    sq = gemm_example.gemm(m, m, m, jnp.bfloat16, block_m=128, block_n=128, block_k=64)
    b2 = jax.random.normal(jax.random.key(5), (m, m), jnp.bfloat16) * 0.05
    a2 = jax.random.normal(jax.random.key(6), (m, m), jnp.bfloat16)
    np.testing.assert_allclose(np.asarray(jax.jit(lambda a: sq(a, b2))(a2), np.float32),
                               np.asarray(jnp.dot(a2, b2), np.float32), rtol=2e-2, atol=2e-2)
    return [paired("plain 128x128x64 GEMM (then a slice) vs jnp.dot", ours, xla, a, iters, reps),
            paired("plain 128x128x128 GEMM, output = next input, vs jnp.dot", lambda a: sq(a, b2),
                   lambda a: jnp.dot(a, b2), a2, iters, reps)]


def shift_and_copy(mesh, rows: int, n: int, block_m: int = 64, signalled: bool = False):
    """The ring shift (`signalled`: its form that ends without the meeting) and the copy kernel over mesh
    axis "x" (`rows` x `n` float32 per PE, `block_m` rows a block), checked once against the host's
    ppermute (no XLA collective: NCCL refuses two PEs on one GPU)."""
    dtype = jnp.dtype(jnp.float32)
    block_m = min(block_m, rows)
    make = signalled_shift_kernel if signalled else simple_shift.simple_shift
    shift = make(rows, n, dtype, block_m=block_m)
    copy = copy_kernel(rows, n, dtype, block_m=block_m)
    wrap = lambda f: jax.shard_map(f, mesh=mesh, in_specs=P("x"), out_specs=P("x"))
    verdict = ts.testing.check_shift(jax.jit(wrap(shift)), mesh, rows, n, dtype, seed=3)
    if not verdict.ok:
        raise SystemExit(f"the ring shift is wrong: {verdict}")
    x = ts.testing.place(ts.testing.random_array(4, (rows * mesh.size, n), dtype), mesh, P("x"))
    return wrap(shift), wrap(copy), x


def bench_comm(mesh, iters: int, reps: int, loops: tuple[str, ...] = ("fori",)) -> list[Row]:
    shift, copy, x = shift_and_copy(mesh, 64, 16)  # 4 KiB per PE
    return [paired(f"4 KiB shift ({mesh.size} PE) vs plain copy kernel", shift, copy, x, iters, reps, loop=lp)
            for lp in loops]


def bench_shift(mesh, iters: int, reps: int, loops: tuple[str, ...] = ("fori",)) -> list[Row]:
    rows_out = []
    # 4 KiB: one block (latency); 1 MiB: 64 blocks of 16 KiB, since 4 blocks of 256 KiB made even the plain
    # copy cost 34 us with two PEs on one GPU (2026-12-01), more than the row's target.
    for label, rows, n, block_m, signalled in (("4 KiB", 64, 16, 64, False), ("1 MiB", 256, 1024, 4, False),
                                               ("4 KiB signalled", 64, 16, 64, True),
                                               ("1 MiB signalled", 256, 1024, 4, True)):
        shift, copy, x = shift_and_copy(mesh, rows, n, block_m, signalled)
        rows_out += [paired(f"{label} shift per PE ({mesh.size} PEs) vs plain copy", shift, copy, x, iters, reps,
                            loop=lp) for lp in loops]
    return rows_out


def pull_shift_kernel(m: int, n: int, dtype: jnp.dtype, block_m: int = 64) -> ts.TileKernel:
    """The ring shift by gets: each block reads its rows of the previous PE's input, which is staged with
    NVSHMEM's calls (peers read it) and copied in by the kernel itself (codegen/stage_in.py)."""

    @ts.kernel(out_shape=jax.ShapeDtypeStruct((m, n), dtype), grid=(m // block_m,), threads=128)
    def pull_shift(src, dst):
        rows = T.ds(T.program_id(0) * block_m, block_m)
        npes = T.get_pe_num()
        T.getmem_nbi_block(dst[rows, :], src[rows, :], pe=(T.get_pe() + npes - 1) % npes)

    return pull_shift


def bench_copy_out(mesh, iters: int, reps: int, loops: tuple[str, ...] = ("fori",)) -> list[Row]:
    """With NVSHMEM's calls (staged buffers, as across machines), the kernels' own staging copies vs the same
    kernels whose staging the handler does ($TILESCALE_KERNEL_STAGING=0), compiled in the same run: the
    signalled shift (its output copied out by the kernel, each block its rows once their signal arrived)
    and the shift by gets (its input copied in by the kernel before its entry barrier)."""
    calls = {"TILESCALE_CALL_FREE": "0"}
    handler_env = {**calls, "TILESCALE_KERNEL_STAGING": "0"}
    dtype = jnp.dtype(jnp.float32)
    wrap = lambda f: jax.shard_map(f, mesh=mesh, in_specs=P("x"), out_specs=P("x"))
    rows_out = []
    for label, rows, n, block_m in (("4 KiB", 64, 16, 64), ("1 MiB", 256, 1024, 4)):
        with environment(calls):  # the check's compile: the kernel's own copy-out
            ours, _, x = shift_and_copy(mesh, rows, n, block_m, signalled=True)
        with environment(handler_env):
            handler, _, _ = shift_and_copy(mesh, rows, n, block_m, signalled=True)
        rows_out += [paired(f"{label} signalled shift ({mesh.size} PEs), NVSHMEM calls: copy-out by the kernel vs "
                            "by the handler", ours, handler, x, iters, reps, loop=lp, envs=(calls, handler_env))
                     for lp in loops]
        pull, pull_h = (wrap(pull_shift_kernel(rows, n, dtype, block_m)) for _ in range(2))
        for f, env in ((pull, calls), (pull_h, handler_env)):
            with environment(env):
                verdict = ts.testing.check_shift(jax.jit(f), mesh, rows, n, dtype, seed=5)
            if not verdict.ok:
                raise SystemExit(f"the shift by gets is wrong: {verdict}")
        rows_out += [paired(f"{label} shift by gets ({mesh.size} PEs), NVSHMEM calls: copy-in by the kernel vs "
                            "by the handler", pull, pull_h, x, iters, reps, loop=lp, envs=(calls, handler_env))
                     for lp in loops]
    return rows_out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="launch,plain,comm,shift",
                    help="rows to run: launch, plain, comm, shift, copy_out (not by default: the signalled shift "
                    "with NVSHMEM's calls, copied out by the kernel vs the handler)")
    ap.add_argument("--iters", type=int, default=500)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--hlo", action="store_true", help="print the ops of each row's compiled loop body")
    ap.add_argument("--loop", default="fori,chain",
                    help="how the comm and shift rows repeat the call: fori (a jitted fori_loop), chain (jitted "
                    f"programs of {CHAIN} calls written out, no while loop), or both, comma-separated; the launch "
                    "and plain rows always use fori (XLA would fuse a chain of its baseline)")
    a = ap.parse_args()
    global SHOW_HLO
    SHOW_HLO = a.hlo
    platform = ts.platform.setup()
    mesh = jax.make_mesh((platform.num_devices,), ("x",))
    want = set(a.only.split(","))
    rows: list[Row] = []
    if "launch" in want:
        rows += bench_launch(a.iters, a.reps)
    if "plain" in want:
        rows += bench_plain(a.iters, a.reps)
    loops = tuple(a.loop.split(","))
    if not set(loops) <= {"fori", "chain"}:
        raise SystemExit(f"--loop: fori and/or chain, not {a.loop!r}")
    if "comm" in want:
        rows += bench_comm(mesh, a.iters, a.reps, loops)
    if "shift" in want:
        rows += bench_shift(mesh, a.iters, a.reps, loops)
    if "copy_out" in want:
        rows += bench_copy_out(mesh, a.iters, a.reps, loops)
    if jax.process_index() != 0:
        return
    print(f"\n{platform.describe()}; per call, median of {a.reps} x {a.iters} calls in a jitted fori_loop "
          f"([chain]: jitted programs of {CHAIN} calls written out), ours and the baseline alternately; "
          f"XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}")
    print("(handler: host time in our FFI handler per handler call, of it cuLaunch: in cuLaunchKernel; calls/launch: "
          "handler calls per launch of ours, below 1 where XLA replayed launches from a command buffer)")
    head = ("ours us", "base us", "diff us")
    print(f"{'what':58s} {head[0]:>9s} {head[1]:>9s} {head[2]:>9s} {'ratio':>6s} {'handler':>8s} {'cuLaunch':>8s} "
          f"{'calls/launch':>12s} {'ours reps us':>15s} {'base reps us':>15s}")
    for what, ours, base, host, spread in rows:
        handler, launch, per = (f"{host[0] * 1e6:8.2f}", f"{host[1] * 1e6:8.2f}", f"{host[2]:12.3f}") if host \
            else ("-", "-", "-")
        reps = [f"{spread[i] * 1e6:.2f}-{spread[i + 1] * 1e6:.2f}" for i in (0, 2)]
        print(f"{what:58s} {ours * 1e6:9.2f} {base * 1e6:9.2f} {(ours - base) * 1e6:9.2f} {ours / base:6.2f} "
              f"{handler:>8s} {launch:>8s} {per:>12s} {reps[0]:>15s} {reps[1]:>15s}")


if __name__ == "__main__":
    main()
