"""The compute part (issue 6): loops, fragments, clear/fill, gemm and casting copies, through the
interpreter on simulated CPU devices, checked against numpy; and the CUDA lowering's refusal."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import jax_tilescale as ts
from jax_tilescale import language as T
from jax_tilescale.ir.nodes import Loop
from tests.codegen.kernels import started_gemm
from tests.primitives.util import assert_equal, mesh_of, random_rows, shard_run

BF16 = np.dtype(ml_dtypes.bfloat16)
TOL = {np.dtype(np.float32): 1e-5, np.dtype(np.float16): 2e-3, BF16: 1e-2}


def _run1(kern, *inputs):
    """One PE."""
    return shard_run(kern, mesh_of((1,)), *inputs)


# ---- loops --------------------------------------------------------------------------------------


def test_serial_loop_copies_tiles_in_order():
    @ts.kernel(out_shape=jax.ShapeDtypeStruct((64, 16), jnp.float32), grid=(1,))
    def k(x, y):
        for i in T.serial(4):
            T.copy(x[T.ds(i * 16, 16), :], y[T.ds(48 - i * 16, 16), :])

    x = random_rows(np.random.default_rng(0), 1, (64, 16))
    want = x.reshape(4, 16, 16)[::-1].reshape(64, 16)
    assert_equal(_run1(k, x)[0], want)


def test_nested_loops_and_printer():
    @ts.kernel(out_shape=jax.ShapeDtypeStruct((32, 32), jnp.float32), grid=(2,))
    def k(x, y):
        for i in T.serial(2):
            for j in T.Pipelined(4, num_stages=3):
                T.copy(x[T.ds(T.program_id(0) * 16 + i * 8, 8), T.ds(j * 8, 8)],
                       y[T.ds(T.program_id(0) * 16 + i * 8, 8), T.ds(24 - j * 8, 8)])

    x = random_rows(np.random.default_rng(1), 1, (32, 32))
    want = x.reshape(32, 4, 8)[:, ::-1].reshape(32, 32)
    assert_equal(_run1(k, x)[0], want)
    ir = k.trace(jax.ShapeDtypeStruct((32, 32), jnp.float32))
    (outer,) = ir.body
    assert isinstance(outer, Loop) and outer.extent == 2 and outer.num_stages is None
    (inner,) = outer.body
    assert isinstance(inner, Loop) and inner.num_stages == 3 and inner.var != outer.var
    text = k.ir_text(jax.ShapeDtypeStruct((32, 32), jnp.float32))
    assert "for i0 in serial(2):" in text and "    for i1 in Pipelined(4, num_stages=3):" in text
    assert "      copy(" in text


def test_loop_out_of_bounds_is_a_trace_error():
    @ts.kernel(out_shape=jax.ShapeDtypeStruct((64, 16), jnp.float32), grid=(1,))
    def k(x, y):
        for i in T.serial(5):
            T.copy(x[T.ds(i * 16, 16), :], y[T.ds(0, 16), :])

    with pytest.raises(ts.KernelTraceError, match="can be 64"):
        k.trace(jax.ShapeDtypeStruct((64, 16), jnp.float32))


def test_loop_variable_outside_its_loop_and_break_are_errors():
    @ts.kernel(out_shape=jax.ShapeDtypeStruct((64, 16), jnp.float32), grid=(1,))
    def leak(x, y):
        for i in T.serial(2):  # noqa: B007 (the point of the test)
            pass
        T.copy(x[T.ds(i * 16, 16), :], y[T.ds(0, 16), :])

    with pytest.raises(ts.KernelTraceError, match="outside its"):
        leak.trace(jax.ShapeDtypeStruct((64, 16), jnp.float32))

    @ts.kernel(out_shape=jax.ShapeDtypeStruct((64, 16), jnp.float32), grid=(1,))
    def early(x, y):
        for i in T.serial(2):
            T.copy(x[T.ds(i * 16, 16), :], y[T.ds(0, 16), :])
            break

    with pytest.raises(ts.KernelTraceError, match="left early"):
        early.trace(jax.ShapeDtypeStruct((64, 16), jnp.float32))

    with pytest.raises(ts.KernelTraceError, match="positive"):
        ts.kernel(lambda x, y: [None for _ in T.serial(0)] and None,
                  out_shape=jax.ShapeDtypeStruct((8,), jnp.float32), grid=(1,)).trace(
            jax.ShapeDtypeStruct((8,), jnp.float32))


def test_waits_inside_a_loop_ring_pass():
    """Each step, every PE puts its current token to the next PE with a signal and waits for the
    previous PE's token: after n steps every PE has seen every token (rows of the output)."""
    n, w = 4, 8

    @ts.kernel(out_shape=jax.ShapeDtypeStruct((n, w), jnp.float32), grid=(1,))
    def k(x, y):
        me, npes = T.get_pe(), T.get_pe_num()
        buf = T.alloc_symmetric((n, w), jnp.float32)
        sig = T.alloc_signal(n)
        T.copy(x[0:1, :], buf[T.ds(0, 1), :])
        T.copy(x[0:1, :], y[T.ds(me, 1), :])
        for s in T.serial(n - 1):
            T.putmem_signal_nbi_block(buf[T.ds(s + 1, 1), :], buf[T.ds(s, 1), :], sig=sig[s], value=1,
                                      op=T.SignalOp.SET, pe=(me + 1) % npes)
            T.signal_wait_until(sig[s], T.Cmp.EQ, 1)
            T.copy(buf[T.ds(s + 1, 1), :], y[T.ds((me + n - 1 - s) % npes, 1), :])

    x = random_rows(np.random.default_rng(2), n, (1, w))
    out = shard_run(k, mesh_of((n,)), x)[0]
    assert_equal(out, np.tile(x, (n, 1)))


def test_missing_wait_inside_a_loop_is_a_race():
    """The race detector sees accesses made inside loops: the same ring without its wait races."""
    n, w = 4, 8

    @ts.kernel(out_shape=jax.ShapeDtypeStruct((n, w), jnp.float32), grid=(1,))
    def k(x, y):
        me, npes = T.get_pe(), T.get_pe_num()
        buf = T.alloc_symmetric((n, w), jnp.float32)
        sig = T.alloc_signal(n)
        T.copy(x[0:1, :], buf[T.ds(0, 1), :])
        T.copy(x[0:1, :], y[T.ds(me, 1), :])
        for s in T.serial(n - 1):
            T.putmem_signal_nbi_block(buf[T.ds(s + 1, 1), :], buf[T.ds(s, 1), :], sig=sig[s], value=1,
                                      op=T.SignalOp.SET, pe=(me + 1) % npes)
            T.copy(buf[T.ds(s + 1, 1), :], y[T.ds((me + n - 1 - s) % npes, 1), :])

    x = random_rows(np.random.default_rng(2), n, (1, w))
    with pytest.raises(ts.RaceError, match=r"data race on PE \d's symmetric buffer"):
        np.asarray(shard_run(k, mesh_of((n,)), x)[0])


# ---- fragments, fill, gemm, casting copies ------------------------------------------------------


@pytest.mark.parametrize("value", [0.0, 2.5])
def test_clear_and_fill(value):
    @ts.kernel(out_shape=jax.ShapeDtypeStruct((16, 8), jnp.float32), grid=(1,))
    def k(x, y):
        frag = T.alloc_fragment((16, 8), jnp.float32)
        smem = T.alloc_shared((16, 8), jnp.float32)
        T.copy(x, frag)
        if value == 0.0:
            T.clear(frag[0:8, :])
        else:
            T.fill(frag[0:8, :], value)
        T.copy(frag, smem)
        T.copy(smem, y)

    x = random_rows(np.random.default_rng(3), 1, (16, 8))
    want = x.copy()
    want[:8] = value
    assert_equal(_run1(k, x)[0], want)


def _gemm_kernel(m, n, kk, dtype, ta, tb, block_k, a_in_fragment=False):
    a_shape = (kk, m) if ta else (m, kk)
    b_shape = (n, kk) if tb else (kk, n)

    @ts.kernel(out_shape=jax.ShapeDtypeStruct((m, n), jnp.float32), grid=(1,))
    def k(a, b, c):
        a_s = (T.alloc_fragment if a_in_fragment else T.alloc_shared)(
            (block_k, m) if ta else (m, block_k), dtype)
        b_s = T.alloc_shared((n, block_k) if tb else (block_k, n), dtype)
        acc = T.alloc_fragment((m, n), jnp.float32)
        T.clear(acc)
        for ko in T.Pipelined(kk // block_k, num_stages=2):
            T.copy(a[T.ds(ko * block_k, block_k), :] if ta else a[:, T.ds(ko * block_k, block_k)], a_s)
            T.copy(b[:, T.ds(ko * block_k, block_k)] if tb else b[T.ds(ko * block_k, block_k), :], b_s)
            T.gemm(a_s, b_s, acc, transpose_A=ta, transpose_B=tb)
        T.copy(acc, c)

    return k, a_shape, b_shape


@pytest.mark.parametrize("dtype", [np.float32, np.float16, BF16], ids=["f32", "f16", "bf16"])
@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
def test_gemm_matches_numpy(dtype, ta, tb):
    m, n, kk = 32, 16, 64
    kern, a_shape, b_shape = _gemm_kernel(m, n, kk, dtype, ta, tb, block_k=16, a_in_fragment=ta and tb)
    rng = np.random.default_rng(4)
    a = rng.standard_normal(a_shape).astype(dtype)
    b = rng.standard_normal(b_shape).astype(dtype)
    got = np.asarray(_run1(kern, a, b)[0])
    af, bf = a.astype(np.float32), b.astype(np.float32)
    want = (af.T if ta else af) @ (bf.T if tb else bf)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


def test_gemm_clear_accum_and_cast_copy():
    @ts.kernel(out_shape=(jax.ShapeDtypeStruct((16, 16), jnp.bfloat16), jax.ShapeDtypeStruct((16, 16), jnp.float16)),
               grid=(1,))
    def k(a, b, c16, h16):
        a_s, b_s = T.alloc_shared((16, 16), jnp.bfloat16), T.alloc_shared((16, 16), jnp.bfloat16)
        acc = T.alloc_fragment((16, 16), jnp.float32)
        T.copy(a, a_s)
        T.copy(b, b_s)
        T.gemm(a_s, b_s, acc, clear_accum=True)  # acc starts poisoned: clear_accum must overwrite it
        T.gemm(a_s, b_s, acc)
        T.copy(acc, c16)
        T.copy(acc, h16)

    rng = np.random.default_rng(5)
    a = rng.standard_normal((16, 16)).astype(BF16)
    b = rng.standard_normal((16, 16)).astype(BF16)
    c16, h16 = _run1(k, a, b)
    want = 2 * (a.astype(np.float32) @ b.astype(np.float32))
    np.testing.assert_array_equal(np.asarray(c16).view(np.uint16), want.astype(BF16).view(np.uint16))
    np.testing.assert_array_equal(np.asarray(h16), want.astype(np.float16))


@pytest.mark.parametrize("start", ["clear", "fill", "each"])
def test_pipelined_accumulator_starts(start):
    """tests/codegen/kernels.started_gemm, which the GPU runs against the same reference
    (tests/gpu/test_gemm_paths_gpu.py): cleared, filled with 0.5, or cleared by every stage's gemm."""
    m, n, k = 64, 128, 256
    rng = np.random.default_rng(3)
    a = rng.standard_normal((m, k)).astype(BF16)
    b = rng.standard_normal((k, n)).astype(BF16)
    got = np.asarray(jax.jit(started_gemm(m, n, k, start))(a, b), np.float64)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    want = a64[:, -64:] @ b64[-64:] if start == "each" else a64 @ b64 + (0.5 if start == "fill" else 0.0)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


def _trace_err(body, *shapes, match):
    kern = ts.kernel(body, out_shape=jax.ShapeDtypeStruct((16, 16), jnp.float32), grid=(1,))
    with pytest.raises(ts.KernelTraceError, match=match):
        kern.trace(*(jax.ShapeDtypeStruct(s, jnp.float32) for s in shapes))


def test_gemm_verifier_errors():
    def bad_shapes(x, y):
        a, b = T.alloc_shared((16, 8), jnp.float16), T.alloc_shared((16, 16), jnp.float16)
        T.gemm(a, b, T.alloc_fragment((16, 16), jnp.float32))

    _trace_err(bad_shapes, (16, 16), match="do not chain")

    def bad_acc(x, y):
        a = T.alloc_shared((16, 16), jnp.float16)
        T.gemm(a, a, T.alloc_fragment((16, 16), jnp.float16))

    _trace_err(bad_acc, (16, 16), match="must be float32")

    def mixed(x, y):
        T.gemm(T.alloc_shared((16, 16), jnp.float16), T.alloc_shared((16, 16), jnp.float32),
               T.alloc_fragment((16, 16), jnp.float32))

    _trace_err(mixed, (16, 16), match="one dtype")

    def global_operand(x, y):
        T.gemm(x, T.alloc_shared((16, 16), jnp.float32), T.alloc_fragment((16, 16), jnp.float32))

    _trace_err(global_operand, (16, 16), match="on-chip tiles")

    def fill_global(x, y):
        T.fill(y, 1.0)

    _trace_err(fill_global, (16, 16), match="on-chip")

    def cast_without_fragment(x, y):
        s = T.alloc_shared((16, 16), jnp.float16)
        T.copy(x, s)

    _trace_err(cast_without_fragment, (16, 16), match="dtypes differ")


def test_every_name_of_issue_6_is_in_the_language():
    for n in "serial Pipelined alloc_fragment clear fill gemm".split():
        assert n in T.__all__ and hasattr(T, n)
        obj = getattr(T, n)
        assert callable(obj) and (obj.__doc__ or "").strip() and obj.__name__ == n
