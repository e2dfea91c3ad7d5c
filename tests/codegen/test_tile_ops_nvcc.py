"""nvcc builds the generated CUDA of the element-wise tile kernels (the CPU tests' kernels in
tests/compute/test_elementwise.py, test_reductions.py, test_cumsum.py, test_atomics.py, and
examples/softmax.py):
every value operation, conversion, reduction and atomic in every dtype the tests use. Kernels
without communication compile without NVSHMEM; the ones with a barrier_all need its headers.
The generated text is also checked for what the lowering promises (no FMA contraction, the
per-thread bounds check only where the verifier could not prove the index)."""

from __future__ import annotations

import os
from concurrent.futures import Future, ThreadPoolExecutor, wait

import ml_dtypes
import numpy as np
import pytest

from jax_tilescale import language as T
from jax_tilescale.codegen import CudaModule, generate_cuda
from jax_tilescale.compiler import compile_cubin
from jax_tilescale.ir import KernelIR, verify_kernel
from jax_tilescale.language.tracing import trace_kernel
from tests.compute.test_cumsum import BLOCKS, M, N, cumsum_slice, cumsum_tiles
from tests.compute.test_cumsum import CASES as CUMSUM_CASES
from tests.conftest import missing_tool

BF16 = np.dtype(ml_dtypes.bfloat16)
FLOATS = {"f32": np.dtype(np.float32), "f16": np.dtype(np.float16), "bf16": BF16}


def build(fn, inputs, outputs, grid=(1,), threads=128, num_pes=1) -> KernelIR:
    return verify_kernel(trace_kernel(fn, name=fn.__name__, inputs=inputs, outputs=outputs, grid=grid,
                                      threads=threads, mesh_axes=("x",), num_pes=num_pes))


# ---- the kernels ----------------------------------------------------------------------------------


def scaled_sum(dtype, m=37, n=53):
    def scaled_sum(a, b, c):
        a_s, b_frag, c_frag = T.alloc_shared((m, n), dtype), T.alloc_fragment((m, n), dtype), T.alloc_fragment((m, n),
                                                                                                           dtype)
        T.copy(a, a_s)
        T.copy(b, b_frag)
        for i, j in T.Parallel(m, n):
            c_frag[i, j] = a_s[i, j] * 2 + b_frag[i, j]
        T.copy(c_frag, c)

    return build(scaled_sum, [((m, n), dtype)] * 2, [((m, n), dtype)])


def every_op(dtype, m=37, n=53):
    """Every binary and unary operation of the CPU tests, on global inputs, into float32 outputs
    and a tile of the dtype."""
    def every_op(x, y, o0, o1, o2, o3, o4, o5, o6, o7, r):
        outs = (o0, o1, o2, o3, o4, o5, o6, o7)
        s = T.alloc_shared((m, n), dtype)
        T.copy(x, s)
        for i, j in T.Parallel(m, n):
            a, b = x[i, j], y[i, j]
            for out, v in zip(outs, (a + b, a - b, a * b, a / b, T.max(a, b), T.min(a, b), 1.5 - a, -a * b)):
                out[i, j] = v
            s[i, j] = T.exp(s[i, j]) + T.exp2(s[i, j] * T.cast(1.4426950408889634, "float32")) + T.log(T.abs(s[i, j])) \
                - abs(-s[i, j])
        T.copy(s, r)

    return build(every_op, [((m, n), dtype)] * 2, [((m, n), np.float32)] * 8 + [((m, n), dtype)])


def where_cast_index(m=37, n=53):
    def where_cast_index(x, sel, rounded, trunc, idx):
        for i, j in T.Parallel(m, n):
            sel[i, j] = T.where((x[i, j] > 0) & (i < j), x[i, j] * 3, T.where(i == j, -1.0, x[i, j]))
            rounded[i, j] = T.cast(x[i, j] * 100, "bfloat16")
            trunc[i, j] = T.cast(x[i, j] * 100, np.int32)
            idx[i, j] = i * n + j + T.cast(x[i, j] < 0, "float32") * 0.5

    return build(where_cast_index, [((m, n), np.float32)],
                 [((m, n), np.float32), ((m, n), BF16), ((m, n), np.int32), ((m, n), np.float32)])


def guarded_tail(n=53, tile=16):
    tiles = T.ceildiv(n, tile)

    def guarded_tail(x, y):
        bx = T.program_id(0)
        for i in T.Parallel(tile):
            g = bx * tile + i
            y[g] = T.where(g < n, x[T.min(g, n - 1)] * 2, 0.0) + T.where(g >= n, 7.0, 0.0)
            y[g] = y[g] + T.ceildiv(g - 3 * bx, 3) * 0

    return build(guarded_tail, [((n,), np.float32)], [((tiles * tile,), np.float32)], grid=(tiles,))


def serial_in_parallel(m=40, n=24, bm=8):
    def serial_in_parallel(x, y, rowsum):
        bx = T.program_id(0)
        acc = T.alloc_fragment((bm,), np.float32)
        for i, j in T.Parallel(bm, n):
            y[bx * bm + i, j] = x[bx * bm + i, j] * x[bx * bm + i, j] - 1.0
        for i in T.Parallel(bm):
            acc[i] = 0.0
            for c in T.serial(n):
                acc[i] = acc[i] + x[bx * bm + i, c]
            rowsum[bx * bm + i] = acc[i]

    return build(serial_in_parallel, [((m, n), np.float32)], [((m, n), np.float32), ((m,), np.float32)],
                 grid=(m // bm,))


def integers():
    def integers(a, b, off, out, small, wide):
        for i in T.Parallel(64):
            out[i] = a[i] * b[i] + 7
            small[i] = T.cast(T.cast(a[i], "float32") * 1.5, "int8")
            wide[i] = T.cast(a[i], np.float64) / 3.0 + a[i * 0 + T.load(off[0])]  # a run-time index: checked

    return build(integers, [((64,), np.int32), ((64,), np.int32), ((1,), np.int32)],
                 [((64,), np.int32), ((64,), np.int8), ((64,), np.float64)])


def reductions(dtype, dim, clear):
    m, n = 37, 53
    out = (m,) if dim == 1 else (n,)

    def reductions(x, init, y0, y1, y2, y3):
        s = T.alloc_shared((m, n), dtype)
        T.copy(x, s)
        for fn, y in zip((T.reduce_sum, T.reduce_max, T.reduce_min, T.reduce_absmax), (y0, y1, y2, y3)):
            r = T.alloc_fragment(out, dtype if not clear else np.float32)
            T.copy(init, r)
            fn(s, r, dim=dim, clear=clear)
            T.copy(r, y)

    return build(reductions, [((m, n), dtype), (out, dtype if not clear else np.float32)],
                 [(out, dtype if not clear else np.float32)] * 4)


def reduce_3d_and_ints():
    def reduce_3d_and_ints(x, xi, y, z, zi):
        s = T.alloc_shared((4, 6, 5), np.float32)
        r = T.alloc_fragment((4, 2, 5), np.float32)
        part = T.alloc_fragment((8,), np.float32)
        si = T.alloc_shared((16, 64), np.int32)
        ri = T.alloc_fragment((16,), np.int32)
        T.copy(x, s)
        T.reduce_sum(s, r[:, 1:2, :], dim=1)
        T.copy(r[:, 1:2, :], y)
        T.reduce_max(s[1:4, 2, :], part[2:5], dim=2)
        T.copy(part[2:5], z)
        T.copy(xi, si)
        T.reduce_sum(si, ri, dim=1)
        T.copy(ri, zi)

    return build(reduce_3d_and_ints, [((4, 6, 5), np.float32), ((16, 64), np.int32)],
                 [((4, 1, 5), np.float32), ((3,), np.float32), ((16,), np.int32)])


ATOMIC_DTYPES = {"f32": np.float32, "f16": np.float16, "bf16": BF16, "f64": np.float64, "i32": np.int32,
                 "u32": np.uint32, "i64": np.int64, "u64": np.uint64}


def element_atomics(dtype, n=96, slots=6):
    def element_atomics(v, s, init, add, mx, mn):
        a, b, c = (T.alloc_shared((slots,), dtype) for _ in range(3))
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
        T.atomic_add(add[0], 1)  # once per block

    return build(element_atomics, [((n,), dtype), ((n,), np.int32), ((slots,), dtype)], [((slots,), dtype)] * 3)


def region_atomics(blocks=3, m=8, n=16):
    def region_atomics(x, y, z):
        bx = T.program_id(0)
        acc = T.alloc_symmetric((m, n), np.float32)
        top = T.alloc_symmetric((m, n), np.float32)
        frag = T.alloc_fragment((m, n), np.float32)
        T.copy(x[T.ds(bx * m, m), :], frag)
        T.atomic_add(acc[:, :], frag)
        T.atomic_max(top, frag)
        T.barrier_all()
        for i, j in T.Parallel(m, n):
            y[bx * m + i, j] = acc[i, j]
            z[bx * m + i, j] = top[i, j]

    return build(region_atomics, [((blocks * m, n), np.float32)], [((blocks * m, n), np.float32)] * 2,
                 grid=(blocks,), num_pes=2)


def histogram(n=64, bins=10, blocks=4):
    def histogram(idx, hist):
        bx = T.program_id(0)
        acc = T.alloc_symmetric((bins,), np.int32)
        for i in T.Parallel(n):
            T.atomic_add(acc[idx[bx, i]], 1)
        T.barrier_all()
        for b in T.Parallel(bins):
            hist[bx, b] = acc[b]

    return build(histogram, [((blocks, n), np.int32)], [((blocks, bins), np.int32)], grid=(blocks,))


def per_thread_branches():
    def per_thread_branches(x, y):
        tx = T.thread_id()
        for i in T.Parallel(4):
            y[i] = x[i]
        with T.If(tx < 5):
            T.atomic_add(y[0], x[3])
        with T.If(tx == 33):
            y[1] = x[2] * 2.0

    return build(per_thread_branches, [((4,), np.float32)], [((4,), np.float32)], threads=64)


def softmax_kernel():
    from tests.conftest import load_example

    softmax = load_example("softmax")
    return softmax.softmax_ir(m=96, n=200, dtype=BF16, block_m=8)


def _cases() -> dict[str, object]:
    cases: dict[str, object] = {}
    for name, d in FLOATS.items():
        cases[f"scaled_sum-{name}"] = lambda d=d: scaled_sum(d)
        cases[f"every_op-{name}"] = lambda d=d: every_op(d)
        for dim in (0, 1):
            cases[f"reductions-{name}-dim{dim}"] = lambda d=d, dim=dim: reductions(d, dim, clear=dim == 1)
    cases["where_cast_index"] = where_cast_index
    cases["guarded_tail"] = guarded_tail
    cases["serial_in_parallel"] = serial_in_parallel
    cases["integers"] = integers
    cases["reduce_3d_and_ints"] = reduce_3d_and_ints
    for dtype, out_dtype, inplace in CUMSUM_CASES:
        for dim, reverse in ((0, False), (1, True)):
            name = f"cumsum-{dtype.name}-{out_dtype.name}-dim{dim}{'-reverse' if reverse else ''}"
            cases[name] = lambda d=dtype, o=out_dtype, i=inplace, dim=dim, r=reverse: build(
                cumsum_tiles(d, o, dim, r, i), [((BLOCKS * M, N), d)], [((BLOCKS * M, N), o)], grid=(BLOCKS,))
    cases["cumsum_slice"] = lambda: build(cumsum_slice, [((M, N), np.float32)], [((M, N), np.float32)])
    for name, d in ATOMIC_DTYPES.items():
        cases[f"element_atomics-{name}"] = lambda d=d: element_atomics(np.dtype(d))
    cases["region_atomics"] = region_atomics
    cases["histogram"] = histogram
    cases["per_thread_branches"] = per_thread_branches
    cases["softmax"] = softmax_kernel
    return cases


CASES = _cases()


@pytest.fixture(scope="module")
def built(session_cache, require_nvcc) -> dict[str, tuple[CudaModule, Future]]:
    """Every case compiling (a future of its cubin); NVSHMEM cases need its headers."""
    from jax_tilescale.compiler.toolchain import find_nvshmem

    modules = {name: generate_cuda(make()) for name, make in CASES.items()}
    try:
        find_nvshmem()
        have_nvshmem = True
    except Exception:
        have_nvshmem = False
    with ThreadPoolExecutor(max_workers=max(2, min(8, os.cpu_count() or 2))) as pool:
        futures = {
            name: pool.submit(compile_cubin, m.source, arch="sm_90", entry=m.entry, nvshmem=m.uses_nvshmem)
            for name, m in modules.items() if have_nvshmem or not m.uses_nvshmem
        }
        wait(futures.values())
    return {name: (modules[name], futures.get(name)) for name in modules}


@pytest.mark.parametrize("name", list(CASES))
def test_tile_kernel_builds_to_a_cubin(built, name):
    module, future = built[name]
    if future is None:
        missing_tool("needs NVSHMEM's headers (barrier_all), which this machine does not have")
    data = future.result().read_bytes()
    assert data[:4] == b"\x7fELF" and module.entry.encode() + b"\0" in data


def test_generated_code_keeps_ieee_operations_and_checks_only_unproven_indices(built):
    src = built["every_op-bf16"][0].source
    body = src[src.index('extern "C"'):]
    for fn in ("__fadd_rn", "__fsub_rn", "__fmul_rn", "__fdiv_rn", "ts_vmax", "ts_vmin", "expf", "exp2f", "logf",
               "fabsf", "ts_rep(reinterpret_cast<__nv_bfloat16*>", "__float2bfloat16_rn"):
        assert fn in body, fn
    assert "ts_elem_index" not in body  # every index is affine in the loop variables: proven in bounds
    integers_src = built["integers"][0].source
    assert "ts_elem_index(" in integers_src[integers_src.index('extern "C"'):]  # the T.load index
    # x[min(bx * 16 + i, 52)]: not affine, but its interval [0, 52] (ir/ranges.py value_bounds) is inside: no check
    # (a check is a call to a noinline trap, which would serialize a kernel's wgmma pipeline: ptxas C7510)
    tail = built["guarded_tail"][0].source
    assert "ts_elem_index(" not in tail[tail.index('extern "C"'):] and "ts_min(((ts_bx * 16) + ts_i0), 52)" in tail
    red = built["reductions-bf16-dim1"][0].source
    assert "__shfl_xor_sync(0xffffffffu, ts_acc, ts_s)" in red and "ts_vmax(" in red


def test_cumsum_adds_in_order_without_contraction(built):
    """One thread per line, the running sum added with the `_rn` intrinsics (the interpreter's bits)."""
    body = built["cumsum-bfloat16-float32-dim1-reverse"][0].source
    body = body[body.index('extern "C"'):]
    assert "ts_acc = __fadd_rn(ts_acc, " in body and "const int64_t ts_k = 52 - ts_r;" in body
    ints = built["cumsum-int32-int32-dim0"][0].source
    assert "ts_acc = ts_iadd(ts_acc, " in ints[ints.index('extern "C"'):]


def test_once_per_block_statements_take_the_shape_per_thread_code_expects(built):
    """Outside a Parallel: `if (threadIdx.x == 0) {` then a block barrier (common.thread0 and
    ctx.block_sync, which give per-thread code instead inside thread-dependent ifs)."""
    src = built["element_atomics-f32"][0].source
    tail = src[src.rindex("atomic_add(add[0], "):]
    assert "if (threadIdx.x == 0) {" in tail and "__syncthreads();" in tail
    assert "ts_atomic_add(&reinterpret_cast<float*>(p_add)[0], (float)(1.0f));" in tail  # the 1 took float32
