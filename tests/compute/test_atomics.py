"""T.atomic_add / atomic_max / atomic_min through the interpreter: exact accumulation from many
iterations, blocks and (PE-local) launches, the race detector's view of atomics (never racing with
atomics, racing with plain accesses), waits on atomic counters, and the errors."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_tilescale as ts
from jax_tilescale import language as T
from tests.compute.test_elementwise import BF16, rand, run1
from tests.primitives.util import mesh_of, shard_run

SDS = jax.ShapeDtypeStruct


def test_histogram_from_many_blocks_into_symmetric_scratch():
    """Every iteration of every block adds 1 to a bin (collisions within a Parallel and across
    blocks): counts are exact, and no race is reported between the atomics."""
    n, bins, blocks = 64, 10, 4

    @ts.kernel(out_shape=SDS((blocks, bins), jnp.int32), grid=(blocks,))
    def k(idx, hist):
        bx = T.program_id(0)
        acc = T.alloc_symmetric((bins,), jnp.int32)  # zero at launch
        for i in T.Parallel(n):
            T.atomic_add(acc[idx[bx, i]], 1)
        T.barrier_all()
        for b in T.Parallel(bins):
            hist[bx, b] = acc[b]  # every block's copy of the result

    idx = np.random.default_rng(50).integers(0, bins, (blocks, n)).astype(np.int32)
    (got,) = run1(k, idx)
    np.testing.assert_array_equal(got, np.tile(np.bincount(idx.reshape(-1), minlength=bins), (blocks, 1)))


@pytest.mark.parametrize("dtype", [np.float32, np.float16, BF16, np.int32, np.uint32],
                         ids=["f32", "f16", "bf16", "i32", "u32"])
def test_atomic_add_max_min_of_every_dtype(dtype):
    """Small integer-valued data, so sums are exact in any order, in every dtype: the atomics agree
    with numpy's add.at / maximum.at / minimum.at."""
    n, slots = 96, 6

    @ts.kernel(out_shape=(SDS((slots,), dtype), SDS((slots,), dtype), SDS((slots,), dtype)), grid=(1,))
    def k(v, s, init, add, mx, mn):
        a = T.alloc_shared((slots,), dtype)
        b = T.alloc_shared((slots,), dtype)
        c = T.alloc_shared((slots,), dtype)
        for j in T.Parallel(slots):
            a[j] = init[j]
            b[j] = init[j]
            c[j] = init[j]
        for i in T.Parallel(n):
            T.atomic_add(a[s[i]], v[i])
            T.atomic_max(b[s[i]], v[i])
            T.atomic_min(c[s[i]], v[i])
        T.copy(a, add)
        T.copy(b, mx)
        T.copy(c, mn)

    rng = np.random.default_rng(51)
    signed = np.dtype(dtype).kind != "u"
    v = rng.integers(-8 if signed else 1, 9, n).astype(dtype)
    s = rng.integers(0, slots, n).astype(np.int32)
    init = rng.integers(1, 5, slots).astype(dtype)
    add, mx, mn = run1(k, v, s, init)
    want = [init.copy() for _ in range(3)]
    np.add.at(want[0], s, v)
    np.maximum.at(want[1], s, v)
    np.minimum.at(want[2], s, v)
    for g, w in zip((add, mx, mn), want):
        np.testing.assert_array_equal(g.astype(np.float64), w.astype(np.float64))


def test_float_atomics_round_at_every_update():
    """Each atomic update rounds to the element's dtype: 2048 + 1 in float16 stays 2048, every time."""
    @ts.kernel(out_shape=SDS((1,), jnp.float16), grid=(1,))
    def k(x, y):
        a = T.alloc_shared((1,), jnp.float16)
        a[0] = 2048.0
        for i in T.Parallel(8):
            T.atomic_add(a[0], x[i])
        T.copy(a, y)

    (got,) = run1(k, np.ones(8, np.float16))
    assert got[0] == 2048


def test_region_atomics_from_every_block_and_pe():
    """T.atomic_add(C[rows, :], frag): each block adds its fragment into the same symmetric
    accumulator (and atomic_max into another, zero at launch); on every PE the sum (exact: integer
    values) and the max over its blocks."""
    blocks, m, n = 3, 8, 16

    @ts.kernel(out_shape=(SDS((blocks * m, n), jnp.float32), SDS((blocks * m, n), jnp.float32)), grid=(blocks,))
    def k(x, y, z):
        bx = T.program_id(0)
        acc = T.alloc_symmetric((m, n), jnp.float32)
        top = T.alloc_symmetric((m, n), jnp.float32)
        frag = T.alloc_fragment((m, n), jnp.float32)
        T.copy(x[T.ds(bx * m, m), :], frag)
        T.atomic_add(acc[:, :], frag)
        T.atomic_max(top, frag)
        T.barrier_all()
        for i, j in T.Parallel(m, n):
            y[bx * m + i, j] = acc[i, j]  # every block's copy
            z[bx * m + i, j] = top[i, j]

    rng = np.random.default_rng(52)
    x = rng.integers(-4, 5, (2, blocks * m, n)).astype(np.float32)
    y, z = shard_run(k, mesh_of((2,)), x.reshape(2 * blocks * m, n))
    y, z = np.asarray(y).reshape(2, blocks, m, n), np.asarray(z).reshape(2, blocks, m, n)
    for pe in range(2):
        tiles = x[pe].reshape(blocks, m, n)
        for b in range(blocks):
            np.testing.assert_array_equal(y[pe, b], tiles.sum(axis=0))
            np.testing.assert_array_equal(z[pe, b], np.maximum(tiles.max(axis=0), 0))


def test_atomic_and_plain_write_from_another_block_race():
    """Block 0 writes acc[0] plainly, every block adds to it atomically: block 1's atomic races with
    block 0's write (the atomics of the two blocks do not race with each other)."""
    @ts.kernel(out_shape=SDS((2,), jnp.float32), grid=(2,))
    def k(x, y):
        bx = T.program_id(0)
        acc = T.alloc_symmetric((2,), jnp.float32)
        acc[bx] = x[bx]
        T.atomic_add(acc[0], 1.0)
        T.barrier_all()
        y[bx] = acc[bx]

    with pytest.raises(ts.RaceError, match=r"data race on PE 0's symmetric buffer acc: elements acc\[0\].*"
                                        r"\n  write of acc\[0\].*block \(0,\).*\n  atomic update of acc\[0\].*"
                                        r"block \(1,\)"):
        run1(k, rand(np.random.default_rng(53), (2,), np.float32))


def test_plain_read_of_an_element_other_iterations_update_atomically_is_a_race():
    @ts.kernel(out_shape=SDS((8,), jnp.float32), grid=(1,))
    def k(x, y):
        s = T.alloc_shared((8,), jnp.float32)
        T.copy(x, s)
        for i in T.Parallel(8):
            T.atomic_add(s[0], x[i])
            y[i] = s[i]

    with pytest.raises(ts.RaceError, match=r"data race in the T.Parallel .*s\[0\].*updates atomically"):
        run1(k, rand(np.random.default_rng(54), (8,), np.float32))


def test_blocks_wait_for_an_atomic_counter():
    """Atomics on a symmetric word wake a wait on it: every block arrives (atomic_add), then waits
    until all have (wait_ge); the interpreter schedules the waiters and finishes."""
    blocks = 4

    @ts.kernel(out_shape=SDS((blocks,), jnp.int32), grid=(blocks,))
    def k(x, y):
        bx = T.program_id(0)
        counter = T.alloc_symmetric((1,), jnp.int32)
        T.atomic_add(counter[0], 1)
        T.wait_ge(counter[0], blocks)
        y[bx] = x[bx] + 1

    x = np.arange(blocks, dtype=np.int32) + 5
    (got,) = run1(k, x)
    np.testing.assert_array_equal(got, x + 1)


def test_element_stores_and_atomics_in_thread_dependent_branches_run_per_thread():
    """Inside `if tx < k:` (per-thread code) an element atomic runs once per thread of the branch,
    an element store by the thread that takes it."""
    @ts.kernel(out_shape=SDS((4,), jnp.float32), grid=(1,), threads=64)
    def k(x, y):
        tx = T.thread_id()
        for i in T.Parallel(4):
            y[i] = x[i]
        with T.If(tx < 5):
            T.atomic_add(y[0], x[3])
        with T.If(tx == 33):
            y[1] = x[2] * 2.0

    x = rand(np.random.default_rng(55), (4,), np.float32)
    (got,) = run1(k, x)
    want = x.copy()
    for _ in range(5):
        want[0] = np.float32(want[0] + x[3])
    want[1] = x[2] * 2
    np.testing.assert_array_equal(got, want)


def test_per_thread_atomic_of_a_register_value():
    """Each thread of the branch adds its own register (tx + 1): 1 + 2 + 3 on top of y[0]."""
    @ts.kernel(out_shape=SDS((4,), jnp.float32), grid=(1,), threads=32)
    def k(x, y):
        tx = T.thread_id()
        r = T.alloc_var(jnp.int32)
        r = tx + 1
        for i in T.Parallel(4):
            y[i] = x[i]
        with T.If(tx < 3):
            T.atomic_add(y[0], r * 1.0)

    x = np.arange(4, dtype=np.float32) + 1.5
    (got,) = run1(k, x)
    np.testing.assert_array_equal(got, np.array([1.5 + 6, 2.5, 3.5, 4.5], np.float32))


@pytest.mark.parametrize("name,match", [
    ("on_input", "atomics update local memory"),
    ("on_fragment", "atomics update local memory"),
    ("int8", "is int8; atomics update"),
    ("bool_value", "is bool"),
    ("shape", "shapes differ"),
    ("region_with_number", "has 16 elements"),
])
def test_bad_atomics_are_trace_errors(name, match):
    def on_input(x, y):
        for i in T.Parallel(16):
            T.atomic_add(x[i, 0], 1.0)

    def on_fragment(x, y):
        f = T.alloc_fragment((16,), jnp.float32)
        for i in T.Parallel(16):
            T.atomic_add(f[i], 1.0)

    def int8(x, y):
        s = T.alloc_shared((16,), jnp.int8)
        for i in T.Parallel(16):
            T.atomic_add(s[i], 1)

    def bool_value(x, y):
        for i in T.Parallel(16):
            T.atomic_max(y[i, 0], x[i, 0] > 0)

    def shape(x, y):
        T.atomic_add(y[0:4, :], T.alloc_fragment((8, 16), jnp.float32))

    def region_with_number(x, y):
        T.atomic_add(y[0, :], 1.0)

    kern = ts.kernel(locals()[name], out_shape=SDS((16, 16), jnp.float32), grid=(1,))
    with pytest.raises(ts.KernelTraceError, match=match) as info:
        kern.trace(SDS((16, 16), jnp.float32))
    assert "test_atomics.py:" in str(info.value)
