"""PE queries on 2-D meshes through jax.jit(jax.shard_map): get_pe / get_rank, get_pe_num /
get_num_ranks, axis_index, axis_size, pe_of and T.Scale("device"), against jax.lax.axis_index.

Kernels have no scalar stores yet, so each value v is written as element v of an iota input."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import jax_tilescale as ts
from jax_tilescale import KernelTraceError
from jax_tilescale import language as T

from .util import F32, mesh_of

K = 12  # values recorded per device
IOTA = 64


def record(iota, out, values):
    for k, v in enumerate(values):
        T.copy(iota[T.ds(v, 1)], out[k : k + 1])


@pytest.mark.parametrize("mesh_shape,axes", [((2, 4), ("x", "y")), ((2, 4), ("y",)), ((2, 2), ("x",))])
def test_queries_match_axis_index(mesh_shape: tuple[int, int], axes: tuple[str, ...]) -> None:
    def queries(iota, out):
        pe, npes = T.get_pe(), T.get_pe_num()
        with T.Scale("device") as (index, count):
            pass
        values = [pe, npes, T.get_rank(), T.get_num_ranks(), index, count]
        for a in ("x", "y"):
            values += [T.axis_index(a), T.axis_size(a)] if a in axes else [0, 0]
        # Peers by coordinates: the first PE of this PE's row, and the next along the last axis.
        last = axes[-1]
        values.append(T.pe_of(**{last: 0}))
        values.append(T.pe_of(**{last: (T.axis_index(last) + 1) % T.axis_size(last)}))
        record(iota, out, values)

    kern = ts.kernel(queries, out_shape=jax.ShapeDtypeStruct((K,), jnp.int32), grid=(1,), mesh_axes=axes)
    mesh = mesh_of(mesh_shape, ("x", "y"))

    def expected(_):
        pe = jax.lax.axis_index(axes)
        npes = int(np.prod([mesh.shape[a] for a in axes]))
        vals = [pe, npes, pe, npes, pe, npes]
        for a in ("x", "y"):
            vals += [jax.lax.axis_index(a), mesh.shape[a]] if a in axes else [0, 0]
        last = axes[-1]
        n_last = mesh.shape[last]
        i_last = jax.lax.axis_index(last)
        vals.append(pe - i_last)
        vals.append(pe - i_last + (i_last + 1) % n_last)
        return jnp.stack([jnp.asarray(v, jnp.int32) for v in vals])

    spec = P(("x", "y"))
    iota = np.tile(np.arange(IOTA, dtype=np.int32), mesh.size)
    f = jax.jit(jax.shard_map(kern, mesh=mesh, in_specs=spec, out_specs=spec))
    g = jax.jit(jax.shard_map(expected, mesh=mesh, in_specs=spec, out_specs=spec))
    x = jax.device_put(iota, NamedSharding(mesh, spec))
    got, want = np.asarray(f(x)), np.asarray(g(x))
    np.testing.assert_array_equal(got, want)
    assert len(set(got.reshape(mesh.size, K)[:, 0])) == int(np.prod([mesh.shape[a] for a in axes]))


def test_unknown_scale_and_unknown_axes_are_trace_errors() -> None:
    def unknown_scale(a, b):  # every HDA level is a scale (tests/compute/test_scales.py); this is none
        T.Scale("galaxy")

    def bad_axis(a, b):
        T.axis_index("z")

    def bad_coord(a, b):
        T.copy(a, b)
        T.putmem_nbi_block(b, a, pe=T.pe_of(x=T.axis_index("x") + 1))

    for fn, match in [(unknown_scale, "is not a scale"), (bad_axis, "mesh axes"), (bad_coord, "can be 4")]:
        kern = ts.kernel(fn, out_shape=jax.ShapeDtypeStruct((8,), F32), grid=(1,), mesh_axes=("x",))
        with pytest.raises(KernelTraceError, match=match):
            kern.trace(jax.ShapeDtypeStruct((8,), F32), mesh_axes=("x",), num_pes=4)
