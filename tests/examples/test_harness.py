"""jax_tilescale.testing, the examples' harness: host references mean what jax.shard_map means,
placed inputs are what the host built, and comparisons fail when they should."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import jax_tilescale as ts

testing = ts.testing


def device_shard_map(body, mesh, in_specs, out_specs, *arrays):
    """The same body under a real jax.shard_map on the simulated devices (XLA's collectives; JAX types
    all_gather's result as varying, so a replicated out_spec for it needs check_vma=False)."""
    specs = in_specs if isinstance(in_specs, tuple) else (in_specs,)
    f = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=in_specs, out_specs=out_specs, check_vma=False))
    out = f(*(jax.device_put(a, NamedSharding(mesh, s)) for a, s in zip(arrays, specs)))
    return tuple(np.asarray(o) for o in (out if isinstance(out, tuple) else (out,)))


def test_lax_on_host_matches_shard_map_on_a_line():
    mesh = jax.make_mesh((8,), ("x",))
    x = testing.random_array(1, (8 * 4, 3), "bfloat16")
    y = testing.random_array(2, (64, 2), "float32")

    def body(a, b, rep):
        return (jax.lax.ppermute(a, "x", testing.ring(8, shift=3)), jax.lax.all_gather(a, "x", tiled=True),
                jax.lax.all_to_all(b, "x", 0, 0, tiled=True) + rep.sum())

    specs = (P("x"), P("x"), P())
    outs = (P("x"), P(None), P("x"))
    rep = np.arange(5, dtype=np.float32)
    for got, want in zip(testing.lax_on_host(body, mesh, specs, outs)(x, y, rep),
                         device_shard_map(body, mesh, specs, outs, x, y, rep)):
        np.testing.assert_array_equal(got, want)


def test_lax_on_host_matches_shard_map_on_2d_meshes():
    mesh = jax.make_mesh((2, 4), ("x", "y"))
    x = testing.random_array(3, (8 * 4, 6), "float32")

    def body(a):
        ids = jnp.stack([jax.lax.axis_index(("x", "y")), jax.lax.axis_index("x"), jax.lax.axis_index("y")])
        return ids.astype(jnp.float32), jax.lax.ppermute(a, "y", testing.ring(4)), jax.lax.all_gather(a, "y")[3]

    spec = P(("x", "y"))
    for got, want in zip(testing.lax_on_host(body, mesh, spec, (spec,) * 3)(x),
                         device_shard_map(body, mesh, spec, (spec,) * 3, x)):
        np.testing.assert_array_equal(got, want)
    square = jax.make_mesh((2, 2), ("r", "c"), devices=jax.devices()[:4])

    def blocks(a):
        return a * (1 + jax.lax.axis_index("r")) + jax.lax.axis_index("c"), jax.lax.psum(a, "r")

    specs = (P("r", "c"), P(None, "c"))
    for got, want in zip(testing.lax_on_host(blocks, square, P("r", "c"), specs)(x[:8]),
                         device_shard_map(blocks, square, P("r", "c"), specs, x[:8])):
        np.testing.assert_array_equal(got, want)


def test_inputs_are_the_same_for_a_seed_and_placed_as_built():
    a = testing.random_array(7, (16, 4), "bfloat16")
    np.testing.assert_array_equal(a, testing.random_array(7, (16, 4), "bfloat16"))
    assert a.dtype == jnp.bfloat16 and np.all(np.isfinite(a.astype(np.float32))) and len(np.unique(a)) > 32
    mesh = jax.make_mesh((4,), ("x",), devices=jax.devices()[:4])
    placed = testing.place(a, mesh, P("x"))
    assert placed.sharding == NamedSharding(mesh, P("x"))
    np.testing.assert_array_equal(np.asarray(placed), a)


def test_compare_checks_every_shard_against_its_window():
    mesh = jax.make_mesh((4,), ("x",), devices=jax.devices()[:4])
    want = testing.random_array(0, (32, 8), "float32")
    assert testing.compare(testing.place(want, mesh, P("x")), want, "same")
    off = want.copy()
    off[27, 5] += 1e-3  # one element, in the last shard only
    bad = testing.compare(testing.place(off, mesh, P("x")), want, "one element off")
    assert not bad and "max |error| 0.001" in str(bad)
    assert testing.compare(testing.place(off, mesh, P("x")), want, "within", atol=2e-3)
    assert testing.compare(testing.place(off, mesh, P("x")), want, "relative to max", atol_of_max=2e-3 / 4)
    poisoned = off.copy()
    poisoned[0, 0] = np.nan
    assert not testing.compare(testing.place(poisoned, mesh, P("x")), want, "NaN", atol=1e9)
    assert not testing.compare(testing.place(want[:16], mesh, P("x")), want, "shape")
    both = testing.compare(testing.place(want, mesh, P("x")), want, "a") & bad
    assert not both and str(both).splitlines()[1].startswith("one element off: False")


def test_check_shift_fails_on_a_program_that_does_not_shift():
    mesh = jax.make_mesh((4,), ("x",), devices=jax.devices()[:4])
    identity = jax.jit(lambda a: (a, a))
    verdict = testing.check_shift(identity, mesh, 8, 4, "float32", seed=0)
    assert not verdict and "2 outputs" in verdict.what
    shift = jax.jit(jax.shard_map(lambda a: jax.lax.ppermute(a, "x", testing.ring(4)), mesh=mesh, in_specs=P("x"),
                                  out_specs=P("x")))
    assert testing.check_shift(shift, mesh, 8, 4, "float32", seed=0)


@pytest.mark.parametrize("count,plan,shape", [
    (1, ts.platform.line(2), None), (3, ts.platform.line(2), (3,)),
    (2, ts.platform.square(), None), (8, ts.platform.square(), None), (9, ts.platform.square(), (3, 3)),
    (6, ts.platform.rows(2), (2, 3)), (2, ts.platform.rows(2), None), (5, ts.platform.rows(2), None),
])
def test_mesh_plans_say_what_they_need(count, plan, shape):
    if shape is None:
        with pytest.raises(ts.platform.MeshUnavailable, match=f"needs .*; this run has {count}"):
            plan.shape(count)
    else:
        assert plan.shape(count) == shape
