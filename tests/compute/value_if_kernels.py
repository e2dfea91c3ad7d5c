"""Kernels with Python `if`/`elif`/`else` and conditional expressions on element values (the
CPU tests run them in the interpreter against jax.numpy; tests/codegen builds their CUDA with
nvcc). Each `case_*` returns a `Case`: the kernel, fresh random inputs, and the expected outputs
computed with jnp.where (in float32 for 16-bit floats, rounded once to the output's dtype)."""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np

import jax_tilescale as ts
from jax_tilescale import language as T

BF16 = np.dtype(ml_dtypes.bfloat16)
SDS = jax.ShapeDtypeStruct
DTYPES = {"f32": np.dtype(np.float32), "f16": np.dtype(np.float16), "bf16": BF16, "i32": np.dtype(np.int32)}


# how close a float output must be to its reference on a GPU or the CPU emulator: about an ulp (the GPU may fuse a
# multiply-add that numpy rounds twice; the host's exp and the GPU's differ there)
TOLERANCE = {np.dtype(np.float32): 1e-6, np.dtype(np.float16): 1e-3, BF16: 8e-3}


def assert_matches(got: np.ndarray, want: np.ndarray) -> None:
    """Integers and bools exactly, floats within TOLERANCE."""
    assert got.dtype == want.dtype and got.shape == want.shape
    if want.dtype in TOLERANCE:
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=TOLERANCE[want.dtype],
                                   atol=TOLERANCE[want.dtype])
    else:
        np.testing.assert_array_equal(got, want)


@dataclass
class Case:
    kernel: ts.TileKernel
    inputs: list[np.ndarray]
    want: list[np.ndarray]


def rand(rng: np.random.Generator, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """Random data without zeros (a zero could hide an unwritten element); small integers for ints."""
    if dtype.kind in "iu":
        x = rng.integers(-50, 50, shape)
        return np.where(x == 0, 7, x).astype(dtype)
    x = rng.standard_normal(shape) * 1.5
    return np.where(np.abs(x) < 0.1, x + 0.5, x).astype(dtype)


def _wide(x: np.ndarray) -> jnp.ndarray:
    """What values compute in: float32 for 16-bit floats (values.py's rules), the dtype otherwise."""
    return jnp.asarray(x.astype(np.float32) if x.dtype in (np.float16, BF16) else x)


def case_masked_tile(dtype: np.dtype, m: int = 37, n: int = 53, bm: int = 16, bn: int = 64) -> Case:
    """Ragged guards on rows (across blocks: bx * bm + i < m) and columns (j < n, the tile is 64
    wide), then a branch on the element's value: o = x * 3 + 1 where x > 0, else -x."""

    @ts.kernel(out_shape=SDS((m, n), dtype), grid=(T.ceildiv(m, bm),))
    def masked_tile(x, o):
        bx = T.program_id(0)
        for i, j in T.Parallel(bm, bn):
            r = bx * bm + i
            if r < m and j < n:
                if x[r, j] > 0:
                    o[r, j] = x[r, j] * 3 + 1
                else:
                    o[r, j] = -x[r, j]

    x = rand(np.random.default_rng(60), (m, n), dtype)
    w = _wide(x)
    return Case(masked_tile, [x], [np.asarray(jnp.where(w > 0, w * 3 + 1, -w).astype(dtype))])


def case_elif_chain(dtype: np.dtype, m: int = 24, n: int = 40) -> Case:
    """if / elif / elif / else on a value: a piecewise function (nested ifs in the IR)."""

    @ts.kernel(out_shape=SDS((m, n), dtype), grid=(1,))
    def elif_chain(x, o):
        for i, j in T.Parallel(m, n):
            v = x[i, j]
            if v < -1:
                o[i, j] = -1
            elif v < 0:
                o[i, j] = v * v
            elif v < 1:
                o[i, j] = v * 0.5
            else:
                o[i, j] = v - 1

    x = rand(np.random.default_rng(61), (m, n), dtype)
    w = _wide(x)
    half = w.astype(jnp.float32) * 0.5 if dtype.kind in "iu" else w * 0.5  # an int times 0.5 computes in float32
    want = jnp.where(w < -1, -1, jnp.where(w < 0, w * w, jnp.where(w < 1, half, w - 1)))
    return Case(elif_chain, [x], [np.asarray(want.astype(dtype))])


def case_conditional_expressions(dtype: np.dtype, m: int = 16, n: int = 48, valid: int = 29) -> Case:
    """`a if c else b` on values (T.where), with an index condition, nested, with `not` / `or`
    mixing a value and a loop-variable comparison, and `&` / `|` / `~` in both operand orders."""

    @ts.kernel(out_shape=(SDS((m, n), dtype), SDS((m, n), dtype), SDS((m, n), dtype), SDS((m, n), np.int32)),
               grid=(1,))
    def conditional_expressions(x, y, o1, o2, o3, o4):
        for i, j in T.Parallel(m, n):
            o1[i, j] = x[i, j] * 2 if x[i, j] > y[i, j] else y[i, j]
            o2[i, j] = x[i, j] if j < valid else 0
            o3[i, j] = (1 if x[i, j] > 0 else -1) if not (y[i, j] < 0 or i == j) else 0
            o4[i, j] = T.cast((i < j) & (x[i, j] > 0), "int32") + 2 * T.cast((y[i, j] > 0) | (j < 3), "int32") + \
                4 * T.cast(~(x[i, j] < y[i, j]), "int32")

    rng = np.random.default_rng(62)
    x, y = rand(rng, (m, n), dtype), rand(rng, (m, n), dtype)
    a, b = _wide(x), _wide(y)
    ii, jj = np.meshgrid(np.arange(m), np.arange(n), indexing="ij")
    o1 = jnp.where(a > b, a * 2, b)
    o2 = jnp.where(jj < valid, a, 0)
    o3 = jnp.where(~((b < 0) | (ii == jj)), jnp.where(a > 0, 1, -1), 0)
    o4 = ((ii < jj) & (a > 0)).astype(np.int32) + 2 * ((b > 0) | (jj < 3)).astype(np.int32) + \
        4 * (~(a < b)).astype(np.int32)
    return Case(conditional_expressions, [x, y], [np.asarray(v.astype(dtype)) for v in (o1, o2, o3)] +
                [np.asarray(o4)])


def case_shared_then_global(dtype: np.dtype, m: int = 32, n: int = 40) -> Case:
    """Branches store into a shared tile and a fragment, a later branch reads what this iteration
    stored, and the tiles are copied to global memory after the loop."""

    @ts.kernel(out_shape=(SDS((m, n), dtype), SDS((m, n), np.float32)), grid=(1,))
    def shared_then_global(x, os, of):
        s = T.alloc_shared((m, n), dtype)
        f = T.alloc_fragment((m, n), np.float32)
        T.copy(x, s)
        for i, j in T.Parallel(m, n):
            if s[i, j] > 0:
                f[i, j] = s[i, j]
            else:
                f[i, j] = 0
            if f[i, j] == 0 and j % 2 == 1:
                s[i, j] = 5
        T.copy(s, os)
        T.copy(f, of)

    x = rand(np.random.default_rng(63), (m, n), dtype)
    w = _wide(x)
    f = jnp.where(w > 0, w, 0).astype(np.float32)
    jj = np.arange(n)[None, :]
    s = jnp.where((f == 0) & (jj % 2 == 1), 5, w).astype(dtype)
    return Case(shared_then_global, [x], [np.asarray(s), np.asarray(f)])


def case_atomics_under_condition(dtype: np.dtype, n: int = 200, bins: int = 7) -> Case:
    """Atomics only where a value condition holds: a count and a sum of the positive elements per
    bin (integer-valued data, so sums are exact in any order). 200 iterations on 128 threads."""
    acc_dtype = np.dtype(np.int32) if dtype.kind in "iu" else np.dtype(np.float32)

    @ts.kernel(out_shape=(SDS((bins,), np.int32), SDS((bins,), acc_dtype)), grid=(1,))
    def atomics_under_condition(x, idx, count, total):
        c = T.alloc_shared((bins,), np.int32)
        t = T.alloc_shared((bins,), acc_dtype)
        T.clear(c)
        T.clear(t)
        for i in T.Parallel(n):
            if x[i] > 0:
                T.atomic_add(c[idx[i]], 1)
                if x[i] > 2:
                    T.atomic_add(t[idx[i]], x[i])
        T.copy(c, count)
        T.copy(t, total)

    rng = np.random.default_rng(64)
    x = rng.integers(-6, 7, n).astype(dtype)
    idx = rng.integers(0, bins, n).astype(np.int32)
    xf = x.astype(np.float64)
    count = np.bincount(idx, weights=xf > 0, minlength=bins).astype(np.int32)
    total = np.bincount(idx, weights=np.where(xf > 2, xf, 0), minlength=bins).astype(acc_dtype)
    return Case(atomics_under_condition, [x, idx], [count, total])


def case_block_level(n: int = 64, blocks: int = 4) -> Case:
    """Element conditions outside T.Parallel: per block, a flag read from the block's row of a
    global input (block-uniform: a T.copy inside), a maximum from a fragment, and per thread
    (`if tx < 8: if x[bx, tx] > 0:`, the condition reads tx: thread-dependent) atomics."""

    @ts.kernel(out_shape=(SDS((blocks, n), np.float32), SDS((blocks, 2), np.int32)), grid=(blocks,))
    def block_level(x, o, stats):
        bx = T.program_id(0)
        tx = T.thread_id()
        s = T.alloc_shared((1, n), np.float32)
        mx = T.alloc_fragment((1,), np.float32)
        cnt = T.alloc_shared((2,), np.int32)
        T.clear(cnt)
        T.copy(x[T.ds(bx, 1), :], s)
        T.reduce_max(s, mx, dim=1)
        if x[bx, 0] > 0:
            T.copy(s, o[T.ds(bx, 1), :])
        else:
            for j in T.Parallel(n):
                o[bx, j] = -s[0, j]
        if mx[0] > 1:
            cnt[1] = 1
        else:
            cnt[1] = 2
        if tx < 8:
            if x[bx, tx] > 0:
                T.atomic_add(cnt[0], 1)
        T.copy(cnt, stats[bx, :])

    x = rand(np.random.default_rng(65), (blocks, n), np.dtype(np.float32))
    o = np.where(x[:, :1] > 0, x, -x)
    stats = np.stack([(x[:, :8] > 0).sum(1), np.where(x.max(1) > 1, 1, 2)], 1).astype(np.int32)
    return Case(block_level, [x], [o, stats])


def case_counts_then_branch(rows: int = 6, n: int = 48) -> Case:
    """An early-out on counts computed in the kernel: atomics count each row's large elements into
    a shared tile, then a T.serial loop over the rows branches at block level on the count
    (`if cnt[r] > 0:`, a shared element read per iteration) around a T.Parallel."""

    @ts.kernel(out_shape=SDS((rows, n), np.float32), grid=(1,))
    def counts_then_branch(x, o):
        cnt = T.alloc_shared((rows,), np.int32)
        T.clear(cnt)
        for r, j in T.Parallel(rows, n):
            if x[r, j] > 1.5:
                T.atomic_add(cnt[r], 1)
        for r in T.serial(rows):
            if cnt[r] > 0:
                for j in T.Parallel(n):
                    o[r, j] = x[r, j]
            else:
                for j in T.Parallel(n):
                    o[r, j] = 0.0

    x = rand(np.random.default_rng(67), (rows, n), np.dtype(np.float32))
    x[2] = np.minimum(x[2], 1.0)  # a row without large elements
    return Case(counts_then_branch, [x], [np.where((x > 1.5).any(1, keepdims=True), x, 0).astype(np.float32)])


def case_explicit_if(m: int = 8, n: int = 32) -> Case:
    """`with T.If(value): ... with T.Else(): ...` and T.if_then_else on values, in a Parallel."""

    @ts.kernel(out_shape=(SDS((m, n), np.float32), SDS((m, n), np.float32)), grid=(1,))
    def explicit_if(x, o, p):
        for i, j in T.Parallel(m, n):
            with T.If(T.all(x[i, j] > 0, j < n - 1)):
                o[i, j] = x[i, j]
            with T.Else():
                o[i, j] = T.if_then_else(T.any(x[i, j] < -1, i == 0), 1.0, 2.0)
            with T.If(x[i, j]):  # a number: `!= 0`
                p[i, j] = 3.0
            with T.Else():
                p[i, j] = 4.0

    x = rand(np.random.default_rng(66), (m, n), np.dtype(np.float32))
    x[0, 0] = 0.0
    jj, ii = np.arange(n)[None, :], np.arange(m)[:, None]
    o = np.where((x > 0) & (jj < n - 1), x, np.where((x < -1) | (ii == 0), 1.0, 2.0)).astype(np.float32)
    p = np.where(x != 0, 3.0, 4.0).astype(np.float32)
    return Case(explicit_if, [x], [o, p])


def case_bool_mask_logic(m: int = 24, n: int = 40) -> Case:
    """`~mask[i, j]`, `mask[i, j] & cond` and `cond | mask[i, j]` directly on a bool input's elements
    (the same values as on comparisons: both sides evaluated), in an `if` and in T.where."""

    @ts.kernel(out_shape=(SDS((m, n), np.float32), SDS((m, n), np.float32)), grid=(1,), threads=64)
    def bool_mask_logic(mask, x, kept, flagged):
        for i, j in T.Parallel(m, n):
            if ~mask[i, j] & (x[i, j] > 0):
                kept[i, j] = x[i, j]
            else:
                kept[i, j] = -1.0
            flagged[i, j] = T.where((x[i, j] < -1) | mask[i, j], 1.0, 0.0)

    rng = np.random.default_rng(11)
    x = rand(rng, (m, n), np.dtype(np.float32))
    mask = rng.random((m, n)) < 0.4
    want = [np.where(~mask & (x > 0), x, np.float32(-1)).astype(np.float32),
            np.where((x < -1) | mask, 1.0, 0.0).astype(np.float32)]
    return Case(bool_mask_logic, [mask, x], want)


def all_cases() -> dict[str, Case]:
    """Every case, by name (nvcc builds them all)."""
    cases: dict[str, Case] = {}
    for name, d in DTYPES.items():
        cases[f"masked_tile-{name}"] = case_masked_tile(d)
        cases[f"elif_chain-{name}"] = case_elif_chain(d)
        cases[f"conditional_expressions-{name}"] = case_conditional_expressions(d)
        cases[f"atomics_under_condition-{name}"] = case_atomics_under_condition(d)
    for name in ("f32", "bf16"):
        cases[f"shared_then_global-{name}"] = case_shared_then_global(DTYPES[name])
    cases["block_level"] = case_block_level()
    cases["counts_then_branch"] = case_counts_then_branch()
    cases["explicit_if"] = case_explicit_if()
    cases["bool_mask_logic"] = case_bool_mask_logic()
    return cases
