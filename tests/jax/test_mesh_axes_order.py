"""A kernel's PE space is row-major over its `mesh_axes` in the order given, as
`jax.lax.axis_index(mesh_axes)` numbers it, not in mesh order (issue 13, item 1): the interpreter's
PE and team numbering, T.get_pe / axis_index / axis_size / pe_of, and the GPU's `kernel_axes`."""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import jax_tilescale as ts
from jax_tilescale import language as T
from jax_tilescale.lowering import CallSpec
from jax_tilescale.lowering.cuda import mesh_attributes
from jax_tilescale.runtime.pe_table import kernel_pe_map

ROWS, COLS = 4, 3
SPEC = P(("a", "b"))  # device (a, b) holds block a * 4 + b


def mesh_2x4() -> jax.sharding.Mesh:
    return jax.make_mesh((2, 4), ("a", "b"), devices=jax.devices()[:8])


def fresh(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    x = rng.standard_normal(shape)
    return np.where(np.abs(x) < 0.1, x + 0.5, x).astype(np.float32)


@pytest.mark.parametrize("axes", [("b", "a"), ("a", "b"), ("b",)])
def test_fcollect_matches_all_gather_over_the_axes_in_that_order(axes: tuple[str, ...]) -> None:
    """fcollect stacks the PEs' blocks in PE order: the same as jax.lax.all_gather over `axes`."""
    mesh = mesh_2x4()
    npes = int(np.prod([mesh.shape[a] for a in axes]))

    @ts.kernel(out_shape=jax.ShapeDtypeStruct((ROWS * npes, COLS), jnp.float32), grid=(1,), mesh_axes=axes)
    def gather(x, y):
        T.fcollect_block(y, x)

    def reference(x):
        return jax.lax.all_gather(x, axes, tiled=True)

    x = fresh(np.random.default_rng(1), (ROWS * mesh.size, COLS))
    placed = jax.device_put(x, NamedSharding(mesh, SPEC))
    got = jax.jit(jax.shard_map(gather, mesh=mesh, in_specs=SPEC, out_specs=SPEC))(placed)
    want = jax.jit(jax.shard_map(reference, mesh=mesh, in_specs=SPEC, out_specs=SPEC))(placed)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_pe_queries_follow_the_kernel_axis_order() -> None:
    """get_pe, axis_index, axis_size and pe_of on mesh ("a", "b") with mesh_axes=("b", "a"), against
    jax.lax.axis_index; a put to pe_of(b=next) against jax.lax.ppermute along "b"."""
    mesh = mesh_2x4()
    iota = 64

    @ts.kernel(out_shape=(jax.ShapeDtypeStruct((6,), jnp.int32), jax.ShapeDtypeStruct((ROWS, COLS), jnp.float32)),
               grid=(1,), mesh_axes=("b", "a"))
    def queries(numbers, x, out, shifted):
        nxt = T.pe_of(b=(T.axis_index("b") + 1) % T.axis_size("b"))
        values = [T.get_pe(), T.axis_index("a"), T.axis_index("b"), T.axis_size("b"), T.pe_of(a=0), nxt]
        for k, v in enumerate(values):  # value v is element v of the iota input
            T.copy(numbers[T.ds(v, 1)], out[k : k + 1])
        T.putmem_block(shifted, x, pe=nxt)

    def reference(numbers, x):
        a, b = jax.lax.axis_index("a"), jax.lax.axis_index("b")
        values = [jax.lax.axis_index(("b", "a")), a, b, 4, b * 2, ((b + 1) % 4) * 2 + a]
        perm = [(i, (i + 1) % 4) for i in range(4)]
        return jnp.stack([jnp.asarray(v, jnp.int32) for v in values]), jax.lax.ppermute(x, "b", perm)

    numbers = jax.device_put(np.tile(np.arange(iota, dtype=np.int32), mesh.size), NamedSharding(mesh, SPEC))
    x = jax.device_put(fresh(np.random.default_rng(2), (ROWS * mesh.size, COLS)), NamedSharding(mesh, SPEC))
    f = jax.jit(jax.shard_map(queries, mesh=mesh, in_specs=SPEC, out_specs=SPEC))
    g = jax.jit(jax.shard_map(reference, mesh=mesh, in_specs=SPEC, out_specs=SPEC))
    for got, want in zip(f(numbers, x), g(numbers, x)):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def _bound_call(kern: ts.TileKernel, mesh: jax.sharding.Mesh) -> CallSpec:
    """The CallSpec the kernel binds when called inside shard_map on `mesh`."""
    x = jax.device_put(jnp.zeros((ROWS * mesh.size, COLS), jnp.float32), NamedSharding(mesh, SPEC))
    jaxpr = jax.make_jaxpr(jax.shard_map(kern, mesh=mesh, in_specs=SPEC, out_specs=SPEC))(x)
    calls = [e.params["call"] for e in _equations(jaxpr.jaxpr) if e.primitive.name == "tilescale_call"]
    assert len(calls) == 1
    return calls[0]


def _equations(jaxpr):
    for eqn in jaxpr.eqns:
        yield eqn
        for v in eqn.params.values():
            inner = getattr(v, "jaxpr", v)
            if hasattr(inner, "eqns"):
                yield from _equations(inner)


@pytest.mark.parametrize("axes", [("b", "a"), ("a", "b"), ("b",), ("a",)])
def test_gpu_pe_map_numbers_pes_like_axis_index(axes: tuple[str, ...]) -> None:
    """The attributes the CUDA lowering sends (kernel_axes in the kernel's order) make the handler's PE
    map number each device as jax.lax.axis_index(axes) does, for a mesh whose devices sit in
    processes in a permuted order."""
    mesh = mesh_2x4()
    kern = ts.kernel(lambda x, y: T.copy(x, y), out_shape=jax.ShapeDtypeStruct((ROWS, COLS), jnp.float32),
                     grid=(1,), mesh_axes=axes)
    call = _bound_call(kern, mesh)
    assert call.kernel.mesh_axes == axes

    class Device:
        def __init__(self, process_index: int):
            self.process_index = process_index

    class PermutedMesh:  # mesh device (a, b) lives in process perm[a * 4 + b]
        axis_names = ("a", "b")
        perm = np.random.default_rng(3).permutation(8)
        devices = np.array([Device(int(p)) for p in perm], dtype=object).reshape(2, 4)

    table, shape, kernel_axes = mesh_attributes(PermutedMesh, call.kernel.mesh_axes)
    sizes = [mesh.shape[a] for a in axes]
    for a, b in itertools.product(range(2), range(4)):
        coords = {"a": a, "b": b}
        my_pe, pe_map = kernel_pe_map(table, shape, kernel_axes, int(PermutedMesh.perm[a * 4 + b]))
        want = int(np.ravel_multi_index([coords[n] for n in axes], sizes))  # row-major in the kernel's order
        assert my_pe == want, (a, b)
        assert pe_map[my_pe] == PermutedMesh.perm[a * 4 + b]
