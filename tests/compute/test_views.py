"""T.view: global-coordinate reads of FullRow / FullCol / PartitionSpec views (local, remote, split
per owner), writes to every replica, atomic_add into a Replica view, against numpy on fresh random
data; the lowering (what the IR holds), the race detector on replica writes, and the errors (bad
layout, view vs in_specs, region out of bounds, run-time start that may cross shards)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import jax_tilescale as ts
from jax_tilescale import language as T
from jax_tilescale.errors import KernelTraceError, RaceError
from jax_tilescale.ir.nodes import Copy, PeerCopy, walk_stmts
from tests.compute.test_elementwise import rand
from tests.primitives.util import mesh_of

SDS = jax.ShapeDtypeStruct
F32 = jnp.float32


def _line_of(marker: str) -> str:
    lines = open(__file__).read().splitlines()
    return f"{__file__}:{next(i + 1 for i, t in enumerate(lines) if t.endswith(marker))}"


def _run(kern, mesh, in_specs, out_specs, *xs):
    f = jax.jit(jax.shard_map(kern, mesh=mesh, in_specs=in_specs, out_specs=out_specs))
    placed = [ts.testing.place(x, mesh, s) for x, s in zip(xs, in_specs)]
    out = f(*placed)
    return [np.asarray(o) for o in (out if isinstance(out, (tuple, list)) else [out])]


def _gather_kernel(layout, gshape, tile, npes):
    """Every PE copies the whole global array through the view, tile by tile, into its output."""
    rows, cols = gshape
    tr, tc = tile

    @ts.kernel(out_shape=SDS(gshape, F32), grid=(rows // tr, cols // tc))
    def k(x, out):
        bx, by = T.program_id(0), T.program_id(1)
        xv = T.view(x, layout)
        s = T.alloc((tr, tc), F32, level="l1")
        T.copy(xv[T.ds(bx * tr, tr), T.ds(by * tc, tc)], s)
        T.copy(s, out[T.ds(bx * tr, tr), T.ds(by * tc, tc)])

    return k


@pytest.mark.parametrize("layout,spec,tile", [
    (T.FullRow, P("x"), (8, 16)),
    (T.FullCol, P(None, "x"), (16, 8)),
    (T.FullRow, P("x"), (4, 32)),
])
def test_sharded_views_read_in_global_coordinates(layout, spec, tile):
    npes = 4
    x = rand(np.random.default_rng(90), (32, 32), np.float32)
    (got,) = _run(_gather_kernel(layout, (32, 32), tile, npes), mesh_of((npes,)), (spec,), P("x"), x)
    np.testing.assert_array_equal(got.reshape(npes, 32, 32), np.broadcast_to(x, (npes, 32, 32)))


def test_region_spanning_owners_is_split_per_owner():
    """A static window across the boundary of two shards (rows 6..13 of 8-row shards): two pieces."""
    npes = 4

    @ts.kernel(out_shape=SDS((8, 16), F32), grid=(1,))
    def k(x, out):
        s = T.alloc((8, 16), F32, level="l1")
        T.copy(T.view(x, T.FullRow)[6:14, :], s)
        T.copy(s, out)

    x = rand(np.random.default_rng(91), (32, 16), np.float32)
    (got,) = _run(k, mesh_of((npes,)), (P("x"),), P("x"), x)
    np.testing.assert_array_equal(got.reshape(npes, 8, 16), np.broadcast_to(x[6:14], (npes, 8, 16)))
    ir = k.trace(SDS((8, 16), F32), mesh_axes=("x",), num_pes=npes)
    assert sum(isinstance(s, PeerCopy) for s in walk_stmts(ir.body)) == 2


def test_partition_spec_over_a_2d_mesh():
    """P("x", "y") on a 2 x 2 mesh: blocks of the global array from every PE, x rows, y columns."""
    mesh = mesh_of((2, 2), ("x", "y"))

    @ts.kernel(out_shape=SDS((16, 16), F32), grid=(4, 4))
    def k(x, out):
        bx, by = T.program_id(0), T.program_id(1)
        s = T.alloc((4, 4), F32, level="l1")
        T.copy(T.view(x, P("x", "y"))[T.ds(bx * 4, 4), T.ds(by * 4, 4)], s)
        T.copy(s, out[T.ds(bx * 4, 4), T.ds(by * 4, 4)])

    x = rand(np.random.default_rng(92), (16, 16), np.float32)
    (got,) = _run(k, mesh, (P("x", "y"),), P(("x", "y")), x)
    np.testing.assert_array_equal(got.reshape(4, 16, 16), np.broadcast_to(x, (4, 16, 16)))


def test_replica_writes_reach_every_replica():
    """Each PE writes its own rows into a Replica view of its output: every PE ends with all rows."""
    npes = 4

    @ts.kernel(out_shape=SDS((npes * 4, 8), F32), grid=(1,), replicated=True)
    def k(x, out):
        me = T.get_pe()
        s = T.alloc((4, 8), F32, level="l1")
        T.copy(x, s)
        T.copy(s, T.view(out, T.Replica)[T.ds(me * 4, 4), :])

    x = rand(np.random.default_rng(93), (npes * 4, 8), np.float32)
    (got,) = _run(k, mesh_of((npes,)), (P("x"),), P(), x)
    np.testing.assert_array_equal(got, x)


def test_atomic_add_into_a_replica_view_reduces():
    npes, blocks = 4, 2

    @ts.kernel(out_shape=SDS((blocks * 4, 8), F32), grid=(blocks,), replicated=True)
    def k(x, out):
        bx = T.program_id(0)
        s = T.alloc((4, 8), F32, level="l1")
        z = T.alloc((4, 8), F32, level="l1")
        T.clear(z)
        T.copy(z, out[T.ds(bx * 4, 4), :])
        T.copy(x[T.ds(bx * 4, 4), :], s)
        T.atomic_add(T.view(out, T.Replica)[T.ds(bx * 4, 4), :], s)

    rng = np.random.default_rng(94)
    x = rng.integers(-8, 9, (npes * blocks * 4, 8)).astype(np.float32)  # exact sums in any order
    (got,) = _run(k, mesh_of((npes,)), (P("x"),), P(), x)
    np.testing.assert_array_equal(got, x.reshape(npes, blocks * 4, 8).sum(0))


def test_one_pe_view_is_the_plain_copy():
    ir = _gather_kernel(T.FullRow, (32, 32), (8, 16), 1).trace(SDS((32, 32), F32), mesh_axes=("x",), num_pes=1)
    assert all(isinstance(s, Copy) for s in ir.body)


def test_replica_writes_of_one_region_from_two_pes_race():
    npes = 2

    @ts.kernel(out_shape=SDS((4, 8), F32), grid=(1,), replicated=True)
    def k(x, out):
        s = T.alloc((4, 8), F32, level="l1")
        T.copy(x, s)
        T.copy(s, T.view(out, T.Replica)[0:4, :])  # the racing write

    x = rand(np.random.default_rng(95), (npes * 4, 8), np.float32)
    with pytest.raises(RaceError):
        _run(k, mesh_of((npes,)), (P("x"),), P(), x)


def _trace_err(body, shape=(8, 8), num_pes=2, spec=None, check=True):
    spec = P("x") if spec is None else spec
    @ts.kernel(out_shape=SDS(shape, F32), grid=(2,))
    def k(x, out):
        body(x, out)

    if not check:
        with pytest.raises(KernelTraceError) as e:
            k.trace(SDS(shape, F32), mesh_axes=("x",), num_pes=num_pes)
        return str(e.value)
    mesh = mesh_of((num_pes,))
    f = jax.jit(jax.shard_map(k, mesh=mesh, in_specs=(spec,), out_specs=P("x")))
    with pytest.raises(KernelTraceError) as e:
        f(ts.testing.place(np.ones((shape[0] * (num_pes if spec != P() else 1), shape[1]), np.float32), mesh, spec))
    return str(e.value)


def test_bad_layout_names_the_line():
    def body(x, out):
        T.view(x, "rows")  # the bad layout

    msg = _trace_err(body, check=False)
    assert "layout must be T.FullRow, T.FullCol, T.Replica or a PartitionSpec" in msg
    assert _line_of("# the bad layout") in msg


def test_partition_spec_naming_an_unknown_axis():
    def body(x, out):
        T.view(x, P("y"))  # the unknown axis

    msg = _trace_err(body, check=False)
    assert "'y', which is not one of the kernel's mesh axes" in msg and _line_of("# the unknown axis") in msg


def test_view_not_matching_in_specs():
    def body(x, out):
        T.view(x, T.FullRow)  # the mismatch

    msg = _trace_err(body, spec=P())
    assert "in_specs give every device along 'x' the same" in msg and _line_of("# the mismatch") in msg

    def body2(x, out):
        T.view(x, T.Replica)  # the replica mismatch

    msg = _trace_err(body2, spec=P("x"))
    assert "in_specs split it along 'x'" in msg and _line_of("# the replica mismatch") in msg


def test_region_out_of_bounds():
    def body(x, out):
        s = T.alloc((4, 8), F32, level="l1")
        T.copy(T.view(x, T.FullRow)[14:18, :], s)  # the static overrun

    assert _line_of("# the static overrun") in _trace_err(body, check=False)

    def body2(x, out):
        s = T.alloc((4, 8), F32, level="l1")
        T.copy(T.view(x, T.FullRow)[T.ds(T.program_id(0) * 8 + 12, 4), :], s)  # the dynamic overrun

    msg = _trace_err(body2, check=False)
    assert "outside its global extent 16" in msg and _line_of("# the dynamic overrun") in msg


def test_run_time_start_that_may_cross_shards():
    def body(x, out):
        s = T.alloc((4, 8), F32, level="l1")
        T.copy(T.view(x, T.FullRow)[T.ds(T.program_id(0) * 6, 4), :], s)  # the crossing

    msg = _trace_err(body, check=False)
    assert "may cross the boundary between shards of 8" in msg and _line_of("# the crossing") in msg


def test_atomic_add_into_a_sharded_view_is_refused():
    def body(x, out):
        s = T.alloc((4, 8), F32, level="l1")
        T.atomic_add(T.view(out, T.FullRow)[0:4, :], s)  # the sharded atomic

    msg = _trace_err(body, check=False)
    assert "only views with no sharded dimension" in msg and _line_of("# the sharded atomic") in msg
