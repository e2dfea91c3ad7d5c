"""`ts.kernel(input_output_aliases=)` on GPUs (one PE: every process runs them on its own GPU):
the in-place add-one kernel in a jitted fori_loop against the loop of `x + 1`, a GEMM accumulating
into its aliased output against numpy in float64, and the alias reaching XLA (donation without a
copy). Run with the GPU suite (tests/gpu/conftest.py)."""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_tilescale as ts
from jax_tilescale import language as T

SDS = jax.ShapeDtypeStruct


def add_one(m: int, n: int, bm: int) -> ts.TileKernel:
    @ts.kernel(out_shape=SDS((m, n), jnp.float32), grid=(m // bm,), input_output_aliases={0: 0})
    def add_one_in_place(x, o):
        rows = T.ds(T.program_id(0) * bm, bm)
        tile = T.alloc_fragment((bm, n), jnp.float32)
        T.copy(x[rows, :], tile)
        for i, j in T.Parallel(bm, n):
            tile[i, j] = tile[i, j] + 1
        T.copy(tile, o[rows, :])

    return add_one_in_place


@pytest.mark.parametrize("m,n,bm", [(256, 128, 64), (1024, 512, 32)])
def test_in_place_kernel_in_a_fori_loop_equals_the_loop_of_x_plus_one(m, n, bm):
    k = add_one(m, n, bm)
    x = jax.random.normal(jax.random.key(m), (m, n), jnp.float32)
    steps = 7
    got = jax.jit(lambda a: jax.lax.fori_loop(0, steps, lambda _, c: k(c), a))(x)
    want = jax.jit(lambda a: jax.lax.fori_loop(0, steps, lambda _, c: c + 1, a))(x)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_donated_input_is_updated_without_a_copy():
    k = add_one(256, 128, 64)
    x_host = np.random.default_rng(1).standard_normal((256, 128)).astype(np.float32)
    x = jnp.asarray(x_host)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "Some donated buffers were not usable" when XLA got no alias
        got = jax.jit(k, donate_argnums=0)(x)
        got.block_until_ready()
    assert x.is_deleted()
    np.testing.assert_array_equal(np.asarray(got), x_host + 1)


@pytest.mark.parametrize("m,n,k,bm,bn,bk", [(256, 256, 256, 128, 128, 64), (512, 256, 128, 128, 128, 32)])
def test_gemm_accumulating_into_its_aliased_output(m, n, k, bm, bn, bk):
    """C_out = C + A @ B with C_out returned in C's buffer: each block reads its C tile, accumulates
    the product and writes the tile back; C's other elements are nobody else's."""
    @ts.kernel(out_shape=SDS((m, n), jnp.float32), grid=(n // bn, m // bm), threads=256,
               input_output_aliases={2: 0})
    def gemm_acc(A, B, C, C_out):
        bx, by = T.program_id(0), T.program_id(1)
        A_s, B_s = T.alloc_shared((bm, bk), jnp.bfloat16), T.alloc_shared((bk, bn), jnp.bfloat16)
        C_f = T.alloc_fragment((bm, bn), jnp.float32)
        T.copy(C[T.ds(by * bm, bm), T.ds(bx * bn, bn)], C_f)
        for ko in T.Pipelined(k // bk, num_stages=2):
            T.copy(A[T.ds(by * bm, bm), T.ds(ko * bk, bk)], A_s)
            T.copy(B[T.ds(ko * bk, bk), T.ds(bx * bn, bn)], B_s)
            T.gemm(A_s, B_s, C_f)
        T.copy(C_f, C_out[T.ds(by * bm, bm), T.ds(bx * bn, bn)])

    ka, kb, kc = jax.random.split(jax.random.key(m + k), 3)
    a = jax.random.normal(ka, (m, k), jnp.float32).astype(jnp.bfloat16)
    b = jax.random.normal(kb, (k, n), jnp.float32).astype(jnp.bfloat16)
    c = jax.random.normal(kc, (m, n), jnp.float32)
    want = np.asarray(c, np.float64) + np.asarray(a.astype(jnp.float32), np.float64) @ np.asarray(
        b.astype(jnp.float32), np.float64)
    # twice in a loop: the second step must start from the first's result (in place, not a stale copy)
    got = jax.jit(lambda c0: jax.lax.fori_loop(0, 2, lambda _, acc: gemm_acc(a, b, acc), c0))(c)
    want2 = want + (want - np.asarray(c, np.float64))
    got = np.asarray(got, np.float64)
    err = float(np.max(np.abs(got - want2)))
    assert np.all(np.isfinite(got)) and err <= 1e-3 * float(np.max(np.abs(want2))), err
