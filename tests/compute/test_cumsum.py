"""T.cumsum (TileLang's prefix sum) through the interpreter, against a sequential reference (each
add rounded in the accumulation type, each prefix rounded to the destination's dtype) and
jax.lax.cumsum, on fresh random data; and its errors. tests/codegen/test_tile_ops_nvcc.py builds
the same kernels with nvcc."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_tilescale as ts
from jax_tilescale import language as T
from jax_tilescale.errors import KernelTraceError
from jax_tilescale.ir import format_kernel, verify_kernel
from jax_tilescale.language.tracing import trace_kernel
from tests.compute.test_elementwise import BF16, rand, run1

SDS = jax.ShapeDtypeStruct
F32, I32 = np.dtype(np.float32), np.dtype(np.int32)
M, N, BLOCKS = 37, 53, 2


def cumsum_tiles(dtype, out_dtype, dim, reverse, inplace, m=M, n=N):
    """Each block loads its m x n rows into a shared tile and writes their prefix sums along `dim`
    (in place, or into a fragment of `out_dtype`) to the output."""

    def cumsum_tiles(x, y):
        rows = T.ds(T.program_id(0) * m, m)
        s = T.alloc_shared((m, n), dtype)
        T.copy(x[rows, :], s)
        if inplace:
            T.cumsum(s, dim=dim, reverse=reverse)
            T.copy(s, y[rows, :])
        else:
            f = T.alloc_fragment((m, n), out_dtype)
            T.cumsum(s, f, dim=dim, reverse=reverse)
            T.copy(f, y[rows, :])

    return cumsum_tiles


def cumsum_slice(x, y):
    """The prefix sums of a window of the tile, from the end: the rest of the tile is unchanged."""
    s = T.alloc_shared((M, N), F32)
    T.copy(x, s)
    T.cumsum(s[3:20, 5:40], dim=1, reverse=True)
    T.copy(s, y)


def sequential_cumsum(x: np.ndarray, dim: int, reverse: bool, out_dtype) -> np.ndarray:
    """The reference: one running sum per line, added in order in the accumulation type (numpy
    scalars round every add), each prefix converted to `out_dtype` when stored."""
    acc = np.float32 if x.dtype.kind == "f" or x.dtype == BF16 else np.int64
    a = np.moveaxis(x.astype(acc), dim, -1)
    out = np.empty(a.shape, out_dtype)
    n = a.shape[-1]
    for line in np.ndindex(a.shape[:-1]):
        total = acc(0)
        for k in (range(n - 1, -1, -1) if reverse else range(n)):
            total = acc(total + a[(*line, k)])
            out[(*line, k)] = np.asarray(total).astype(out_dtype)
    return np.moveaxis(out, -1, dim)


def _run(body, x, out_dtype):
    k = ts.kernel(out_shape=SDS(x.shape, out_dtype), grid=(x.shape[0] // M,))(body)
    (got,) = run1(k, x)
    return got


def _per_block(x, dim, reverse, out_dtype):
    return np.concatenate([sequential_cumsum(x[b * M:(b + 1) * M], dim, reverse, out_dtype) for b in range(BLOCKS)])


CASES = [  # (tile dtype, destination dtype, in place)
    (F32, F32, True), (np.dtype(np.float16), np.dtype(np.float16), True), (BF16, F32, False),
    (np.dtype(np.float16), F32, False), (I32, I32, True),
]


@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reverse"])
@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("dtype, out_dtype, inplace", CASES,
                         ids=[f"{np.dtype(a).name}-{np.dtype(b).name}-{'inplace' if c else 'to_fragment'}"
                              for a, b, c in CASES])
def test_cumsum_matches_a_sequential_reference_bit_for_bit(dtype, out_dtype, inplace, dim, reverse):
    rng = np.random.default_rng(7 + dim + 10 * reverse)
    if dtype == I32:
        x = rng.integers(-1000, 1000, (BLOCKS * M, N)).astype(I32)
    else:
        x = rand(rng, (BLOCKS * M, N), dtype)
    got = _run(cumsum_tiles(dtype, out_dtype, dim, reverse, inplace), x, out_dtype)
    want = _per_block(x, dim % 2, reverse, out_dtype)
    np.testing.assert_array_equal(got, want)
    if out_dtype == F32:  # and within float32 rounding of another implementation's sums
        lax = np.concatenate([np.asarray(jax.lax.cumsum(jnp.asarray(x[b * M:(b + 1) * M].astype(F32)), axis=dim % 2,
                                                        reverse=reverse)) for b in range(BLOCKS)])
        np.testing.assert_allclose(got, lax, rtol=1e-5, atol=1e-5 * max(M, N))


def test_cumsum_of_a_window_leaves_the_rest_of_the_tile_alone():
    x = rand(np.random.default_rng(3), (M, N), F32)
    (got,) = run1(ts.kernel(out_shape=SDS((M, N), F32), grid=(1,))(cumsum_slice), x)
    want = x.copy()
    want[3:20, 5:40] = sequential_cumsum(x[3:20, 5:40], 1, True, F32)
    np.testing.assert_array_equal(got, want)


# ---- the IR and its errors -------------------------------------------------------------------------


def trace(fn, inputs=(((M, N), F32),), outputs=(((M, N), F32),), threads=128):
    return verify_kernel(trace_kernel(fn, name="k", inputs=list(inputs), outputs=list(outputs), grid=(1,),
                                      threads=threads, mesh_axes=("x",), num_pes=1))


def test_cumsum_prints_its_operands():
    text = format_kernel(trace(cumsum_slice))
    assert "cumsum(s[3 +: 17, 5 +: 35] -> s[3 +: 17, 5 +: 35], dim=1, reverse=True)" in text


def _shared(shape=(M, N), dtype=F32):
    return T.alloc_shared(shape, dtype)


@pytest.mark.parametrize("body, message", [
    (lambda x, y: T.cumsum(_shared(), _shared((M, N - 1))), r"dst has the shape of src"),
    (lambda x, y: T.cumsum(_shared(), dim=2), r"dim=2 is not a dimension"),
    (lambda x, y: T.cumsum(x), r"the src x is a input buffer; cumsum works on on-chip tiles"),
    (lambda x, y: T.cumsum(_shared(), y), r"the dst y is a output buffer"),
    (lambda x, y: T.cumsum(_shared((M, N), np.bool_)), r"cumsum: the src smem is bool"),
    (lambda x, y: T.cumsum(_shared(), dim=1.0), r"T.cumsum: dim must be an int"),
])
def test_cumsum_errors_name_the_line(body, message):
    with pytest.raises(KernelTraceError, match=message) as info:
        trace(body)
    assert "test_cumsum.py:" in str(info.value)


def test_cumsum_between_different_slices_of_one_tile_is_refused():
    def k(x, y):
        s = _shared()
        T.cumsum(s[0:10, :], s[10:20, :], dim=1)

    with pytest.raises(KernelTraceError, match="different slices of s; cumsum works in place"):
        trace(k)


def test_cumsum_is_a_block_statement():
    """It needs every thread of the block: not in a thread-dependent branch, not in a Parallel body."""
    def in_branch(x, y):
        s = _shared()
        with T.If(T.thread_id() < 4):
            T.cumsum(s)

    def in_parallel(x, y):
        s = _shared()
        for _i in T.Parallel(4):
            T.cumsum(s)

    with pytest.raises(KernelTraceError, match="cumsum needs the whole block, but it is inside the thread-dependent"):
        trace(in_branch)
    with pytest.raises(KernelTraceError, match=r"T\.cumsum inside the T\.Parallel"):
        trace(in_parallel)
