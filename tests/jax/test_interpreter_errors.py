"""Errors the interpreter finds reach the user as their documented types (issue 13 item 4):
`except ts.DeadlockError` / `ts.RaceError` / `ts.KernelRuntimeError` around a jitted call matches,
the message is the interpreter's own, one error per call however many devices fail, nothing is
printed at exit, and later calls run normally."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import jax_tilescale as ts
from jax_tilescale import language as T
from jax_tilescale.interpret import InterpreterSession, InterpretOptions
from tests.interpret.harness import launch

ROWS, COLS = 8, 4
SDT = jax.ShapeDtypeStruct((ROWS, COLS), jnp.float32)


def mesh_of(n: int) -> jax.sharding.Mesh:
    return jax.make_mesh((n,), ("x",), devices=jax.devices()[:n])


def sharded(mesh: jax.sharding.Mesh, seed: int = 0) -> tuple[np.ndarray, jax.Array]:
    x = np.random.default_rng(seed).standard_normal((ROWS * mesh.size, COLS)).astype(np.float32) + 2.0
    return x, jax.device_put(x, NamedSharding(mesh, P("x")))


def run_sharded(kern: ts.TileKernel, mesh: jax.sharding.Mesh, x: jax.Array) -> jax.Array:
    return jax.block_until_ready(jax.jit(jax.shard_map(kern, mesh=mesh, in_specs=P("x"), out_specs=P("x")))(x))


@ts.kernel(out_shape=SDT, grid=(1,))
def waits_forever(a, b):
    T.copy(a, b)
    sig = T.alloc_signal()
    T.signal_wait_until(sig, T.Cmp.EQ, 1)


@ts.kernel(out_shape=SDT, grid=(1,))
def clobbers(a, b):  # a put into the neighbour's output races with its own copy into it
    T.putmem_nbi_block(b, a, pe=(T.get_pe() + 1) % T.get_pe_num())
    T.copy(a, b)


@ts.kernel(out_shape=SDT, grid=(1,))
def bad_peer(a, b):  # PEs 0, 1, 2 put to PEs 0, 3, 1; PE 3 to PE 4, which does not exist
    T.putmem_block(b, a, pe=(T.get_pe() * 3) % 5)  # not affine: only caught at run time


@ts.kernel(out_shape=SDT, grid=(1,))
def shift(a, b):
    T.putmem_block(b, a, pe=(T.get_pe() + 1) % T.get_pe_num())


def interpreter_error(kern: ts.TileKernel, inputs: list[np.ndarray]) -> BaseException:
    """The error the interpreter itself raises for this launch (run on Python threads, no JAX)."""
    ir = kern.trace(*inputs[0:1], mesh_axes=("x",), num_pes=len(inputs))
    result = launch(InterpreterSession(ir, InterpretOptions()), [[x] for x in inputs])
    first = next(e for e in result.errors if e is not None)
    while isinstance(first.__cause__, ts.TileScaleError):
        first = first.__cause__
    return first


def later_calls_still_work(mesh: jax.sharding.Mesh) -> None:
    x, placed = sharded(mesh, seed=9)
    np.testing.assert_array_equal(np.asarray(run_sharded(shift, mesh, placed)), np.roll(x, ROWS, axis=0))


def no_second_error(seconds: float = 0.5) -> None:
    """A second error of the same call would be raised in this thread while it runs Python here."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(0.01)


def test_deadlock_on_eight_devices_raises_one_deadlock_error() -> None:
    mesh = mesh_of(8)
    x, placed = sharded(mesh)
    with pytest.raises(ts.DeadlockError) as info:
        run_sharded(waits_forever, mesh, placed)
    no_second_error()
    err = info.value
    assert isinstance(err, ts.KernelRuntimeError) and isinstance(err, ts.TileScaleError)
    assert type(err).__name__ == "DeadlockError" and type(err).__module__ == "jax_tilescale.errors"
    want = interpreter_error(waits_forever, list(np.split(x, 8)))
    assert str(err) == str(want)  # the interpreter's message, every waiter listed
    assert str(err).count("waits for signal_wait_until") == 8
    later_calls_still_work(mesh)


def test_race_raises_race_error() -> None:
    mesh = mesh_of(2)
    x, placed = sharded(mesh, seed=1)
    with pytest.raises(ts.RaceError, match="data race on PE") as info:
        run_sharded(clobbers, mesh, placed)
    no_second_error()
    any_pe = lambda text: re.sub(r"PE \d+", "PE k", text)  # which PE sees the race first varies
    assert any_pe(str(info.value)) == any_pe(str(interpreter_error(clobbers, list(np.split(x, 2)))))
    assert "putmem_nbi_block" in str(info.value) and "by copy at" in str(info.value)
    later_calls_still_work(mesh)


def test_out_of_range_pe_raises_kernel_runtime_error() -> None:
    mesh = mesh_of(4)
    x, placed = sharded(mesh, seed=2)
    with pytest.raises(ts.KernelRuntimeError) as info:
        run_sharded(bad_peer, mesh, placed)
    no_second_error()
    assert type(info.value).__mro__[1] is ts.KernelRuntimeError  # exactly the documented type
    want = interpreter_error(bad_peer, list(np.split(x, 4)))
    assert str(info.value) == str(want) and "target PE 4" in str(want)
    later_calls_still_work(mesh)


def test_one_device_deadlock_raises_from_the_call() -> None:
    """With one device the callback runs in the calling thread: the error is raised once it has returned."""
    with pytest.raises(ts.DeadlockError, match="deadlock in kernel 'waits_forever'"):
        jax.block_until_ready(jax.jit(waits_forever)(np.ones((ROWS, COLS), np.float32)))
    no_second_error()
    x = np.random.default_rng(5).standard_normal((ROWS, COLS)).astype(np.float32)
    np.testing.assert_array_equal(np.asarray(jax.jit(shift)(x)), x)  # its only peer is itself


def test_a_caught_error_prints_nothing_at_exit(tmp_path) -> None:
    script = tmp_path / "caught.py"
    script.write_text(textwrap.dedent('''
        import jax, jax.numpy as jnp
        from jax_tilescale.platform import request_cpu_devices
        request_cpu_devices(8)
        import jax_tilescale as ts
        from jax_tilescale import language as T
        from jax.sharding import NamedSharding, PartitionSpec as P

        @ts.kernel(out_shape=jax.ShapeDtypeStruct((8,), jnp.float32), grid=(1,))
        def waits_forever(a, b):
            sig = T.alloc_signal()
            T.signal_wait_until(sig, T.Cmp.EQ, 1)

        mesh = jax.make_mesh((8,), ("x",), devices=jax.devices()[:8])
        f = jax.jit(jax.shard_map(waits_forever, mesh=mesh, in_specs=P("x"), out_specs=P("x")))
        x = jax.device_put(jnp.arange(64, dtype=jnp.float32), NamedSharding(mesh, P("x")))
        try:
            jax.block_until_ready(f(x))
        except ts.DeadlockError as e:
            print("caught", type(e).__name__)
    '''))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "caught DeadlockError"
    assert "Exception ignored" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert "deadlock" not in proc.stderr.lower(), proc.stderr
