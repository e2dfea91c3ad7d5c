"""Communicating kernels in XLA's command buffers (docs/calling_convention.md, "Communicating launches
in command buffers"): a call-free kernel whose buffers all go over zero-copy takes its launch number and
scratch from its launch-control words, so XLA may record it into a CUDA graph and replay it. Checked
here: the lowering picks the graph target, XLA replays launches without calling the handler (fewer
handler calls than launches), and every replayed launch is a new, correct one (results against numpy on
the host, fresh random data; NCCL refuses two ranks on one GPU, so no XLA collective is the reference)."""

from __future__ import annotations

import os
import re

import jax
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import jax_tilescale as ts
from jax_tilescale import language as T
from jax_tilescale.runtime import peer_memory
from tests.primitives.util import F32, assert_equal, per_device, random_rows

ROWS, COLS, BM = 128, 256, 32
CALLS, RUNS = 8, 5  # calls per jitted program (XLA records 5 or more consecutive commands), programs run
LOOP = 40  # iterations of the fori_loop tests


@ts.kernel(out_shape=jax.ShapeDtypeStruct((ROWS, COLS), F32), grid=(ROWS // BM,))
def push(src, dst):
    """Ring shift by puts, each row block with a signal its receiver waits for: the signal words are
    scratch, which must read zero at the start of every launch, replayed or not."""
    arrived = T.alloc_signal(ROWS // BM)
    pid = T.program_id(0)
    rows = T.ds(pid * BM, BM)
    n = T.get_pe_num()
    T.putmem_signal_nbi_block(dst[rows, :], src[rows, :], sig=arrived[pid], value=1, op=T.SignalOp.SET,
                              pe=(T.get_pe() + 1) % n)
    T.signal_wait_until(arrived[pid], T.Cmp.EQ, 1)


@ts.kernel(out_shape=jax.ShapeDtypeStruct((ROWS, COLS), F32), grid=(ROWS // BM,))
def pull(src, dst):
    """Ring shift by gets: this PE reads the previous PE's input through the address it publishes."""
    rows = T.ds(T.program_id(0) * BM, BM)
    n = T.get_pe_num()
    T.getmem_block(dst[rows, :], src[rows, :], pe=(T.get_pe() + n - 1) % n)


def _handler_calls() -> int:
    from jax_tilescale import _ffi

    return _ffi.take_handler_times()[0]


def _chain(kern, mesh):
    spec = P(tuple(mesh.axis_names))

    def calls(x):
        for _ in range(CALLS):
            x = kern(x)
        return x

    return jax.jit(jax.shard_map(calls, mesh=mesh, in_specs=spec, out_specs=spec)), spec


def _check_replays(kern, mesh, by_per_call: int) -> None:
    n = mesh.size
    run, spec = _chain(kern, mesh)
    rng = np.random.default_rng(21)
    x = random_rows(rng, n, (ROWS, COLS))
    placed = ts.testing.place(x, mesh, spec)
    assert "jax_tilescale_launch_graph" in run.lower(placed).as_text(), (
        f"the lowering kept the plain target; zero-copy: {peer_memory.status()} (it is off where XLA's pool cannot be "
        "exported, e.g. with XLA_PYTHON_CLIENT_PREALLOCATE=false)")
    want = np.roll(per_device(x, n), by_per_call * CALLS, axis=0).reshape(x.shape)
    _handler_calls()
    for _ in range(RUNS):  # the same buffers every run: XLA replays what it recorded
        got = run(placed)
        assert_equal(got, want)
        del got  # so that the next run's output may take the same buffer
    calls = _handler_calls()
    assert calls < CALLS * RUNS, (
        f"{calls} handler calls for {CALLS * RUNS} launches: XLA replayed none from a command buffer "
        "(XLA_FLAGS --xla_gpu_enable_command_buffer without CUSTOM_CALL?)")
    for seed in range(3):  # fresh data, fresh buffers: recorded again where XLA must, still correct
        x = random_rows(np.random.default_rng(30 + seed), n, (ROWS, COLS))
        want = np.roll(per_device(x, n), by_per_call * CALLS, axis=0).reshape(x.shape)
        assert_equal(run(ts.testing.place(x, mesh, spec)), want)


@pytest.mark.parametrize("kern", [push, pull], ids=["push", "pull"])
def test_replayed_communicating_launches_on_several_pes(gpu_mesh, kern):
    _check_replays(kern, gpu_mesh, 1)


def test_replayed_communicating_launches_on_one_pe():
    """A kernel whose PE space is this PE alone (every buffer its own) needs no mapped pools either."""
    mesh = jax.make_mesh((1,), ("x",), devices=jax.devices("gpu")[:1])
    _check_replays(push, mesh, 1)


def _xla_records_while_loops() -> bool:
    """Whether XLA_FLAGS adds WHILE to the command buffer kinds (tools/gpu_test.sh's loop_graphs steps):
    then a whole fori_loop is one CUDA graph with a conditional node, replayed without the host."""
    m = re.search(r"--xla_gpu_enable_command_buffer=(\S*)", os.environ.get("XLA_FLAGS", ""))
    return m is not None and "WHILE" in [v.strip().lstrip("+") for v in m.group(1).upper().split(",")]


def _check_loop(kern, mesh, compiler_options: dict | None = None) -> None:
    """LOOP shifts in a jitted fori_loop: XLA's while loop runs the same call site with the same buffers
    every iteration (recorded once into a graph when XLA_FLAGS or `compiler_options` ask for WHILE), and
    each iteration must still be a new launch that reads the previous one's result."""
    n = mesh.size
    spec = P(tuple(mesh.axis_names))
    run = jax.jit(jax.shard_map(lambda x: jax.lax.fori_loop(0, LOOP, lambda i, y: kern(y), x), mesh=mesh,
                                in_specs=spec, out_specs=spec), compiler_options=compiler_options)
    _handler_calls()
    for seed in range(RUNS):
        x = random_rows(np.random.default_rng(50 + seed), n, (ROWS, COLS))
        want = np.roll(per_device(x, n), LOOP, axis=0).reshape(x.shape)
        assert_equal(run(ts.testing.place(x, mesh, spec)), want)
    calls = _handler_calls()
    if compiler_options is not None or _xla_records_while_loops():
        assert calls < LOOP * RUNS, (
            f"{calls} handler calls for {LOOP * RUNS} launches in loops: XLA recorded no while loop")


@pytest.mark.parametrize("kern", [push, pull], ids=["push", "pull"])
def test_loop_of_communicating_launches_on_several_pes(gpu_mesh, kern):
    _check_loop(kern, gpu_mesh)


def test_loop_of_communicating_launches_on_one_pe():
    mesh = jax.make_mesh((1,), ("x",), devices=jax.devices("gpu")[:1])
    _check_loop(push, mesh)


def test_loop_recorded_with_per_jit_options(gpu_mesh):
    """The loop recorded as one graph through `jax.jit(compiler_options=)`, without XLA_FLAGS."""
    _check_loop(push, gpu_mesh, ts.testing.LOOP_GRAPH_OPTIONS)


def test_replayed_plain_launches_with_left_zero_scratch():
    """A plain kernel whose scratch is all `left_zero` (a ticket counter its last block takes back) is graph-safe:
    XLA replays its launches without the handler, and every replayed launch draws tickets 0 .. BLOCKS - 1,
    which it can only if the launch before left the counter zero."""
    from tests.compute.test_fetch_add import BLOCKS, _counted

    kern = _counted(take_back=-BLOCKS)

    def calls(x):
        for _ in range(CALLS):
            x = kern(x)
        return x

    run = jax.jit(calls)
    x = jax.numpy.arange(BLOCKS, dtype=jax.numpy.int32)
    assert "jax_tilescale_launch_graph" in run.lower(x).as_text(), "the lowering kept the plain target"
    loop = jax.jit(lambda y: jax.lax.fori_loop(0, LOOP, lambda i, z: kern(z), y),
                   compiler_options=ts.testing.LOOP_GRAPH_OPTIONS)
    _handler_calls()
    for _ in range(RUNS):
        assert sorted(np.asarray(run(x)).tolist()) == list(range(BLOCKS))
        assert sorted(np.asarray(loop(x)).tolist()) == list(range(BLOCKS))
    calls_made = _handler_calls()
    assert calls_made < (CALLS + LOOP) * RUNS, f"{calls_made} handler calls: XLA replayed no launch"
