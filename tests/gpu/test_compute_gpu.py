"""The compute part on GPUs: the Hopper GEMM lowering (TMA + wgmma) and the portable rules (loops,
fill, casting copies, gemm), each checked element by element against jax.numpy in float32 on
random data. Every process runs them on its own GPU (these kernels do not communicate)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_tilescale as ts
from jax_tilescale import language as T
from jax_tilescale.codegen import generate_cuda
from tests.compute import value_if_kernels
from tests.conftest import load_example

gemm_example = load_example("gemm")
TOL = {"bfloat16": 2e-2, "float16": 5e-3, "float32": 1e-4}


def _inputs(shape_a, shape_b, dtype, seed):
    ka, kb = jax.random.split(jax.random.key(seed))
    return (jax.random.normal(ka, shape_a, jnp.float32).astype(dtype),
            jax.random.normal(kb, shape_b, jnp.float32).astype(dtype))


def _ref(x):
    """Host float64 copy (XLA's float32 dot on GPUs defaults to TF32: not a reference for fp32 kernels)."""
    return np.asarray(x.astype(jnp.float32), np.float64)


def _close(got, want, dtype):
    got = np.asarray(got, np.float64)
    want = np.asarray(want, np.float64)
    scale = float(np.max(np.abs(want)))
    assert got.shape == want.shape and np.all(np.isfinite(got))
    err = float(np.max(np.abs(got - want)))
    assert err <= TOL[dtype] * scale, f"max error {err} vs scale {scale}"


def _uses_wgmma(kern, *args) -> bool:
    return generate_cuda(kern.trace(*args), "sm_90").arch == "sm_90a"


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("m,n,k,cfg", [
    (1024, 1024, 512, dict(block_m=128, block_n=256, block_k=64, num_stages=4)),
    (512, 768, 1024, dict(block_m=256, block_n=128, block_k=64, num_stages=3)),
    (256, 512, 192, dict(block_m=64, block_n=64, block_k=64, num_stages=2, threads=128)),
    (384, 256, 256, dict(block_m=128, block_n=128, block_k=128, num_stages=2, threads=128, group_m=1)),  # A shared
    (256, 384, 256, dict(block_m=128, block_n=128, block_k=64, num_stages=3, group_m=1)),  # odd grid: no cluster
])
def test_wgmma_gemm_matches_jnp_dot(dtype, m, n, k, cfg):
    kern = gemm_example.gemm(m, n, k, jnp.dtype(dtype), **cfg)
    a, b = _inputs((m, k), (k, n), dtype, m + n + k)
    assert _uses_wgmma(kern, a, b)
    _close(jax.jit(kern)(a, b), _ref(a) @ _ref(b), dtype)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("m,n,k,cfg", [
    (200, 136, 72, dict(block_m=128, block_n=128, block_k=64, num_stages=2)),
    (1000, 1000, 1000, {}),  # the default 128x256x64 tiles, 4 stages: every edge ragged
    (300, 520, 200, dict(block_m=128, block_n=256, block_k=64, num_stages=3, group_m=1)),
    (520, 1000, 136, dict(block_m=256, block_n=192, block_k=64, num_stages=4)),  # 192-column TMA-stored tiles
])
def test_wgmma_gemm_ragged_edges(dtype, m, n, k, cfg):
    """M, N, K not multiples of the tiles: TMA zero-fills the boxes past A's and B's ends, the
    accumulator stores are guarded with the room left in C."""
    kern = gemm_example.gemm(m, n, k, jnp.dtype(dtype), **cfg)
    a, b = _inputs((m, k), (k, n), dtype, 7 * m + n + k)
    assert _uses_wgmma(kern, a, b)
    _close(jax.jit(kern)(a, b), _ref(a) @ _ref(b), dtype)


@pytest.mark.parametrize("tma_store", [True, False])
def test_wgmma_epilogue_tma_store_and_register_store(monkeypatch, tma_store):
    """The epilogue through shared memory and TMA stores (clipped by TMA at C's edges) and the one
    from registers (guarded stores) give the same products."""
    from jax_tilescale.codegen import gemm_sm90

    monkeypatch.setattr(gemm_sm90, "TMA_STORE", tma_store)
    m, n, k = 1000, 1000, 1000
    kern = gemm_example.gemm(m, n, k, jnp.bfloat16, block_m=256, block_n=192)
    a, b = _inputs((m, k), (k, n), "bfloat16", 11)
    assert ("ts_tma_store_2d(&" in generate_cuda(kern.trace(a, b), "sm_90").source) == tma_store
    _close(jax.jit(kern)(a, b), _ref(a) @ _ref(b), "bfloat16")


def test_wgmma_fp32_output_through_tma_store():
    """An fp32 C (32-column boxes) stored through the TMA epilogue at ragged M, N and K."""
    m, n, k = 300, 200, 136
    kern = _tile_gemm(m, n, k, 128, 128, 64, 4, 256, "bfloat16", out_dtype="float32")
    a, b = _inputs((m, k), (k, n), "bfloat16", 13)
    assert generate_cuda(kern.trace(a, b), "sm_90").source.count("ts_tma_store_2d(&") == 4
    _close(jax.jit(kern)(a, b), _ref(a) @ _ref(b), "float32")


def test_wgmma_two_outputs_of_one_accumulator():
    """Only the kernel's last statement stores through TMA (here into fp16 D); the copy into C
    before it stays a register store."""
    m = n = k = 256
    bm, bn, bk = 128, 256, 64

    @ts.kernel(out_shape=(jax.ShapeDtypeStruct((m, n), jnp.bfloat16), jax.ShapeDtypeStruct((m, n), jnp.float16)),
               grid=(1, m // bm), threads=256)
    def kern(A, B, C, D):
        by = T.program_id(1)
        A_s, B_s = T.alloc_shared((bm, bk), jnp.bfloat16), T.alloc_shared((bk, bn), jnp.bfloat16)
        C_f = T.alloc_fragment((bm, bn), jnp.float32)
        T.clear(C_f)
        for ko in T.Pipelined(k // bk, num_stages=3):
            T.copy(A[T.ds(by * bm, bm), T.ds(ko * bk, bk)], A_s)
            T.copy(B[T.ds(ko * bk, bk), 0:bn], B_s)
            T.gemm(A_s, B_s, C_f)
        T.copy(C_f, C[T.ds(by * bm, bm), :])
        T.copy(C_f, D[T.ds(by * bm, bm), :])

    a, b = _inputs((m, k), (k, n), "bfloat16", 12)
    assert generate_cuda(kern.trace(a, b), "sm_90").source.count("ts_tma_store_2d(&") == 4
    c, d = jax.jit(kern)(a, b)
    want = _ref(a) @ _ref(b)
    _close(c, want, "bfloat16")
    _close(d, want, "float16")


@pytest.mark.parametrize("ta,tb", [(True, False), (False, True), (True, True)])
def test_wgmma_gemm_transposed_operands(ta, tb):
    m, n, k, bm, bn, bk = 256, 256, 256, 128, 128, 64
    dtype = jnp.bfloat16

    @ts.kernel(out_shape=jax.ShapeDtypeStruct((m, n), jnp.float32), grid=(n // bn, m // bm), threads=256)
    def kern(A, B, C):
        bx, by = T.program_id(0), T.program_id(1)
        A_s = T.alloc_shared((bk, bm) if ta else (bm, bk), dtype)
        B_s = T.alloc_shared((bn, bk) if tb else (bk, bn), dtype)
        C_f = T.alloc_fragment((bm, bn), jnp.float32)
        T.clear(C_f)
        for ko in T.Pipelined(k // bk, num_stages=3):
            T.copy(A[T.ds(ko * bk, bk), T.ds(by * bm, bm)] if ta else A[T.ds(by * bm, bm), T.ds(ko * bk, bk)], A_s)
            T.copy(B[T.ds(bx * bn, bn), T.ds(ko * bk, bk)] if tb else B[T.ds(ko * bk, bk), T.ds(bx * bn, bn)], B_s)
            T.gemm(A_s, B_s, C_f, transpose_A=ta, transpose_B=tb)
        T.copy(C_f, C[T.ds(by * bm, bm), T.ds(bx * bn, bn)])

    a, b = _inputs((k, m) if ta else (m, k), (n, k) if tb else (k, n), "bfloat16", 3)
    assert _uses_wgmma(kern, a, b)
    af, bf = _ref(a), _ref(b)
    _close(jax.jit(kern)(a, b), (af.T if ta else af) @ (bf.T if tb else bf), "bfloat16")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_portable_gemm_fill_and_casting_copies(dtype):
    """threads=96 and fp32 tiles: not the wgmma path; loops, fragments in shared memory, casts."""
    m, n, k, bk = 64, 48, 96, 32

    @ts.kernel(out_shape=jax.ShapeDtypeStruct((m, n), dtype), grid=(1,), threads=96)
    def kern(A, B, C):
        A_s = T.alloc_shared((m, bk), dtype)
        B_s = T.alloc_shared((bk, n), dtype)
        acc = T.alloc_fragment((m, n), jnp.float32)
        T.fill(acc, 0.5)
        for ko in T.Pipelined(k // bk, num_stages=2):
            T.copy(A[:, T.ds(ko * bk, bk)], A_s)
            T.copy(B[T.ds(ko * bk, bk), :], B_s)
            T.gemm(A_s, B_s, acc)
        T.copy(acc, C)

    a, b = _inputs((m, k), (k, n), dtype, 11)
    assert not _uses_wgmma(kern, a, b)
    _close(jax.jit(kern)(a, b), _ref(a) @ _ref(b) + 0.5, dtype)


def test_gemm_example_default_gpu_size():
    assert gemm_example.check(2048, 2048, 1024, "bfloat16", seed=5)


def test_multicast_clusters_match_jnp_dot(monkeypatch):
    """Two-block clusters multicasting the shared tile (off by default, measured slower) stay correct."""
    from jax_tilescale.codegen import gemm_sm90

    monkeypatch.setattr(gemm_sm90, "MULTICAST", True)
    for m, n, k, cfg in [(1024, 1024, 512, dict(block_m=128, block_n=256)),  # B shared (grouped order)
                         (384, 256, 256, dict(block_m=128, block_n=128, threads=128, group_m=1))]:  # A shared
        kern = gemm_example.gemm(m, n, k, jnp.bfloat16, block_k=64, num_stages=3, **cfg)
        a, b = _inputs((m, k), (k, n), "bfloat16", m + k)
        assert "__cluster_dims__(2, 1, 1)" in generate_cuda(kern.trace(a, b), "sm_90").source
        _close(jax.jit(kern)(a, b), _ref(a) @ _ref(b), "bfloat16")


def test_parallel_and_atomics_on_the_gpu():
    """T.Parallel element-wise math and shared-memory integer atomics (collisions within a block),
    against numpy."""
    m, n, bins, blocks = 64, 96, 16, 8

    @ts.kernel(out_shape=(jax.ShapeDtypeStruct((m, n), jnp.float32), jax.ShapeDtypeStruct((blocks, bins), jnp.int32)),
               grid=(blocks,), threads=128)
    def kern(x, idx, y, hist):
        bx = T.program_id(0)
        rows = m // blocks
        for i, j in T.Parallel(rows, n):
            y[bx * rows + i, j] = T.exp(x[bx * rows + i, j]) * 0.5 + T.max(x[bx * rows + i, j], 0.0)
        acc = T.alloc_shared((bins,), jnp.int32)
        T.clear(acc)
        for i in T.Parallel(n):
            T.atomic_add(acc[idx[bx, i]], 1)
        for b in T.Parallel(bins):
            hist[bx, b] = acc[b]

    rng = np.random.default_rng(9)
    x = rng.standard_normal((m, n)).astype(np.float32)
    idx = rng.integers(0, bins, (blocks, n)).astype(np.int32)
    y, hist = jax.jit(kern)(x, idx)
    np.testing.assert_allclose(np.asarray(y), np.exp(x) * 0.5 + np.maximum(x, 0), rtol=2e-6, atol=1e-6)
    want = np.stack([np.bincount(idx[b], minlength=bins) for b in range(blocks)])
    np.testing.assert_array_equal(np.asarray(hist), want)


VALUE_IF_CASES = value_if_kernels.all_cases()


@pytest.mark.parametrize("name", sorted(VALUE_IF_CASES))
def test_value_condition_cases_on_the_gpu(name):
    """Every value-condition kernel of the CPU suite (tests/compute/value_if_kernels.py: if/elif/else,
    conditional expressions, block-level conditions, atomics under conditions, logic on a bool
    input's elements) against its numpy reference; integers exactly, floats to about an ulp (the
    GPU may fuse a multiply-add that numpy rounds twice)."""
    case = VALUE_IF_CASES[name]
    got = jax.jit(case.kernel)(*case.inputs)
    got = got if isinstance(got, (tuple, list)) else [got]
    assert len(got) == len(case.want)
    for g, w in zip(got, case.want):
        value_if_kernels.assert_matches(np.asarray(g), w)


def test_value_conditions_on_the_gpu():
    """`if`/`elif`/`else` and `a if c else b` on element values inside T.Parallel (ragged guards on
    rows across blocks and on columns, bf16 values computed in float32), atomics under a value
    condition, and a block-uniform condition read from a fragment, against numpy on every element."""
    m, n, bm, bn, bins = 70, 100, 16, 128, 8
    blocks = -(-m // bm)

    @ts.kernel(out_shape=(jax.ShapeDtypeStruct((m, n), jnp.bfloat16), jax.ShapeDtypeStruct((m, n), jnp.float32),
                          jax.ShapeDtypeStruct((blocks, bins), jnp.int32), jax.ShapeDtypeStruct((blocks,), jnp.int32)),
               grid=(blocks,), threads=128)
    def kern(x, idx, y, z, hist, flag):
        bx = T.program_id(0)
        acc = T.alloc_shared((bins,), jnp.int32)
        top = T.alloc_fragment((1,), jnp.float32)
        row = T.alloc_shared((n,), jnp.float32)
        T.clear(acc)
        for i, j in T.Parallel(bm, bn):
            r = bx * bm + i
            if r < m and j < n:
                v = x[r, j]
                if v > 1:
                    y[r, j] = v * 3 + 1
                elif v > 0:
                    y[r, j] = v * v
                else:
                    y[r, j] = -v
                z[r, j] = T.cast(v, "float32") * 0.5 if v < -0.5 or j == 0 else 2.0
                if v > 0 and idx[r, j] >= 0:
                    T.atomic_add(acc[idx[r, j]], 1)
        for j in T.Parallel(n):
            row[j] = x[T.min(bx * bm, m - 1), j]
        T.reduce_max(row, top, dim=0)
        if top[0] > 2:
            flag[bx] = 1
        else:
            flag[bx] = 0
        for b in T.Parallel(bins):
            hist[bx, b] = acc[b]

    rng = np.random.default_rng(21)
    x = rng.standard_normal((m, n)).astype(jnp.bfloat16)
    idx = rng.integers(-1, bins, (m, n)).astype(np.int32)
    y, z, hist, flag = jax.jit(kern)(x, idx)
    xf = np.asarray(x, np.float32)
    want_y = np.where(xf > 1, xf * 3 + 1, np.where(xf > 0, xf * xf, -xf)).astype(jnp.bfloat16)
    jj = np.arange(n)[None, :]
    want_z = np.where((xf < -0.5) | (jj == 0), xf * 0.5, 2.0).astype(np.float32)
    np.testing.assert_array_equal(np.asarray(y).view(np.uint16), want_y.view(np.uint16))
    np.testing.assert_array_equal(np.asarray(z), want_z)
    rows = np.arange(m) // bm
    want_hist = np.zeros((blocks, bins), np.int32)
    for r, j in zip(*np.nonzero((xf > 0) & (idx >= 0))):
        want_hist[rows[r], idx[r, j]] += 1
    np.testing.assert_array_equal(np.asarray(hist), want_hist)
    firsts = xf[np.minimum(np.arange(blocks) * bm, m - 1)]
    np.testing.assert_array_equal(np.asarray(flag), (firsts.max(1) > 2).astype(np.int32))


# ---- the mma.sync lowering (codegen/gemm_sm80.py), forced on this GPU -------------------------------

ag_gemm = load_example("allgather_gemm")


@pytest.fixture
def mma_lowering(monkeypatch):
    """Kernels compiled in the test take the mma.sync lowering (read when a kernel is lowered)."""
    monkeypatch.setenv("TILESCALE_GEMM_LOWERING", "mma")


def _uses_mma(kern, *args) -> bool:
    src = generate_cuda(kern.trace(*args), "sm_90").source  # the lowering the environment asks for
    # ts_wgmma_: the instructions' helpers (the device header's comments mention wgmma in every kernel)
    return "ts_mma_16816_" in src and "ts_cp_async_cg16(" in src and "ts_wgmma_" not in src


def _poisoned_call(fn, *args):
    """fn(*args) right after a NaN array of each output's size was made and freed: the allocator
    tends to hand that block to the next allocation of the same size, so elements the kernel
    leaves unwritten read NaN (best effort; _close also requires every element to be finite)."""
    outs = jax.eval_shape(fn, *args)
    for o in jax.tree_util.tree_leaves(outs):
        junk = jnp.full(o.shape, jnp.nan, o.dtype)
        junk.block_until_ready()
        del junk
    return fn(*args)


def _tile_gemm(m, n, k, bm, bn, bk, stages, threads, dtype, out_dtype=None, ta=False, tb=False, serial=False,
               fill=0.0):
    """C = op(A) @ op(B) + fill with affine tile starts (no copy may clip)."""

    @ts.kernel(out_shape=jax.ShapeDtypeStruct((m, n), out_dtype or dtype), grid=(-(-n // bn), -(-m // bm)),
               threads=threads)
    def kern(A, B, C):
        bx, by = T.program_id(0), T.program_id(1)
        A_s = T.alloc_shared((bk, bm) if ta else (bm, bk), dtype)
        B_s = T.alloc_shared((bn, bk) if tb else (bk, bn), dtype)
        C_f = T.alloc_fragment((bm, bn), jnp.float32)
        T.fill(C_f, fill)
        steps = -(-k // bk)
        for ko in (T.serial(steps) if serial else T.Pipelined(steps, num_stages=stages)):
            T.copy(A[T.ds(ko * bk, bk), T.ds(by * bm, bm)] if ta else A[T.ds(by * bm, bm), T.ds(ko * bk, bk)], A_s)
            T.copy(B[T.ds(bx * bn, bn), T.ds(ko * bk, bk)] if tb else B[T.ds(ko * bk, bk), T.ds(bx * bn, bn)], B_s)
            T.gemm(A_s, B_s, C_f, transpose_A=ta, transpose_B=tb)
        T.copy(C_f, C[T.ds(by * bm, bm), T.ds(bx * bn, bn)])

    return kern


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("m,n,k,tiles", [
    (1024, 1024, 512, (128, 256, 64, 4, 256)),  # examples/gemm.py's tiles: 2 x 4 warps of 64 x 64
    (512, 768, 1024, (256, 128, 64, 3, 256)),
    (256, 512, 192, (64, 64, 64, 2, 128)),
    (384, 256, 256, (128, 128, 128, 2, 128)),
    (512, 512, 256, (128, 128, 32, 4, 128)),  # 64-byte rows: the 4-chunk swizzle
    (256, 384, 320, (64, 128, 16, 3, 256)),  # 32-byte rows: the 2-chunk swizzle, 2 x 4 warps of 32 x 32
])
def test_mma_gemm_matches_jnp_dot(mma_lowering, dtype, m, n, k, tiles):
    bm, bn, bk, stages, threads = tiles
    kern = _tile_gemm(m, n, k, bm, bn, bk, stages, threads, dtype)
    a, b = _inputs((m, k), (k, n), dtype, m + n + k)
    assert _uses_mma(kern, a, b)
    _close(_poisoned_call(jax.jit(kern), a, b), _ref(a) @ _ref(b), dtype)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("ta,tb,bk", [(True, False, 64), (False, True, 64), (True, True, 32), (True, True, 128)])
def test_mma_gemm_transposed_operands(mma_lowering, dtype, ta, tb, bk):
    m, n, k = 256, 384, 512
    kern = _tile_gemm(m, n, k, 128, 128, bk, 3, 256, dtype, out_dtype="float32", ta=ta, tb=tb)
    a, b = _inputs((k, m) if ta else (m, k), (n, k) if tb else (k, n), dtype, 7 + bk)
    assert _uses_mma(kern, a, b)
    af, bf = _ref(a), _ref(b)
    _close(_poisoned_call(jax.jit(kern), a, b), (af.T if ta else af) @ (bf.T if tb else bf), dtype)


def test_mma_serial_loop_fill_and_many_blocks(mma_lowering):
    """T.serial (one stage), a non-zero fill, float32 output, 2 warps per block, 96 blocks."""
    m, n, k = 768, 512, 96
    kern = _tile_gemm(m, n, k, 32, 128, 32, 1, 64, "float16", out_dtype="float32", serial=True, fill=0.5)
    a, b = _inputs((m, k), (k, n), "float16", 21)
    assert _uses_mma(kern, a, b)
    _close(_poisoned_call(jax.jit(kern), a, b), _ref(a) @ _ref(b) + 0.5, "float16")


def test_mma_ragged_k(mma_lowering):
    """K = 200 in steps of 64: the last step's tiles overhang and are zero-filled (cp.async src-size 0)."""
    m, n, k = 256, 256, 200
    kern = _tile_gemm(m, n, k, 128, 128, 64, 3, 256, "bfloat16", out_dtype="float32")
    a, b = _inputs((m, k), (k, n), "bfloat16", 5)
    assert _uses_mma(kern, a, b)
    _close(_poisoned_call(jax.jit(kern), a, b), _ref(a) @ _ref(b), "bfloat16")


@pytest.mark.parametrize("m,n,k", [(300, 500, 777), (256, 300, 512), (130, 250, 45)])
def test_mma_unaligned_rows_take_plain_loads(mma_lowering, m, n, k):
    """An odd K (A's rows off the 16-byte grid) or N (B's): examples/gemm.py's default tiles on the mma.sync
    lowering, the unaligned operand copied by plain loads (ts_copy16_u16; the portable path before, whose
    accumulator in shared memory did not fit beside 128x256 tiles)."""
    kern = gemm_example.gemm(m, n, k, jnp.dtype("bfloat16"), block_m=128, block_n=256, block_k=64, num_stages=3)
    a, b = _inputs((m, k), (k, n), "bfloat16", m + n + k)
    src = generate_cuda(kern.trace(a, b), "sm_90").source
    assert "ts_mma_16816_" in src and "ts_copy16_u16(" in src and "ts_wgmma_" not in src
    _close(_poisoned_call(jax.jit(kern), a, b), _ref(a) @ _ref(b), "bfloat16")


@pytest.mark.parametrize("dtype,cfg", [
    ("bfloat16", dict(m_per_pe=128, k=256, n_per_pe=128)),
    ("float16", dict(m_per_pe=256, k=512, n_per_pe=128, block_m=64, block_n=64, block_k=64)),
    ("bfloat16", dict(m_per_pe=64, k=128, n_per_pe=64, block_m=32, block_n=32, threads=128)),
])
def test_allgather_gemm_takes_mma_and_matches(gpu_mesh, dtype, cfg, mma_lowering):
    """The communicating kernel (putmem_signal_nbi_block, signal_wait_until, then the GEMM) on the
    mma.sync lowering, asked for (by default it takes the Hopper plan: tests/gpu/test_overlap_gpu.py);
    checked against a float64 product."""
    cfg = dict(cfg)
    m, k, n = cfg.pop("m_per_pe"), cfg.pop("k"), cfg.pop("n_per_pe")
    kern = ag_gemm.allgather_gemm(m, k, n, gpu_mesh.size, jnp.dtype(dtype), **cfg)
    ir = kern.trace(jax.ShapeDtypeStruct((m, k), dtype), jax.ShapeDtypeStruct((k, n), dtype), mesh_axes=("x",),
                    num_pes=gpu_mesh.size)
    mod = generate_cuda(ir, "sm_90")
    assert "ts_mma_16816_" in mod.source and mod.uses_nvshmem, mod.notes
    assert ag_gemm.check(gpu_mesh, m=m, k=k, n=n, dtype=dtype, seed=m + k, **cfg)


def test_a_left_zero_counter_serves_launch_after_launch():
    """`T.alloc(..., level="global", left_zero=True)`: the kernel ends without the pass that zeroes its
    scratch, so each launch's tickets are right only because the last block took the count back."""
    from tests.compute.test_fetch_add import BLOCKS, _counted

    kern = _counted(take_back=-BLOCKS)
    mod = generate_cuda(kern.trace(jax.ShapeDtypeStruct((BLOCKS,), jnp.int32)), "sm_90")
    assert mod.scratch_bytes > 0 and "no end of call: the kernel leaves its scratch" in mod.source
    run = jax.jit(kern)
    for launch in range(4):
        tickets = np.asarray(run(jnp.arange(BLOCKS, dtype=jnp.int32) + launch))
        assert sorted(tickets.tolist()) == list(range(BLOCKS)), (launch, tickets)
