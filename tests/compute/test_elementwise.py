"""T.Parallel and typed element values through the interpreter on a simulated CPU device, against
jax.numpy on fresh random data (float32, float16, bfloat16; ragged 37x53 tiles), plus the errors
for bad kernels."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import jax_tilescale as ts
from jax_tilescale import language as T
from jax_tilescale.ir.tile_ops import Parallel, Store
from jax_tilescale.ir.values import FLOAT32, INT64, BinaryKind
from tests.primitives.util import mesh_of, shard_run

BF16 = np.dtype(ml_dtypes.bfloat16)
DTYPES = [np.dtype(np.float32), np.dtype(np.float16), BF16]
IDS = ["f32", "f16", "bf16"]
SHAPES = [(37, 53), (16, 32)]
SDS = jax.ShapeDtypeStruct


def run1(kern, *inputs) -> list[np.ndarray]:
    """One PE, every input and output whole."""
    return [np.asarray(o) for o in shard_run(kern, mesh_of((1,)), *inputs)]


def rand(rng, shape, dtype, lo=None) -> np.ndarray:
    """Random data without zeros (a zero could hide an unwritten element); `lo` for positive data."""
    x = rng.standard_normal(shape)
    x = np.where(np.abs(x) < 0.1, x + 0.5, x)
    if lo is not None:
        x = np.abs(x) + lo
    return x.astype(dtype)


def f32(x) -> jnp.ndarray:
    return jnp.asarray(np.asarray(x).astype(np.float32))


def assert_close(got, want, dtype, ulps=0):
    """Equal, or within `ulps` units in the last place of `dtype` (relative)."""
    got = np.asarray(got).astype(np.float64)
    want = np.asarray(want).astype(np.float64)
    assert got.shape == want.shape
    assert not np.isnan(got).any()
    eps = {np.dtype(np.float32): 2.0**-23, np.dtype(np.float16): 2.0**-10, BF16: 2.0**-7}[np.dtype(dtype)]
    np.testing.assert_allclose(got, want, rtol=ulps * eps, atol=0)


# ---- the brief's example and arithmetic -----------------------------------------------------------


@pytest.mark.parametrize("shape", SHAPES, ids=["37x53", "16x32"])
@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_scaled_sum_of_shared_and_fragment(dtype, shape):
    """C_frag[i, j] = A_s[i, j] * 2 + B_frag[i, j]: bf16 * 2 + bf16 computes in float32 and rounds
    once, on the store into the dtype fragment (exactly jnp in float32, then astype)."""
    m, n = shape

    @ts.kernel(out_shape=SDS(shape, dtype), grid=(1,))
    def k(a, b, c):
        a_s = T.alloc_shared(shape, dtype)
        b_frag = T.alloc_fragment(shape, dtype)
        c_frag = T.alloc_fragment(shape, dtype)
        T.copy(a, a_s)
        T.copy(b, b_frag)
        for i, j in T.Parallel(m, n):
            c_frag[i, j] = a_s[i, j] * 2 + b_frag[i, j]
        T.copy(c_frag, c)

    rng = np.random.default_rng(10)
    a, b = rand(rng, shape, dtype), rand(rng, shape, dtype)
    (got,) = run1(k, a, b)
    want = (f32(a) * 2 + f32(b)).astype(dtype)
    np.testing.assert_array_equal(got.astype(np.float32), np.asarray(want).astype(np.float32))


BINARY = {
    "add": (lambda x, y: x + y, lambda x, y: x + y),
    "sub": (lambda x, y: x - y, lambda x, y: x - y),
    "mul": (lambda x, y: x * y, lambda x, y: x * y),
    "div": (lambda x, y: x / y, lambda x, y: x / y),
    "max": (T.max, jnp.maximum),
    "min": (T.min, jnp.minimum),
    "rsub_const": (lambda x, y: 1.5 - x, lambda x, y: 1.5 - x),
    "neg_mul": (lambda x, y: -x * y, lambda x, y: -x * y),
}


@pytest.mark.parametrize("op", list(BINARY))
@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_binary_ops_in_float32_out_of_global_memory(op, dtype):
    """Element reads of global inputs, a float32 result written straight to a global output:
    + - * / max min are IEEE float32 operations (exact against jnp in float32)."""
    fn, ref = BINARY[op]
    m, n = 37, 53

    @ts.kernel(out_shape=SDS((m, n), jnp.float32), grid=(1,))
    def k(x, y, out):
        for i, j in T.Parallel(m, n):
            out[i, j] = fn(x[i, j], y[i, j])

    rng = np.random.default_rng(11)
    x, y = rand(rng, (m, n), dtype), rand(rng, (m, n), dtype)
    (got,) = run1(k, x, y)
    np.testing.assert_array_equal(got, np.asarray(ref(f32(x), f32(y))))


UNARY = {
    "exp": (T.exp, jnp.exp, None, 4),
    "exp2": (T.exp2, jnp.exp2, None, 4),
    "log": (T.log, jnp.log, 0.2, 4),
    "abs": (T.abs, jnp.abs, None, 0),
    "builtin_abs": (abs, jnp.abs, None, 0),
    "neg": (lambda v: -v, jnp.negative, None, 0),
    # a float32 constant (a bare 1.44... next to a 16-bit value would take that value's dtype)
    "exp_of_scaled": (lambda v: T.exp2(v * T.cast(1.4426950408889634, "float32")),
                      lambda v: jnp.exp2(v * np.float32(1.4426950408889634)), None, 4),
}


@pytest.mark.parametrize("op", list(UNARY))
@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_unary_ops_store_rounded_to_the_dtype(op, dtype):
    """Computed in float32 and stored into a tile of the input's dtype (rounded to nearest even):
    within a few float32 ulps of jnp for exp/exp2/log before the rounding, so within one ulp of the
    dtype after it (exactly equal for float32 +-abs)."""
    fn, ref, lo, ulps = UNARY[op]
    m, n = 37, 53

    @ts.kernel(out_shape=SDS((m, n), dtype), grid=(1,))
    def k(x, out):
        s = T.alloc_shared((m, n), dtype)
        T.copy(x, s)
        for i, j in T.Parallel(m, n):
            s[i, j] = fn(s[i, j])
        T.copy(s, out)

    rng = np.random.default_rng(12)
    x = rand(rng, (m, n), dtype, lo=lo)
    (got,) = run1(k, x)
    want = np.asarray(ref(f32(x))).astype(dtype)
    assert_close(got, want, dtype, ulps=ulps if dtype == np.float32 else (1 if ulps else 0))


def test_where_compare_cast_and_index_values():
    """T.where on value and index conditions, comparisons, T.cast (round to nearest even, truncation
    toward zero), index expressions used as numbers, and int -> float conversion on store."""
    m, n = 37, 53

    @ts.kernel(out_shape=(SDS((m, n), jnp.float32), SDS((m, n), jnp.bfloat16), SDS((m, n), jnp.int32),
                          SDS((m, n), jnp.float32)), grid=(1,))
    def k(x, sel, rounded, trunc, idx):
        for i, j in T.Parallel(m, n):
            sel[i, j] = T.where((x[i, j] > 0) & (i < j), x[i, j] * 3, T.where(i == j, -1.0, x[i, j]))
            rounded[i, j] = T.cast(x[i, j] * 100, "bfloat16")
            trunc[i, j] = T.cast(x[i, j] * 100, jnp.int32)
            idx[i, j] = i * n + j + T.cast(x[i, j] < 0, "float32") * 0.5

    rng = np.random.default_rng(13)
    x = rand(rng, (m, n), np.float32)
    sel, rounded, trunc, idx = run1(k, x)
    ii, jj = np.meshgrid(np.arange(m), np.arange(n), indexing="ij")
    xj = jnp.asarray(x)
    want = jnp.where((xj > 0) & (ii < jj), xj * 3, jnp.where(ii == jj, -1.0, xj))
    np.testing.assert_array_equal(sel, np.asarray(want))
    np.testing.assert_array_equal(rounded.view(np.uint16), np.asarray((xj * 100).astype(jnp.bfloat16)).view(np.uint16))
    np.testing.assert_array_equal(trunc, np.asarray(jnp.trunc(xj * 100).astype(jnp.int32)))
    np.testing.assert_array_equal(idx, (ii * n + jj + (x < 0) * 0.5).astype(np.float32))


def test_where_evaluates_only_the_chosen_side():
    """A guarded read past the end of a ragged input is never made (no out-of-bounds error), and
    T.ceildiv covers the ragged tail with whole tiles."""
    n, tile = 53, 16
    tiles = T.ceildiv(n, tile)
    assert tiles == 4

    @ts.kernel(out_shape=SDS((tiles * tile,), jnp.float32), grid=(tiles,))
    def k(x, y):
        bx = T.program_id(0)
        for i in T.Parallel(tile):
            g = bx * tile + i
            y[g] = T.where(g < n, x[T.min(g, n - 1)] * 2, 0.0) + T.where(g >= n, 7.0, 0.0)

    rng = np.random.default_rng(14)
    x = rand(rng, (n,), np.float32)
    (got,) = run1(k, x)
    np.testing.assert_array_equal(got[:n], x * 2)
    np.testing.assert_array_equal(got[n:], np.full(tiles * tile - n, 7.0, np.float32))


def test_ceildiv_of_index_expressions_matches_python():
    @ts.kernel(out_shape=SDS((2, 8), jnp.int32), grid=(2,))
    def k(x, y):
        bx = T.program_id(0)
        for j in T.Parallel(8):
            y[bx, j] = T.ceildiv(j - 3 * bx, 3) + x[bx, j] * 0

    x = np.ones((2, 8), np.int32)
    (got,) = run1(k, x)
    want = np.array([[-(-(j - 3 * b) // 3) for j in range(8)] for b in range(2)])
    np.testing.assert_array_equal(got, want)


def test_grid_of_blocks_writes_global_tiles_and_serial_loop_in_parallel():
    """Each block handles a row tile of a global output directly (program ids in the indices); a
    T.serial loop inside the Parallel body accumulates a row sum per iteration in order."""
    m, n, bm = 40, 24, 8

    @ts.kernel(out_shape=(SDS((m, n), jnp.float32), SDS((m,), jnp.float32)), grid=(m // bm,))
    def k(x, y, rowsum):
        bx = T.program_id(0)
        acc = T.alloc_fragment((bm,), jnp.float32)
        for i, j in T.Parallel(bm, n):
            y[bx * bm + i, j] = x[bx * bm + i, j] * x[bx * bm + i, j] - 1.0
        for i in T.Parallel(bm):
            acc[i] = 0.0
            for c in T.serial(n):
                acc[i] = acc[i] + x[bx * bm + i, c]
            rowsum[bx * bm + i] = acc[i]

    rng = np.random.default_rng(15)
    x = rand(rng, (m, n), np.float32)
    y, rowsum = run1(k, x)
    np.testing.assert_array_equal(y, x * x - 1)
    want = np.zeros(m, np.float32)
    for c in range(n):  # the kernel's order, in float32
        want = (want + x[:, c]).astype(np.float32)
    np.testing.assert_array_equal(rowsum, want)


def test_integer_values_wrap_and_cast():
    """int32 arithmetic computes in int64 and wraps on the store; float -> int8 truncates then wraps."""
    @ts.kernel(out_shape=(SDS((64,), jnp.int32), SDS((64,), jnp.int8)), grid=(1,))
    def k(a, b, out, small):
        for i in T.Parallel(64):
            out[i] = a[i] * b[i] + 7
            small[i] = T.cast(T.cast(a[i], "float32") * 1.5, "int8")

    rng = np.random.default_rng(16)
    a = rng.integers(-2**31, 2**31 - 1, 64, dtype=np.int64).astype(np.int32)
    b = rng.integers(-1000, 1000, 64).astype(np.int32)
    out, small = run1(k, a, b)
    np.testing.assert_array_equal(out, (a.astype(np.int64) * b + 7).astype(np.int32))
    want = np.trunc(a.astype(np.float32) * np.float32(1.5)).astype(np.int64).astype(np.int8)
    np.testing.assert_array_equal(small, want)


def test_type_rules_of_the_value_nodes():
    """bf16 * bf16 is a float32 product; a Python float takes the other operand's type (bf16 next
    to a bf16 element, float32 next to a float32 product or an int); int + int is int64; the IR and
    the printer show it."""
    @ts.kernel(out_shape=(SDS((4, 4), jnp.bfloat16), SDS((4, 4), jnp.float32), SDS((4, 4), jnp.float32)), grid=(1,))
    def k(x, n, y, z, w):
        for i, j in T.Parallel(4, 4):
            y[i, j] = x[i, j] * x[i, j] + 0.1
            z[i, j] = x[i, j] - 0.1
            w[i, j] = T.cast(n[i, j] + 1, "float32") * 0.5 + (i + j) * 2.0

    args = SDS((4, 4), jnp.bfloat16), SDS((4, 4), jnp.int32)
    (par,) = k.trace(*args).body
    assert isinstance(par, Parallel) and par.extents == (4, 4)
    first, second, third = par.body
    assert isinstance(first, Store) and first.value.dtype == FLOAT32
    prod, const = first.value.lhs, first.value.rhs
    assert prod.op is BinaryKind.MUL and prod.dtype == FLOAT32
    assert const.dtype == FLOAT32 and const.value == float(np.float32(0.1))
    assert second.value.dtype == FLOAT32 and second.value.rhs.dtype == BF16
    assert second.value.rhs.value == float(np.float32(0.1).astype(BF16))
    assert third.value.dtype == FLOAT32 and third.value.lhs.lhs.x.dtype == INT64
    text = k.ir_text(*args)
    assert "for i0, i1 in Parallel(4, 4):" in text
    assert "    y[i0, i1] = ((x[i0, i1] * x[i0, i1]) + float32(0.10000000149011612))" in text
    assert "    z[i0, i1] = (x[i0, i1] - bfloat16(0.10009765625))" in text


# ---- races between iterations ---------------------------------------------------------------------


def test_accumulating_into_one_element_from_every_iteration_is_a_race():
    @ts.kernel(out_shape=SDS((1,), jnp.float32), grid=(1,))
    def k(x, y):
        acc = T.alloc_fragment((1,), jnp.float32)
        T.clear(acc)
        for i in T.Parallel(16):
            acc[0] = acc[0] + x[i]
        T.copy(acc, y)

    x = rand(np.random.default_rng(17), (16,), np.float32)
    with pytest.raises(ts.RaceError, match=r"data race in the T.Parallel .* acc\[0\] .*touched by two "
                                        r"iterations") as info:
        run1(k, x)
    assert "iteration (i0=0)" in str(info.value) and "iteration (i0=1)" in str(info.value)


def test_reading_a_neighbour_written_in_the_same_parallel_is_a_race():
    @ts.kernel(out_shape=SDS((16,), jnp.float32), grid=(1,))
    def k(x, y):
        s = T.alloc_shared((16,), jnp.float32)
        T.copy(x, s)
        for i in T.Parallel(15):
            s[i] = s[i + 1] * 2
        T.copy(s, y)

    x = rand(np.random.default_rng(18), (16,), np.float32)
    with pytest.raises(ts.RaceError, match=r"data race in the T.Parallel .*s\[1\]"):
        run1(k, x)


def test_independent_iterations_may_read_what_they_wrote():
    @ts.kernel(out_shape=SDS((8, 8), jnp.float32), grid=(1,))
    def k(x, y):
        f = T.alloc_fragment((8, 8), jnp.float32)
        for i, j in T.Parallel(8, 8):
            f[i, j] = x[i, j] + 1
            f[i, j] = f[i, j] * f[i, j]
            y[i, j] = f[i, j] - x[j, i] * 0  # reading x (an input) anywhere is fine

    x = rand(np.random.default_rng(19), (8, 8), np.float32)
    (got,) = run1(k, x)
    np.testing.assert_array_equal(got, (x + 1) * (x + 1))


# ---- errors -------------------------------------------------------------------------------------


def _trace(body, *shapes, dtype=jnp.float32, out=(16, 16)):
    kern = ts.kernel(body, out_shape=SDS(out, jnp.float32), grid=(1,))
    return kern.trace(*(SDS(s, dtype) for s in shapes))


@pytest.mark.parametrize("name,match", [
    ("static_oob", r"out of bounds|leaves \[0, 16\)|can be 16"),
    ("int_div", "true division needs a float operand"),
    ("floordiv_value", "index arithmetic"),
    ("bool_where", "Python bool"),
    ("where_not_bool", "not a condition"),
    ("store_input", "kernel input|input"),
    ("store_slice", "element stores assign one element"),
    ("copy_in_parallel", "inside the T.Parallel"),
    ("exp_bool", "T.cast it to a number"),
    ("python_if", "Python `if`"),
    ("bad_extent", "positive Python ints"),
    ("bad_cast", "not an element type|not a dtype"),
    ("read_slice", "element-wise code reads one element"),
    ("register_in_parallel", "per-thread register"),
])
def test_bad_element_wise_code_is_a_trace_error_naming_the_line(name, match):
    def static_oob(x, y):
        for i, j in T.Parallel(16, 16):
            y[i, j] = x[i + 1, j]

    def int_div(x, y):
        for i, j in T.Parallel(16, 16):
            y[i, j] = i / j

    def floordiv_value(x, y):
        for i, j in T.Parallel(16, 16):
            y[i, j] = x[i, j] // 2

    def bool_where(x, y):
        for i, j in T.Parallel(16, 16):
            y[i, j] = T.where(i == i, 1.0, x[i, j])

    def where_not_bool(x, y):
        for i, j in T.Parallel(16, 16):
            y[i, j] = T.where(x[i, j], 1.0, 2.0)

    def store_input(x, y):
        for i, j in T.Parallel(16, 16):
            x[i, j] = 1.0

    def store_slice(x, y):
        y[0, :] = 1.0

    def copy_in_parallel(x, y):
        for i in T.Parallel(16):  # noqa: B007
            T.copy(x, y)

    def exp_bool(x, y):
        for i, j in T.Parallel(16, 16):
            y[i, j] = T.exp(x[i, j] > 0)

    def python_if(x, y):
        for i, j in T.Parallel(16, 16):
            v = x[i, j]
            y[i, j] = v if bool(v > 0) else -v

    def bad_extent(x, y):
        for i in T.Parallel(0):  # noqa: B007
            pass

    def bad_cast(x, y):
        for i, j in T.Parallel(16, 16):
            y[i, j] = T.cast(x[i, j], "complex64")

    def read_slice(x, y):
        for i, j in T.Parallel(16, 16):
            y[i, j] = x[i, :] * 2

    def register_in_parallel(x, y):
        r = T.alloc_var(jnp.int32)
        r = 2
        for i, j in T.Parallel(16, 16):
            y[i, j] = x[i, j] * r

    body = locals()[name]
    with pytest.raises(ts.KernelTraceError, match=match) as info:
        _trace(body, (16, 16))
    assert "test_elementwise.py:" in str(info.value)  # the user's line


def test_dynamic_out_of_bounds_read_is_a_runtime_error():
    """An index the verifier cannot bound (from T.load) is checked when the kernel runs."""
    @ts.kernel(out_shape=SDS((8,), jnp.float32), grid=(1,))
    def k(x, off, y):
        for i in T.Parallel(8):
            y[i] = x[i * 2 + T.load(off[0])]

    x = rand(np.random.default_rng(20), (16,), np.float32)
    (got,) = run1(k, x, np.array([1], np.int32))
    np.testing.assert_array_equal(got, x[1::2])
    with pytest.raises(Exception, match=r"out-of-bounds element .* is 16, outside \[0, 16\) at iteration \(i0=7\)"):
        run1(k, x, np.array([2], np.int32))


def test_every_element_wise_name_is_in_the_language():
    names = ("Parallel exp exp2 log max min abs where cast ceildiv reduce_sum reduce_max reduce_min reduce_absmax "
             "atomic_add atomic_max atomic_min").split()
    for n in names:
        assert n in T.__all__ and hasattr(T, n)
        obj = getattr(T, n)
        assert callable(obj) and (obj.__doc__ or "").strip() and obj.__name__ == n
