"""GEMM kernels for the code-generation tests, each with what it must compute: the shared cases of the
mma.sync (test_gemm_sm80) and Hopper (test_gemm_sm90_emulated) lowerings' emulated runs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np

import jax_tilescale as ts
from jax_tilescale import language as T

S = jax.ShapeDtypeStruct
BF16, F32 = jnp.bfloat16, jnp.float32


def np_dtype(dtype) -> np.dtype:
    """numpy's dtype of a JAX one (bfloat16 through ml_dtypes)."""
    return np.dtype(ml_dtypes.bfloat16) if dtype == BF16 else np.dtype(dtype)


@dataclass
class Case:
    """A kernel, its inputs' shapes and dtypes, and what it must compute (float64 from the inputs)."""

    kern: object
    shapes: tuple[tuple[int, ...], ...]
    dtypes: tuple[object, ...]
    out_shape: tuple[int, int]
    want: Callable[..., np.ndarray]

    def ir(self):
        return self.kern.trace(*(S(s, d) for s, d in zip(self.shapes, self.dtypes)))


def gemm_case(m, n, k, *, bm=128, bn=128, bk=64, stages=3, threads=256, dtype=BF16, out_dtype=None, ta=False,
              tb=False, serial=False, fill=0.0, clear_accum=False, non_affine=False, out_cols=None) -> Case:
    """C = op(A) @ op(B) (+ fill), tiles bm x bn x bk; `out_cols` > n leaves C's rows wider than the
    product (odd row strides take the scalar stores); `non_affine` spells A's K start with // and %;
    sizes that the tiles do not divide make the edge tiles overhang (clipped copies: loads
    zero-filled, stores skipped outside)."""
    out_dtype = out_dtype or dtype
    out_cols = out_cols or n

    @ts.kernel(out_shape=S((m, out_cols), out_dtype), grid=(-(-n // bn), -(-m // bm)), threads=threads)
    def kern(A, B, C):
        bx, by = T.program_id(0), T.program_id(1)
        A_s = T.alloc_shared((bk, bm) if ta else (bm, bk), dtype)
        B_s = T.alloc_shared((bn, bk) if tb else (bk, bn), dtype)
        C_f = T.alloc_fragment((bm, bn), F32)
        T.fill(C_f, fill)
        steps = -(-k // bk)
        loop = T.serial(steps) if serial else T.Pipelined(steps, num_stages=stages)
        for ko in loop:
            k0 = (ko // 2) * (2 * bk) + (ko % 2) * bk if non_affine else ko * bk
            T.copy(A[T.ds(k0, bk), T.ds(by * bm, bm)] if ta else A[T.ds(by * bm, bm), T.ds(k0, bk)], A_s)
            T.copy(B[T.ds(bx * bn, bn), T.ds(ko * bk, bk)] if tb else B[T.ds(ko * bk, bk), T.ds(bx * bn, bn)], B_s)
            T.gemm(A_s, B_s, C_f, transpose_A=ta, transpose_B=tb, clear_accum=clear_accum)
        T.copy(C_f, C[T.ds(by * bm, bm), T.ds(bx * bn, bn)])

    def want(a, b):
        a, b = (a.T if ta else a), (b.T if tb else b)
        if clear_accum:  # every step overwrites: the last one's product
            a, b = a[:, k - bk:], b[k - bk:, :]
        out = np.full((m, out_cols), np.nan)
        out[:, :n] = a @ b + fill
        return out

    shapes = (((k, m) if ta else (m, k)), ((n, k) if tb else (k, n)))
    return Case(kern, shapes, (dtype, dtype), (m, out_cols), want)
