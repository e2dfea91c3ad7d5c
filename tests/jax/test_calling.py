"""Where a kernel may be called (issue 13 items 6 and 7): outside jax.jit it says how to call it,
naming the caller's line; inside a partially manual shard_map its PE space is the manual axes and
the automatic axes are left to JAX."""

from __future__ import annotations

import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import jax_tilescale as ts
from jax_tilescale import language as T

ROWS, COLS = 4, 8


def shift_kernel(**kw) -> ts.TileKernel:
    @ts.kernel(out_shape=jax.ShapeDtypeStruct((ROWS, COLS), jnp.float32), grid=(1,), **kw)
    def shift(a, b):
        T.putmem_block(b, a, pe=(T.get_pe() + 1) % T.get_pe_num())

    return shift


def test_a_call_outside_jit_says_how_to_call_it_and_names_the_line() -> None:
    shift = shift_kernel()
    x = np.ones((ROWS, COLS), np.float32)
    with pytest.raises(ts.KernelTraceError, match=r"called outside jax\.jit") as info:
        line = inspect.currentframe().f_lineno + 1
        shift(x)
    err = info.value
    assert err.loc.filename == __file__ and err.loc.lineno == line
    assert str(err).startswith(f"{__file__}:{line}: ")
    assert "jax.jit(shift)(x)" in str(err) and "jax.shard_map(shift" in str(err)
    np.testing.assert_array_equal(np.asarray(jax.jit(shift)(x)), x)  # as it says: one PE, its own peer


def partial_mesh() -> jax.sharding.Mesh:
    return jax.make_mesh((2, 4), ("dp", "tp"), devices=jax.devices()[:8])


@pytest.mark.parametrize("check_vma", [True, False])
def test_partially_manual_shard_map_runs_the_kernel_over_the_manual_axes(check_vma: bool) -> None:
    """shard_map(axis_names={"tp"}) on a (dp, tp) mesh: the kernel's PEs are the 4 devices along tp
    (get_pe_num() is 4), and the result equals jax.lax.ppermute along tp, whatever the sharding of the
    data along the automatic axis dp."""
    mesh = partial_mesh()
    shift = shift_kernel()
    x = np.random.default_rng(0).standard_normal((ROWS, COLS * 4)).astype(np.float32) + 2.0
    want = np.roll(x, COLS, axis=1)  # block j of the columns goes to PE j + 1 along tp
    for data_spec in (P(None, "tp"), P("dp", "tp")):
        placed = jax.device_put(x, NamedSharding(mesh, data_spec))
        f = jax.jit(jax.shard_map(shift, mesh=mesh, in_specs=P(None, "tp"), out_specs=P(None, "tp"),
                                  axis_names={"tp"}, check_vma=check_vma))
        np.testing.assert_array_equal(np.asarray(f(placed)), want)

    def reference(a):
        return jax.lax.ppermute(a, "tp", [(i, (i + 1) % 4) for i in range(4)])

    ref = jax.jit(jax.shard_map(reference, mesh=mesh, in_specs=P(None, "tp"), out_specs=P(None, "tp")))
    np.testing.assert_array_equal(np.asarray(ref(jax.device_put(x, NamedSharding(mesh, P(None, "tp"))))), want)


def test_partially_manual_gather_matches_all_gather() -> None:
    mesh = partial_mesh()

    @ts.kernel(out_shape=jax.ShapeDtypeStruct((ROWS * 4, COLS), jnp.float32), grid=(1,), mesh_axes="tp")
    def gather(x, y):
        T.fcollect_block(y, x)

    def reference(a):
        return jax.lax.all_gather(a, "tp", tiled=True)

    x = np.random.default_rng(1).standard_normal((ROWS * 4, COLS)).astype(np.float32)
    placed = jax.device_put(x, NamedSharding(mesh, P("tp")))
    # Each tp device's copy of the gathered array, stacked (a kernel output is typed per device).
    got = jax.jit(jax.shard_map(gather, mesh=mesh, in_specs=P("tp"), out_specs=P("tp"), axis_names={"tp"}))(placed)
    want = jax.jit(jax.shard_map(reference, mesh=mesh, in_specs=P("tp"), out_specs=P("tp")))(placed)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    np.testing.assert_array_equal(np.asarray(got), np.tile(x, (4, 1)))


def test_partially_manual_kernel_may_not_name_an_automatic_axis() -> None:
    mesh = partial_mesh()
    shift = shift_kernel(mesh_axes=("dp",))
    placed = jax.device_put(np.ones((ROWS, COLS * 4), np.float32), NamedSharding(mesh, P(None, "tp")))
    f = jax.jit(jax.shard_map(shift, mesh=mesh, in_specs=P(None, "tp"), out_specs=P(None, "tp"), axis_names={"tp"}))
    with pytest.raises(ts.KernelTraceError, match=r"mesh axes \['dp'\] are not axes of the enclosing shard_map"):
        f(placed)
