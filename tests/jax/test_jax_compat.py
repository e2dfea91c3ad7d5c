"""The JAX shim (jax_tilescale/_jax_compat.py): every function exercised on the installed JAX.

It is checked on the JAX versions in CHECKED_JAX_VERSIONS (0.10.2 on the CPU machines, 0.11.2 on
the GPU machine). On any other version the first test fails on purpose: re-read each function of
_jax_compat.py against the JAX source its docstring names, run this file, then add the version."""

from __future__ import annotations

import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.extend.core import Primitive
from jax.interpreters import mlir
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from jax_tilescale import _jax_compat as compat


def test_installed_jax_is_a_checked_version() -> None:
    assert compat.version_is_checked(), (
        f"JAX {jax.__version__} is not among the versions jax_tilescale/_jax_compat.py was checked on "
        f"{compat.CHECKED_JAX_VERSIONS}: re-read each of its functions against the JAX source named in its "
        "docstring (jax._src.core ShapedArray/ManualAxisType, jax._src.config._check_vma, "
        "jax._src.callback.emit_python_callback/_callback_op_sharding/_wrapped_callback, "
        "jax._src.distributed.global_state), run tests/jax, then add the version to CHECKED_JAX_VERSIONS"
    )
    assert compat.version_is_checked("0.10.2") and compat.version_is_checked("0.11.2")
    assert not compat.version_is_checked("0.9.0")


def mesh_2x2() -> jax.sharding.Mesh:
    return jax.make_mesh((2, 2), ("a", "b"), devices=jax.devices()[:4])


def test_mesh_scope_and_check_vma() -> None:
    assert compat.mesh_scope() == compat.MeshScope((), {}, (), ()) and compat.mesh_scope().empty
    mesh = mesh_2x2()
    seen = {}

    def body(x):
        seen[len(seen)] = (compat.mesh_scope(), compat.check_vma_enabled(), compat.varying_axes(jax.typeof(x)))
        return x

    x = jax.device_put(jnp.arange(8.0), NamedSharding(mesh, P(("a", "b"))))
    jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P(("a", "b")), out_specs=P(("a", "b"))))(x)
    xb = jax.device_put(jnp.arange(8.0), NamedSharding(mesh, P("b")))
    jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("b"), out_specs=P("b"), check_vma=False))(xb)
    jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("b"), out_specs=P("b"), axis_names={"b"}))(xb)
    full, unchecked, partial = seen[0], seen[1], seen[2]
    assert full == (compat.MeshScope(("a", "b"), {"a": 2, "b": 2}, ("a", "b"), ()), True, {"a", "b"})
    assert unchecked[1:] == (False, frozenset())
    assert partial[0] == compat.MeshScope(("a", "b"), {"a": 2, "b": 2}, ("b",), ("a",))
    assert partial[2] == {"b"}


def test_shaped_array_is_typed_varying() -> None:
    assert compat.shaped_array((2, 3), np.float32) == jax.core.ShapedArray((2, 3), np.float32)
    mesh = mesh_2x2()
    out = {}

    def body(x):
        aval = compat.shaped_array((4,), np.int32, frozenset({"b"}))
        out["aval"] = aval
        return x

    x = jax.device_put(jnp.arange(8.0), NamedSharding(mesh, P(("a", "b"))))
    jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P(("a", "b")), out_specs=P(("a", "b"))))(x)
    aval = out["aval"]
    assert aval.shape == (4,) and aval.dtype == np.int32 and compat.varying_axes(aval) == {"b"}


# A primitive of the test's own, lowered with the shim's host callback: device d's callback adds d's
# coordinate, and records what the shim says about the lowering and the callback's frames.
class Log(dict):
    """What a lowering saw; hashed by identity, so each test's binding is lowered anew."""

    __hash__ = object.__hash__

    def __eq__(self, other: object) -> bool:
        return self is other


_probe = Primitive("jax_compat_probe")
_probe.multiple_results = True
_probe.def_abstract_eval(lambda x, *, log: [jax.core.ShapedArray(x.shape, x.dtype)])


def _probe_lowering(ctx, x, *, log):
    log["mesh"] = compat.lowering_mesh(ctx)

    def callback(arr):
        frames = compat.host_callback_frames(sys._getframe())
        log.setdefault("frames", []).append([f.f_code.co_name for f in frames])
        return (np.asarray(arr) * 10,)

    return compat.emit_host_callback(ctx, callback, [x])


mlir.register_lowering(_probe, _probe_lowering, platform="cpu")


def test_emit_host_callback_lowering_mesh_and_callback_frames() -> None:
    mesh = mesh_2x2()
    log = Log()
    x = np.random.default_rng(0).standard_normal(8).astype(np.float32)
    f = jax.jit(jax.shard_map(lambda v: _probe.bind(v, log=log)[0], mesh=mesh, in_specs=P(("a", "b")),
                              out_specs=P(("a", "b"))))
    np.testing.assert_allclose(np.asarray(f(jax.device_put(x, NamedSharding(mesh, P(("a", "b")))))), x * 10)
    assert log["mesh"] is not None and tuple(log["mesh"].axis_names) == ("a", "b")
    assert len(log["frames"]) == 4  # one callback per device
    for names in log["frames"]:
        assert names[0] == "callback" and names[-1] == "_wrapped_callback", names

    log = Log()
    np.testing.assert_allclose(np.asarray(jax.jit(lambda v: _probe.bind(v, log=log)[0])(x)), x * 10)
    assert log["mesh"] is None
    assert compat.host_callback_frames(sys._getframe()) == []  # not inside a callback


def test_lowering_mesh_of_a_nested_shard_map() -> None:
    """In a shard_map nested without a mesh argument the lowering knows only the abstract mesh, unless
    the call runs under jax.set_mesh (what the GPU lowering of a partially manual call needs)."""
    mesh = mesh_2x2()
    x = jax.device_put(jnp.arange(8.0), NamedSharding(mesh, P("b")))

    def run(log: Log) -> None:
        def body(v):
            inner = jax.shard_map(lambda w: _probe.bind(w, log=log)[0], in_specs=P(), out_specs=P(),
                                  axis_names={"a"})
            return inner(v)

        f = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("b"), out_specs=P("b"), axis_names={"b"}))
        np.testing.assert_allclose(np.asarray(f(x)), np.arange(8.0) * 10)

    log = Log()
    run(log)
    assert log["mesh"] is None
    log = Log()
    with jax.set_mesh(mesh):
        run(log)
    assert log["mesh"] == mesh


def test_distributed_state_without_jax_distributed() -> None:
    assert compat.distributed_client() is None
    assert compat.distributed_rank_and_world() is None


@pytest.mark.parametrize("version", ["0.10.2", "0.11.2"])
def test_checked_versions_are_the_documented_ones(version: str) -> None:
    assert version in compat.CHECKED_JAX_VERSIONS
