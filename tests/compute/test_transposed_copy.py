"""`T.copy(src, dst, transpose=True)`: dst[i, j] = src[j, i] from a 2-D on-chip tile, through the interpreter on
simulated CPU devices and through the generic lowering's CUDA on the CPU emulator (sm_90 and sm_80), against numpy on
random data; ragged destinations (the part inside the buffer only), casts, shared and fragment sources; what the IR
records; and the errors for what it does not take. The GEMM lowerings' forms (registers, Hopper's TMA epilogue) are
checked in tests/codegen (test_gemm_sm90_emulated.py, test_gemm_sm80.py) and on the GPU (tests/gpu)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import jax_tilescale as ts
from jax_tilescale import language as T
from jax_tilescale.codegen import generate_cuda
from jax_tilescale.errors import KernelTraceError
from jax_tilescale.ir.nodes import Copy, walk_stmts
from tests.codegen import emulator
from tests.codegen.gemm_cases import np_dtype
from tests.primitives.util import mesh_of, shard_run

BF16 = np.dtype(ml_dtypes.bfloat16)
S = jax.ShapeDtypeStruct


def transposing_kernel(m: int, n: int, bm: int, bn: int, src_kind: str, out_dtype):
    """C (m x n, out_dtype) = At^T, At (n x m, float32): each block loads a bn x bm tile of At into a `src_kind` tile
    (a fragment, or a shared tile of the output's dtype) and stores it transposed into C's bm x bn tile."""

    @ts.kernel(out_shape=S((m, n), out_dtype), grid=(T.ceildiv(n, bn), T.ceildiv(m, bm)), threads=128)
    def transpose_tiles(At, C):
        bx, by = T.program_id(0), T.program_id(1)
        if src_kind == "fragment":
            tile = T.alloc_fragment((bn, bm), jnp.float32)
        else:
            tile = T.alloc_shared((bn, bm), out_dtype)
            staged = T.alloc_fragment((bn, bm), jnp.float32)
            T.copy(At[T.ds(bx * bn, bn), T.ds(by * bm, bm)], staged)
        T.copy(At[T.ds(bx * bn, bn), T.ds(by * bm, bm)], staged if src_kind == "shared" else tile)
        if src_kind == "shared":
            T.copy(staged, tile)  # the cast to the output's dtype
        T.copy(tile, C[T.ds(by * bm, bm), T.ds(bx * bn, bn)], transpose=True)

    return transpose_tiles


CASES = {  # name -> (m, n, bm, bn, source tile, output dtype)
    "fragment, float32, both dimensions ragged": (100, 70, 32, 16, "fragment", np.float32),
    "fragment to bfloat16 (rounded), ragged rows": (90, 64, 32, 32, "fragment", BF16),
    "shared bfloat16 tile, ragged columns": (64, 50, 64, 16, "shared", BF16),
    "fragment, one tile exactly": (48, 24, 48, 24, "fragment", np.float32),
}


def _data(m: int, n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, m)).astype(np.float32)


def _want(at: np.ndarray, out_dtype) -> np.ndarray:
    return at.T.astype(out_dtype)


@pytest.mark.parametrize("name", list(CASES))
def test_the_interpreter_stores_the_transposed_tiles(name):
    m, n, bm, bn, kind, out_dtype = CASES[name]
    at = _data(m, n, len(name))
    (got,) = shard_run(transposing_kernel(m, n, bm, bn, kind, jnp.dtype(out_dtype)), mesh_of((1,)), at)
    np.testing.assert_array_equal(np.asarray(got), _want(at, out_dtype))


@pytest.mark.parametrize("arch", ["sm_90", "sm_80"])
@pytest.mark.parametrize("name", list(CASES))
def test_the_generated_loop_stores_the_transposed_tiles(name, arch):
    """The generic lowering (no GEMM here, so no tensor-core plan) run by the CPU emulator, the output poisoned."""
    emulator.require()
    m, n, bm, bn, kind, out_dtype = CASES[name]
    at = _data(m, n, len(name))
    ir = transposing_kernel(m, n, bm, bn, kind, jnp.dtype(out_dtype)).trace(S(at.shape, jnp.float32))
    (got,) = emulator.run(generate_cuda(ir, arch), [at], [np.full((m, n), np.nan, np_dtype(ir.outputs[0].dtype))])
    np.testing.assert_array_equal(got, _want(at, out_dtype))


def test_the_ir_records_the_transpose_and_the_clipped_dimensions():
    kern = transposing_kernel(100, 64, 32, 32, "fragment", jnp.dtype(np.float32))
    ir = kern.trace(S((64, 100), jnp.float32))
    (store,) = [s for s in walk_stmts(ir.body) if isinstance(s, Copy) and s.transpose]
    assert store.clip_dims == (0,)  # 100 rows in tiles of 32 overhang; 64 columns in tiles of 32 do not
    assert "^T -> C[" in kern.ir_text(S((64, 100), jnp.float32))


def _refused(body, match: str, out=(8, 16)):
    @ts.kernel(out_shape=S(out, jnp.float32), grid=(1,), threads=128)
    def bad(X, C):
        body(X, C)

    with pytest.raises(KernelTraceError, match=match):
        bad.trace(S((16, 8), jnp.float32))


def test_what_a_transposed_copy_refuses():
    def from_global(X, C):
        T.copy(X, C, transpose=True)

    def wrong_shape(X, C):
        f = T.alloc_fragment((8, 16), jnp.float32)
        T.clear(f)
        T.copy(f, C, transpose=True)

    def into_a_fragment(X, C):
        f = T.alloc_fragment((16, 8), jnp.float32)
        g = T.alloc_fragment((8, 16), jnp.float32)
        T.copy(X, f)
        T.copy(f, g, transpose=True)

    def not_a_bool(X, C):
        f = T.alloc_fragment((16, 8), jnp.float32)
        T.copy(X, f)
        T.copy(f, C, transpose=1)

    _refused(from_global, r"stores an on-chip tile .*src X\[:, :\] is input")
    _refused(wrong_shape, r"dst's shape must be src's reversed; f\[:, :\] is \[8, 16\], C\[:, :\] is \[8, 16\]")
    _refused(into_a_fragment, r"src must be a shared or fragment tile and dst a global, symmetric or shared window")
    _refused(not_a_bool, "transpose must be True or False")
