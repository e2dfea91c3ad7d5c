"""T.reduce_sum / reduce_max / reduce_min / reduce_absmax through the interpreter, against
jax.numpy on fresh random data (float32, float16, bfloat16 tiles, ragged 37x53), and their errors."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_tilescale as ts
from jax_tilescale import language as T
from tests.compute.test_elementwise import BF16, DTYPES, IDS, rand, run1

SDS = jax.ShapeDtypeStruct
REDUCE = {
    "sum": (T.reduce_sum, lambda x, d: jnp.sum(x, axis=d)),
    "max": (T.reduce_max, lambda x, d: jnp.max(x, axis=d)),
    "min": (T.reduce_min, lambda x, d: jnp.min(x, axis=d)),
    "absmax": (T.reduce_absmax, lambda x, d: jnp.max(jnp.abs(x), axis=d)),
}
COMBINE = {"sum": jnp.add, "max": jnp.maximum, "min": jnp.minimum, "absmax": jnp.maximum}


@pytest.mark.parametrize("dim", [1, 0, -1])
@pytest.mark.parametrize("kind", list(REDUCE))
@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_reduce_of_a_ragged_tile_into_float32(dtype, kind, dim):
    """A 37x53 shared tile of `dtype` reduced along `dim` into a float32 fragment (computed in
    float32): max/min/absmax exactly jnp's, sums within float32 rounding of a different order."""
    m, n = 37, 53
    fn, ref = REDUCE[kind]
    out = (m,) if dim % 2 == 1 else (n,)

    @ts.kernel(out_shape=SDS(out, jnp.float32), grid=(1,))
    def k(x, y):
        s = T.alloc_shared((m, n), dtype)
        r = T.alloc_fragment(out, jnp.float32)
        T.copy(x, s)
        fn(s, r, dim=dim)
        T.copy(r, y)

    x = rand(np.random.default_rng(30 + dim), (m, n), dtype)
    (got,) = run1(k, x)
    want = np.asarray(ref(jnp.asarray(x.astype(np.float32)), dim))
    if kind == "sum":
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(x.astype(np.float32)).sum() / n)
    else:
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("kind", list(REDUCE))
@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_reduce_without_clear_combines_with_the_old_value_and_rounds_to_the_dtype(dtype, kind):
    """clear=False: dst = dst op reduce(src); dst of the source dtype gets the float32 result
    rounded once (to nearest even)."""
    m, n = 24, 40
    fn, ref = REDUCE[kind]

    @ts.kernel(out_shape=SDS((m,), dtype), grid=(1,))
    def k(x, init, y):
        f = T.alloc_fragment((m, n), dtype)
        r = T.alloc_fragment((m,), dtype)
        T.copy(x, f)
        T.copy(init, r)
        fn(f, r, dim=1, clear=False)
        T.copy(r, y)

    rng = np.random.default_rng(40)
    x, init = rand(rng, (m, n), dtype), rand(rng, (m,), dtype)
    (got,) = run1(k, x, init)
    want = COMBINE[kind](jnp.asarray(init.astype(np.float32)), ref(jnp.asarray(x.astype(np.float32)), 1))
    want = np.asarray(want.astype(dtype)).astype(np.float32)
    if kind == "sum":
        ulp = {np.dtype(np.float32): 2.0**-21, np.dtype(np.float16): 2.0**-10, BF16: 2.0**-7}[np.dtype(dtype)]
        np.testing.assert_allclose(got.astype(np.float32), want, rtol=ulp, atol=ulp * np.abs(x).astype(float).sum() / m)
    else:
        np.testing.assert_array_equal(got.astype(np.float32), want)


def test_reduce_middle_dimension_of_3d_tile_into_keepdims_shape_and_slices():
    """A [4, 6, 5] tile reduced along dim 1 into a [4, 1, 5] region of a bigger fragment; a slice
    of a tile reduced into a slice."""
    @ts.kernel(out_shape=(SDS((4, 1, 5), jnp.float32), SDS((3,), jnp.float32)), grid=(1,))
    def k(x, y, z):
        s = T.alloc_shared((4, 6, 5), jnp.float32)
        r = T.alloc_fragment((4, 2, 5), jnp.float32)
        part = T.alloc_fragment((8,), jnp.float32)
        T.copy(x, s)
        T.reduce_sum(s, r[:, 1:2, :], dim=1)
        T.copy(r[:, 1:2, :], y)
        T.reduce_max(s[1:4, 2, :], part[2:5], dim=2)  # the slice keeps rank 3: [3, 1, 5]
        T.copy(part[2:5], z)

    x = rand(np.random.default_rng(41), (4, 6, 5), np.float32)
    y, z = run1(k, x)
    np.testing.assert_allclose(y, x.sum(axis=1, keepdims=True), rtol=1e-6)
    np.testing.assert_array_equal(z, x[1:4, 2, :].max(axis=1))


def test_integer_sum_is_exact_and_wraps():
    @ts.kernel(out_shape=SDS((16,), jnp.int32), grid=(1,))
    def k(x, y):
        s = T.alloc_shared((16, 64), jnp.int32)
        r = T.alloc_fragment((16,), jnp.int32)
        T.copy(x, s)
        T.reduce_sum(s, r, dim=1)
        T.copy(r, y)

    x = np.random.default_rng(42).integers(-2**30, 2**30, (16, 64)).astype(np.int32)
    (got,) = run1(k, x)
    np.testing.assert_array_equal(got, x.astype(np.int64).sum(axis=1).astype(np.int32))


def test_max_propagates_nan_of_unwritten_elements():
    """An element nobody wrote holds NaN in the interpreter; reduce_max and T.max keep it visible
    (jnp.max's NaN propagation), so the coverage check's NaN is not silently dropped."""
    @ts.kernel(out_shape=SDS((4,), jnp.float32), grid=(1,))
    def k(x, y):
        f = T.alloc_fragment((4, 8), jnp.float32)
        r = T.alloc_fragment((4,), jnp.float32)
        T.copy(x[:, 0:7], f[:, 0:7])  # column 7 never written
        T.reduce_max(f, r, dim=1)
        for i in T.Parallel(4):
            y[i] = T.max(r[i], 0.0)

    (got,) = run1(k, rand(np.random.default_rng(43), (4, 8), np.float32))
    assert np.isnan(got).all()


@pytest.mark.parametrize("name,match", [
    ("wrong_shape", r"gives \[8\], but"),
    ("bad_dim", "dim=2 is not a dimension"),
    ("global_src", "on-chip tiles"),
    ("bool_tile", "works on numbers"),
    ("same_buffer", "same buffer"),
])
def test_bad_reductions_are_trace_errors(name, match):
    def wrong_shape(x, y):
        f = T.alloc_fragment((8, 16), jnp.float32)
        T.reduce_sum(f, T.alloc_fragment((16,), jnp.float32), dim=1)

    def bad_dim(x, y):
        T.reduce_sum(T.alloc_fragment((8, 16), jnp.float32), T.alloc_fragment((8,), jnp.float32), dim=2)

    def global_src(x, y):
        T.reduce_max(x, T.alloc_fragment((16,), jnp.float32), dim=1)

    def bool_tile(x, y):
        T.reduce_max(T.alloc_fragment((8, 16), jnp.bool_), T.alloc_fragment((8,), jnp.bool_), dim=1)

    def same_buffer(x, y):
        f = T.alloc_fragment((8, 8), jnp.float32)
        T.reduce_sum(f, f[:, 0:1], dim=1)

    kern = ts.kernel(locals()[name], out_shape=SDS((16, 16), jnp.float32), grid=(1,))
    with pytest.raises(ts.KernelTraceError, match=match) as info:
        kern.trace(SDS((16, 16), jnp.float32))
    assert "test_reductions.py:" in str(info.value)
