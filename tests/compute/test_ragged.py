"""Ragged edges: `T.copy` between global memory and a tile whose global window ends past the
buffer (M, N, K not multiples of the tiles), through the interpreter on simulated CPU devices,
against numpy; what the IR records (`Copy.clip_dims`, printed); the accesses the race detector
sees; and the errors that stay (a window starting outside, ragged windows anywhere but T.copy)."""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import jax_tilescale as ts
from jax_tilescale import language as T
from jax_tilescale.interpret.memory import AccessKind, LaunchMemory
from jax_tilescale.ir.evaluate import evaluate
from jax_tilescale.ir.expr import BinOp, BinOpKind, Const, Var, VarKind, format_expr
from jax_tilescale.ir.nodes import Copy, walk_stmts
from jax_tilescale.ir.ranges import value_bounds
from tests.conftest import load_example
from tests.primitives.util import assert_equal, mesh_of, random_rows, shard_run

BF16 = np.dtype(ml_dtypes.bfloat16)
S = jax.ShapeDtypeStruct


def _run1(kern, *inputs):
    return shard_run(kern, mesh_of((1,)), *inputs)


def _copies(kern, *shapes) -> list[Copy]:
    return [s for s in walk_stmts(kern.trace(*shapes).body) if isinstance(s, Copy)]


# ---- GEMM at ragged shapes -------------------------------------------------------------------------


def ragged_gemm(m, n, k, dtype, out_dtype, bm=64, bn=32, bk=32, a_fragment=False):
    """C = A @ B with every dimension ragged: the grid and the K loop round up, loads zero-fill,
    the store clips. `a_fragment`: A's tile is a float32 fragment (a casting load)."""

    @ts.kernel(out_shape=S((m, n), out_dtype), grid=(T.ceildiv(n, bn), T.ceildiv(m, bm)), threads=128)
    def gemm(a, b, c):
        bx, by = T.program_id(0), T.program_id(1)
        a_t = T.alloc_fragment((bm, bk), jnp.float32) if a_fragment else T.alloc_shared((bm, bk), dtype)
        b_s = T.alloc_shared((bk, bn), dtype)
        acc = T.alloc_fragment((bm, bn), jnp.float32)
        b_t = T.alloc_fragment((bk, bn), jnp.float32) if a_fragment else b_s
        T.clear(acc)
        for ko in T.serial(T.ceildiv(k, bk)):
            T.copy(a[T.ds(by * bm, bm), T.ds(ko * bk, bk)], a_t)
            T.copy(b[ko * bk:ko * bk + bk, T.ds(bx * bn, bn)], b_s)  # the slice form clips too
            if a_fragment:
                T.copy(b_s, b_t)
            T.gemm(a_t, b_t, acc)
        T.copy(acc, c[T.ds(by * bm, bm), T.ds(bx * bn, bn)])

    return gemm


@pytest.mark.parametrize("dtype,out_dtype,a_fragment", [
    (np.float32, np.float32, False), (BF16, BF16, False), (np.float16, np.float32, True),
], ids=["f32", "bf16", "f16-fragment"])
def test_ragged_gemm_matches_numpy(dtype, out_dtype, a_fragment):
    m, n, k = 200, 136, 72
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((m, k)).astype(dtype), rng.standard_normal((k, n)).astype(dtype)
    got = np.asarray(_run1(ragged_gemm(m, n, k, dtype, out_dtype, a_fragment=a_fragment), a, b)[0])
    want = a.astype(np.float32) @ b.astype(np.float32)
    tol = 1e-4 if out_dtype == np.float32 else 3e-2
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=tol, atol=tol * np.abs(want).max())


def test_ir_records_and_prints_the_clipped_dimensions():
    kern = ragged_gemm(200, 128, 64, np.float32, np.float32)  # N and K divide: only M clips
    shapes = (S((200, 64), jnp.float32), S((64, 128), jnp.float32))
    a_load, b_load, store = _copies(kern, *shapes)
    assert (a_load.clip_dims, b_load.clip_dims, store.clip_dims) == ((0,), (), (0,))
    assert a_load.may_clip and not b_load.may_clip and store.global_side is store.dst
    text = kern.ir_text(*shapes)
    assert "clip_dims=(0,))" in text and text.count("clip_dims") == 2
    whole = ragged_gemm(192, 128, 64, np.float32, np.float32)  # everything divides: plain copies
    assert not any(c.may_clip for c in _copies(whole, S((192, 64), jnp.float32), S((64, 128), jnp.float32)))


def test_grouped_tile_order_is_proven_inside():
    """examples/gemm.py at divisible shapes: its grouped tile order (`pid // (g * n) * g + pid % g`,
    not affine) is bounded by interval arithmetic, so no copy clips (the generated code is the
    plain copy); at ragged shapes they do."""
    gemm = load_example("gemm")
    shapes = (S((1024, 256), jnp.bfloat16), S((256, 2048), jnp.bfloat16))
    assert not any(c.may_clip for c in _copies(gemm.gemm(1024, 2048, 256), *shapes))
    ragged = gemm.gemm(1000, 2000, 250)
    shapes = (S((1000, 250), jnp.bfloat16), S((250, 2000), jnp.bfloat16))
    assert [c.clip_dims for c in _copies(ragged, *shapes)] == [(0, 1), (0, 1), (0, 1)]


def test_value_bounds_are_sound():
    """Interval bounds of random index expressions contain every value they take."""
    rng = np.random.default_rng(7)
    x, y = Var(VarKind.PROGRAM_ID, 0), Var(VarKind.PROGRAM_ID, 1)
    ops = list(BinOpKind)

    def make(depth):
        if depth == 0 or rng.random() < 0.25:
            return [x, y, Const(int(rng.integers(-5, 10)))][rng.integers(3)]
        op = ops[rng.integers(len(ops))]
        a, b = make(depth - 1), make(depth - 1)
        if op in (BinOpKind.FLOORDIV, BinOpKind.MOD) and rng.random() < 0.7:
            b = Const(int(rng.integers(1, 8)))
        return BinOp(op, a, b)

    checked = 0
    for _ in range(1500):
        e = make(4)
        ranges = {x: (int(rng.integers(-3, 3)), int(rng.integers(3, 9))), y: (0, int(rng.integers(0, 6)))}
        bounds = value_bounds(e, ranges)
        if bounds is None:
            continue
        for vx, vy in itertools.product(range(ranges[x][0], ranges[x][1] + 1), range(ranges[y][1] + 1)):
            try:
                v = evaluate(e, {x: vx, y: vy})
            except ZeroDivisionError:
                continue
            assert bounds[0] <= v <= bounds[1], (format_expr(e), ranges, bounds, vx, vy, v)
            checked += 1
    assert checked > 10000


# ---- loads zero-fill, stores clip ---------------------------------------------------------------------


@pytest.mark.parametrize("tile", ["shared", "fragment"])
def test_load_zero_fills_and_store_skips(tile):
    """Each block loads a 16 x 16 window of a 40 x 20 input (ragged in both dimensions), writes the
    whole tile to a padded output (the zeros show) and the window back to a 40 x 20 output (only
    the part inside is written: coverage would report a gap, the race detector an overlap)."""
    m, n, bm, bn = 40, 20, 16, 16
    gm, gn = T.ceildiv(m, bm), T.ceildiv(n, bn)
    out = (S((gm * bm, gn * bn), jnp.float32), S((m, n), jnp.float32))

    @ts.kernel(out_shape=out, grid=(gn, gm))
    def k(x, padded, back):
        bx, by = T.program_id(0), T.program_id(1)
        t = T.alloc_fragment((bm, bn), jnp.float32) if tile == "fragment" else T.alloc_shared((bm, bn), jnp.float32)
        T.copy(x[T.ds(by * bm, bm), T.ds(bx * bn, bn)], t)
        T.copy(t, padded[T.ds(by * bm, bm), T.ds(bx * bn, bn)])
        T.copy(t, back[T.ds(by * bm, bm), T.ds(bx * bn, bn)])

    x = random_rows(np.random.default_rng(2), 1, (m, n))
    padded, back = _run1(k, x)
    want = np.zeros((gm * bm, gn * bn), np.float32)
    want[:m, :n] = x
    assert_equal(padded, want)
    assert_equal(back, x)


def test_casting_copies_and_a_3d_buffer():
    """A float32 [3, 50, 24] input, windows x[b, rows, :] of 32 rows (the size-1 dimension is
    dropped: the tile is 2-D), cast to a float16 fragment and back into a float16 [3, 50, 24]."""

    @ts.kernel(out_shape=S((3, 50, 24), jnp.float16), grid=(2, 3))
    def k(x, y):
        r, b = T.program_id(0), T.program_id(1)
        f = T.alloc_fragment((32, 24), jnp.float16)
        T.copy(x[b, T.ds(r * 32, 32), :], f)
        T.copy(f, y[b, T.ds(r * 32, 32), :])

    (load, store) = _copies(k, S((3, 50, 24), jnp.float32))
    assert load.clip_dims == store.clip_dims == (1,)
    x = np.random.default_rng(3).standard_normal((3, 50, 24)).astype(np.float32)
    (got,) = _run1(k, x.reshape(150, 24).reshape(3, 50, 24))
    np.testing.assert_array_equal(np.asarray(got), x.astype(np.float16))


def test_static_slices_and_symmetric_scratch():
    """`x[32:64]` of 40 rows (a static start, past the end) into a tile, stored into symmetric
    scratch with a ragged window and read back into the output."""

    @ts.kernel(out_shape=S((8, 16), jnp.float32), grid=(1,))
    def k(x, y):
        t = T.alloc_shared((32, 16), jnp.float32)
        sym = T.alloc_symmetric((40, 16), jnp.float32)
        T.copy(x[32:64, :], t)  # rows 32..39 real, 40..63 zero
        T.copy(t, sym[T.ds(32, 32), :])
        T.copy(sym[32:64, :], t)
        T.copy(t[0:8, :], y)

    x = random_rows(np.random.default_rng(4), 1, (40, 16))
    assert_equal(_run1(k, x)[0], x[32:40])


def test_the_accesses_are_the_elements_inside(monkeypatch):
    """What a clipped copy reads and writes (what the race detector and coverage see): the part of
    the global window inside the buffer; on a load the whole tile (zeros included)."""
    seen = []
    original = LaunchMemory.access

    def record(self, acc):
        seen.append((acc.kind, str(acc.region)))
        return original(self, acc)

    monkeypatch.setattr(LaunchMemory, "access", record)

    @ts.kernel(out_shape=S((40, 20), jnp.float32), grid=(1,), interpret=ts.InterpretOptions(check_coverage=False))
    def k(x, y):
        t = T.alloc_shared((16, 16), jnp.float32)
        T.copy(x[T.ds(T.program_id(0) + 32, 16), T.ds(16, 16)], t)
        T.copy(t, y[T.ds(T.program_id(0) + 32, 16), T.ds(16, 16)])

    _run1(k, random_rows(np.random.default_rng(5), 1, (40, 20)))
    assert (AccessKind.READ, "x[32:40, 16:20]") in seen
    assert (AccessKind.WRITE, "t[0:16, 0:16]") in seen
    assert (AccessKind.READ, "t[0:8, 0:4]") in seen
    assert (AccessKind.WRITE, "y[32:40, 16:20]") in seen
    assert not any(r.startswith("x[") and r != "x[32:40, 16:20]" for _, r in seen)


def test_two_blocks_storing_the_same_ragged_tile_race():
    @ts.kernel(out_shape=S((40, 8), jnp.float32), grid=(2,))
    def k(x, y):
        t = T.alloc_shared((32, 8), jnp.float32)
        T.copy(x[T.ds(32, 32), :], t)
        T.copy(t, y[T.ds(32, 32), :])  # both blocks write rows 32..39
        T.copy(x[0:32, :], y[0:32, :])

    with pytest.raises(ts.RaceError, match=r"data race on PE 0's output buffer y: elements "
                       r"y\[32:40, 0:8\]"):  # the part inside, not the window [32:64]
        _run1(k, random_rows(np.random.default_rng(6), 1, (40, 8)))


# ---- errors that stay ------------------------------------------------------------------------------------


def _trace(body, *shapes, grid=(1,), out=(40, 16)):
    return ts.kernel(body, out_shape=S(out, jnp.float32), grid=grid).trace(*(S(s, jnp.float32) for s in shapes))


@pytest.mark.parametrize("case,match", [
    ("static start past the end", r"slice \[40:56\] is out of bounds for dimension 0 of x"),
    ("grid past the end", r"starts at \(program_id\(0\) \* 16\), which can be 48, at or past the end"),
    ("negative start", r"can be -8"),
    ("global to global", r"slice \[32:48\] is out of bounds .* only T.copy between global memory and a shared"),
    ("tile window past the tile", r"out of bounds for dimension 0 of t"),
    ("put", r"slice \[32:48\] is out of bounds for dimension 0 of x"),
    ("element read", r"read x\[.*can be 55; with size 1 it leaves \[0, 40\)"),
    ("atomic", r"slice \[32:48\] is out of bounds"),
])
def test_errors_that_stay(case, match):
    def body(x, y):
        t = T.alloc_shared((16, 16), jnp.float32)
        bx = T.program_id(0)
        if case == "static start past the end":
            T.copy(x[40:56, :], t)
        elif case == "grid past the end":
            T.copy(x[T.ds(bx * 16, 16), :], t)
        elif case == "negative start":
            T.copy(x[T.ds(bx * 16 - 8, 16), :], t)
        elif case == "global to global":
            T.copy(x[32:48, :], y[0:16, :])
        elif case == "tile window past the tile":
            T.copy(x[0:16, :], t[8:24, :])
        elif case == "put":
            T.putmem_block(y[0:16, :], x[32:48, :], pe=0)
        elif case == "element read":
            for i, j in T.Parallel(16, 16):
                t[i, j] = x[T.ds(32, 16), :][i + 8, j]
        elif case == "atomic":
            T.atomic_add(y[32:48, :], t)

    with pytest.raises(ts.KernelTraceError, match=match) as info:
        _trace(body, (40, 16), grid=(4,))
    assert "test_ragged.py" in str(info.value)  # the user's line
