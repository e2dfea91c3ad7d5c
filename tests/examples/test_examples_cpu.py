"""Every example on 2, 4 and 8 simulated CPU devices, through the interpreter, on random data."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import jax_tilescale as ts
from jax_tilescale import language as T
from tests.conftest import load_example

shift = load_example("simple_shift")
allgather = load_example("allgather")


def mesh_of(n: int, name: str = "x") -> jax.sharding.Mesh:
    return jax.make_mesh((n,), (name,), devices=jax.devices()[:n])


@pytest.mark.parametrize("npes", [2, 4, 8])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_simple_shift_matches_ppermute(npes, dtype):
    assert shift.check(mesh_of(npes), m=128, n=64, dtype=dtype, seed=npes)


@pytest.mark.parametrize("npes", [2, 4, 8])
@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_allgather_matches_all_gather(npes, dtype):
    assert allgather.check(mesh_of(npes), m=128, n=32, dtype=dtype, seed=10 + npes)


def test_shift_result_is_really_shifted():
    """Independent of the lax reference: block of PE i lands on PE i+1."""
    mesh = mesh_of(4)
    f = jax.jit(jax.shard_map(shift.simple_shift(64, 8, jnp.float32), mesh=mesh, in_specs=P("x"),
                              out_specs=P("x")))
    x = np.random.default_rng(0).standard_normal((4 * 64, 8)).astype(np.float32)
    out = np.asarray(f(jax.device_put(x, NamedSharding(mesh, P("x")))))
    np.testing.assert_array_equal(out, np.roll(x.reshape(4, 64, 8), 1, axis=0).reshape(-1, 8))


def test_kernel_over_one_axis_of_a_2d_mesh():
    """mesh_axes picks the PE space; PEs of different rows never talk to each other."""
    mesh = jax.make_mesh((2, 4), ("r", "x"), devices=jax.devices()[:8])
    kern = shift.simple_shift(64, 8, jnp.float32)
    kern_x = ts.kernel(kern.fn, out_shape=jax.ShapeDtypeStruct((64, 8), jnp.float32), grid=(1,), mesh_axes=("x",))
    f = jax.jit(jax.shard_map(kern_x, mesh=mesh, in_specs=P(("r", "x")), out_specs=P(("r", "x"))))
    x = np.random.default_rng(1).standard_normal((8 * 64, 8)).astype(np.float32)
    out = np.asarray(f(jax.device_put(x, NamedSharding(mesh, P(("r", "x"))))))
    want = np.roll(x.reshape(2, 4, 64, 8), 1, axis=1).reshape(-1, 8)
    np.testing.assert_array_equal(out, want)


def test_kernel_with_mesh_axes_outside_shard_map_is_an_error():
    k = ts.kernel(lambda a, b: None, out_shape=jax.ShapeDtypeStruct((8,), jnp.float32), grid=(1,), mesh_axes="x")
    with pytest.raises(ts.KernelTraceError, match=r"outside jax\.shard_map"):
        jax.jit(k)(jnp.ones((8,), jnp.float32))


def test_unknown_mesh_axis_is_an_error():
    k = ts.kernel(lambda a, b: None, out_shape=jax.ShapeDtypeStruct((8,), jnp.float32), grid=(1,), mesh_axes="y")
    mesh = mesh_of(2)
    f = jax.jit(jax.shard_map(k, mesh=mesh, in_specs=P("x"), out_specs=P("x")))
    with pytest.raises(ts.KernelTraceError, match=r"\['y'\] are not axes"):
        f(jax.device_put(jnp.ones((16,), jnp.float32), NamedSharding(mesh, P("x"))))


def test_dynamic_pe_out_of_range_is_reported_with_pe_and_op():
    """(pe * 3) % 5 on 4 PEs is 0, 3, 1, 4: PE 3 targets PE 4, which does not exist."""

    @ts.kernel(out_shape=jax.ShapeDtypeStruct((8,), jnp.float32), grid=(1,))
    def bad(a, b):
        T.putmem_nbi_block(b, a, pe=(T.get_pe() * 3) % 5)  # not affine: only caught at run time

    put_line = inspect.getsourcelines(bad.fn)[1] + 2  # the decorator's line + 2
    mesh = mesh_of(4)
    f = jax.jit(jax.shard_map(bad, mesh=mesh, in_specs=P("x"), out_specs=P("x")))
    x = jax.device_put(jnp.arange(32, dtype=jnp.float32), NamedSharding(mesh, P("x")))
    with pytest.raises(Exception, match="putmem_nbi_block: target PE 4 ") as info:
        jax.block_until_ready(f(x))
    message = str(info.value)
    assert "has 4 PEs (0..3)" in message
    assert re.search(rf"\(PE 3, block \(0,\), at \S*{Path(__file__).name}:{put_line}\)", message), message


def test_interpret_options_reach_the_interpreter():
    """A racy kernel is reported by default and runs when the user turns race detection off."""

    def racy(a, b):  # both blocks write the same rows of the output
        T.copy(a[0:64, :], b[0:64, :])

    mesh = mesh_of(2)
    x = jax.device_put(jnp.arange(2 * 64 * 8, dtype=jnp.float32).reshape(128, 8), NamedSharding(mesh, P("x")))
    out = jax.ShapeDtypeStruct((64, 8), jnp.float32)
    checked = ts.kernel(racy, out_shape=out, grid=(2,))
    with pytest.raises(Exception, match="data race"):
        jax.block_until_ready(jax.jit(jax.shard_map(checked, mesh=mesh, in_specs=P("x"), out_specs=P("x")))(x))
    unchecked = ts.kernel(racy, out_shape=out, grid=(2,), interpret=ts.InterpretOptions(detect_races=False))
    got = jax.jit(jax.shard_map(unchecked, mesh=mesh, in_specs=P("x"), out_specs=P("x")))(x)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(x))
