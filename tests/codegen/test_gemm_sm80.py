"""The mma.sync GEMM lowering (codegen/gemm_sm80.py): which kernels take it (and why not), how the
lowering is chosen or forced, its results computed by the CPU emulator of the generated CUDA
(tests/codegen/emulator: bit-exact on integer-valued data), and nvcc builds for sm_80 and sm_90
without register spills, allgather_gemm's communicating kernel included."""

from __future__ import annotations

import dataclasses
import os
import re
from concurrent.futures import ThreadPoolExecutor

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_tilescale as ts
from jax_tilescale import language as T
from jax_tilescale.codegen import generate_cuda
from jax_tilescale.codegen.gemm_select import LOWERING_VAR, requested_lowering
from jax_tilescale.codegen.gemm_sm80 import Sm80Plan, WarpTiling, plan_with_reasons, warp_tiling
from jax_tilescale.codegen.gemm_table import swapped_config
from jax_tilescale.compiler import compile_cubin, kernel_resources, ptxas_report
from jax_tilescale.errors import KernelTraceError
from tests.codegen import emulator
from tests.codegen.gemm_cases import Case, example_case, gemm_case, np_dtype
from tests.codegen.kernels import serial_allgather_gemm
from tests.conftest import load_example

gemm_example = load_example("gemm")
S = jax.ShapeDtypeStruct
BF16, F16, F32 = jnp.bfloat16, jnp.float16, jnp.float32


def nested_case(m, n, k, *, bm=64, bn=32, bk=32, threads=128, dtype=F16) -> Case:
    """allgather_gemm's GEMM without the communication: per row block, a T.serial loop over column
    blocks, each clearing the fragment, a T.Pipelined loop over K, and the copy out."""

    @ts.kernel(out_shape=S((m, n), dtype), grid=(m // bm,), threads=threads)
    def kern(A, B, C):
        bx = T.program_id(0)
        a_s = T.alloc_shared((bm, bk), dtype)
        b_s = T.alloc_shared((bk, bn), dtype)
        acc = T.alloc_fragment((bm, bn), F32)
        rows = T.ds(bx * bm, bm)
        for nt in T.serial(n // bn):
            T.clear(acc)
            for ko in T.Pipelined(k // bk, num_stages=3):
                T.copy(A[rows, T.ds(ko * bk, bk)], a_s)
                T.copy(B[T.ds(ko * bk, bk), T.ds(nt * bn, bn)], b_s)
                T.gemm(a_s, b_s, acc)
            T.copy(acc, C[rows, T.ds(nt * bn, bn)])

    return Case(kern, ((m, k), (k, n)), (dtype, dtype), (m, n), lambda a, b: a @ b)


def through_memory_case(m, n, k, *, bm=48, bn=128, bk=64, threads=256, dtype=BF16) -> Case:
    """The fragment loaded from a float32 input, stored to a shared tile in `dtype`, then copied out
    by the portable rules; 48-row tiles leave the copies' last pass partial."""

    @ts.kernel(out_shape=S((m, n), dtype), grid=(n // bn, m // bm), threads=threads)
    def kern(A, B, Cin, C):
        bx, by = T.program_id(0), T.program_id(1)
        A_s = T.alloc_shared((bm, bk), dtype)
        B_s = T.alloc_shared((bk, bn), dtype)
        C_s = T.alloc_shared((bm, bn), dtype)
        C_f = T.alloc_fragment((bm, bn), F32)
        T.copy(Cin[T.ds(by * bm, bm), T.ds(bx * bn, bn)], C_f)
        for ko in T.Pipelined(k // bk, num_stages=2):
            T.copy(A[T.ds(by * bm, bm), T.ds(ko * bk, bk)], A_s)
            T.copy(B[T.ds(ko * bk, bk), T.ds(bx * bn, bn)], B_s)
            T.gemm(A_s, B_s, C_f)
        T.copy(C_f, C_s)
        T.copy(C_s, C[T.ds(by * bm, bm), T.ds(bx * bn, bn)])

    return Case(kern, ((m, k), (k, n), (m, n)), (dtype, dtype, F32), (m, n), lambda a, b, c: a @ b + c)


def _mma(mod) -> bool:
    return "ts_mma_16816_" in mod.source and "ts_cp_async_cg16(" in mod.source


# ---- choosing the lowering -----------------------------------------------------------------------


def _example_ir(m=1024, n=1024, k=512, dtype=BF16, **cfg):
    """examples/gemm.py's kernel (grouped tile order; its // and % starts are proven inside)."""
    return gemm_example.gemm(m, n, k, jnp.dtype(dtype), **cfg).trace(S((m, k), dtype), S((k, n), dtype))


def _ag_ir(npes=2, m=128, k=128, n=64, dtype=BF16, **blocks):
    """A communicating kernel whose GEMM loop sits in a T.serial loop: the Hopper plan leaves it to mma.sync."""
    return serial_allgather_gemm(m, k, n, npes, np.dtype(dtype), **blocks)


@pytest.mark.parametrize("arch", ["sm_80", "sm_86", "sm_89"])
def test_ampere_and_ada_take_mma(arch):
    mod = generate_cuda(_example_ir(block_n=128, num_stages=3), arch)
    assert _mma(mod) and mod.arch == arch and mod.threads == 256 and mod.tensor_maps == () and not mod.notes
    assert "__syncthreads()" in mod.source and "bar.sync 1" not in mod.source  # the block's own threads only


def test_hopper_prefers_wgmma_and_forcing_each_lowering(monkeypatch):
    ir = _example_ir(block_m=128, block_n=256)  # the 128 x 256 tiles, not the table's pick
    assert generate_cuda(ir, "sm_90").arch == "sm_90a"
    mma = generate_cuda(ir, "sm_90", gemm_lowering="mma")
    assert _mma(mma) and mma.arch == "sm_90" and mma.threads == 256 and "ts_wgmma_" not in mma.source
    portable = generate_cuda(ir, "sm_90", gemm_lowering="portable")
    assert not _mma(portable) and portable.arch == "sm_90" and "ts_wgmma" not in portable.source
    # Forced where it cannot apply: the portable path, whose 128 x 256 float32 accumulator in shared memory
    # does not fit an A100's 163 KiB, so generating for sm_80 is refused, saying why the loop went there.
    with pytest.raises(KernelTraceError, match=r"(?s)on sm_80.*is not sm_90"):
        generate_cuda(ir, "sm_80", gemm_lowering="sm90")
    monkeypatch.setenv(LOWERING_VAR, "mma")
    assert _mma(generate_cuda(ir, "sm_90"))
    assert generate_cuda(ir, "sm_90", gemm_lowering="auto").arch == "sm_90a"  # the argument wins
    monkeypatch.setenv(LOWERING_VAR, "tensor cores please")
    with pytest.raises(ValueError, match=LOWERING_VAR):
        generate_cuda(ir, "sm_90")
    assert requested_lowering(" MMA ") == "mma"


def test_communicating_kernel_takes_mma_on_hopper():
    mod = generate_cuda(_ag_ir(), "sm_90")
    assert _mma(mod) and mod.arch == "sm_90" and mod.uses_nvshmem and mod.threads == 128
    assert any(n.startswith("mma.sync path, not wgmma: loop at") and "top-level `if`" in n for n in mod.notes), \
        mod.notes
    assert "// mma.sync path, not wgmma" in mod.source


def test_plan_facts_for_the_layout():
    ir = _example_ir(block_m=128, block_n=256, block_k=64, num_stages=4)
    plan, reasons = plan_with_reasons(ir, "sm_90")
    assert isinstance(plan, Sm80Plan) and not reasons and not plan.notes
    assert plan.tilings[plan.loops[0].acc] == WarpTiling(2, 4, 64, 64)
    assert sorted(plan.stage_buffers().values()) == [4 * 128 * 64 * 2, 4 * 64 * 256 * 2] and plan.barrier_words() == 0
    mod = generate_cuda(ir, "sm_90", gemm_lowering="mma")
    assert mod.smem_bytes == 4 * (128 * 64 + 64 * 256) * 2 + 1024  # the rings, the alignment slack
    assert "float ts_acc_C_f[4][8][4] = {};" in mod.source


def test_rings_shrink_to_fit_smaller_shared_memories():
    plan, _ = plan_with_reasons(_example_ir(block_m=128, block_n=256, block_k=64, num_stages=4), "sm_86")
    assert plan is not None and plan.loops[0].stages == 2
    assert plan.notes and "2 stages instead of 4" in plan.notes[0]
    plan, _ = plan_with_reasons(_example_ir(block_m=128, block_n=256, block_k=64, num_stages=4), "sm_80")
    assert plan is not None and plan.loops[0].stages == 3


@pytest.mark.parametrize("m,n,warps,want", [
    (128, 256, 8, WarpTiling(2, 4, 64, 64)),
    (256, 128, 8, WarpTiling(4, 2, 64, 64)),
    (64, 64, 4, WarpTiling(2, 2, 32, 32)),
    (128, 128, 4, WarpTiling(2, 2, 64, 64)),
    (48, 128, 8, WarpTiling(1, 8, 48, 16)),
    (64, 64, 3, None),  # no grid of 3 warps divides it
    (128, 256, 4, None),  # 256 accumulators per thread: would spill
])
def test_warp_tiling(m, n, warps, want):
    assert warp_tiling(m, n, warps) == want


@pytest.mark.parametrize("kw,pattern", [
    (dict(dtype=F32), r"fp16/bf16"),
    (dict(threads=96), r"no grid of 3 warps .* at most 128 accumulators per thread: take threads=128 \(or 256, "),
    (dict(threads=32, bm=32, bn=32, bk=512), r"64 16-byte chunks per row do not divide 32 threads"),
])
def test_refusals(kw, pattern):
    plan, reasons = plan_with_reasons(gemm_case(256, 256, 512, **kw).ir(), "sm_80")
    assert plan is None and any(re.search(pattern, r) for r in reasons), reasons


def test_unaligned_sources_take_plain_loads_and_other_uses_are_refused():
    def kernel(extra=None, shift=0, cols=256):
        @ts.kernel(out_shape=S((128, 128), F32), grid=(1,), threads=128)
        def kern(A, B, C):
            A_s = T.alloc_shared((128, 32), BF16)
            B_s = T.alloc_shared((32, 128), BF16)
            C_f = T.alloc_fragment((128, 128), F32)
            T.clear(C_f)
            for ko in T.Pipelined(4, num_stages=2):
                T.copy(A[:, T.ds(ko * 32 + shift, 32)], A_s)
                T.copy(B[T.ds(ko * 32, 32), :], B_s)
                T.gemm(A_s, B_s, C_f)
            if extra is not None:
                extra(C_f, C)
            T.copy(C_f, C)

        return plan_with_reasons(kern.trace(S((128, cols), BF16), S((128, 128), BF16)), "sm_80")

    plan, _ = kernel()
    assert plan is not None and plan.loops[0].a.aligned and plan.loops[0].b.aligned
    # a start of 4 elements (8 bytes), rows of 520 bytes: A copied by plain loads, B still by cp.async
    for plan, reasons in (kernel(shift=4), kernel(cols=260)):
        assert plan is not None, reasons
        assert not plan.loops[0].a.aligned and plan.loops[0].b.aligned
    plan, reasons = kernel(extra=lambda c, out: T.fill(c[0:16, :], 1.0))
    assert plan is None and any("other than clear/fill/whole copy" in r for r in reasons), reasons


def test_ragged_edges_take_mma():
    """Loads that may overhang zero-fill (cp.async src-size 0); fragment stores are guarded (the
    emulated cases run both)."""
    plan, reasons = plan_with_reasons(gemm_case(100, 88, 72, bm=64, bn=64, bk=32, threads=128).ir(), "sm_80")
    assert plan is not None, reasons
    assert plan.loops[0].a.copy.clip_dims == (0, 1) and plan.loops[0].b.copy.clip_dims == (0, 1)
    mod = generate_cuda(gemm_case(128, 128, 200, bm=64, bn=64, bk=64, threads=128).ir(), "sm_80")
    assert "ts_cp_async_cg16_zfill(" in mod.source and "ts_a_cok" in mod.source and "ts_b_lr" in mod.source


def test_parallel_use_of_the_fragment_keeps_the_portable_path():
    @ts.kernel(out_shape=S((64, 64), F32), grid=(1,), threads=128)
    def kern(A, B, C):
        A_s = T.alloc_shared((64, 32), F16)
        B_s = T.alloc_shared((32, 64), F16)
        C_f = T.alloc_fragment((64, 64), F32)
        T.clear(C_f)
        for ko in T.Pipelined(2, num_stages=2):
            T.copy(A[:, T.ds(ko * 32, 32)], A_s)
            T.copy(B[T.ds(ko * 32, 32), :], B_s)
            T.gemm(A_s, B_s, C_f)
        for i, j in T.Parallel(64, 64):
            C[i, j] = C_f[i, j] * 2.0

    mod = generate_cuda(kern.trace(S((64, 64), F16), S((64, 64), F16)), "sm_80")
    assert not _mma(mod) and any("other than clear/fill/whole copy" in n for n in mod.notes), mod.notes


# ---- the generated code, run by the CPU emulator --------------------------------------------------


EMULATED = {
    "bf16 128x128x64 3 stages": lambda: gemm_case(256, 256, 256),
    "fp16 128x256x64 4 stages": lambda: gemm_case(256, 512, 192, bn=256, stages=4, dtype=F16),
    "A^T B^T bk32 fp32 out": lambda: gemm_case(128, 128, 128, bm=64, bn=64, bk=32, threads=128, ta=True, tb=True,
                                               stages=2, out_dtype=F32),
    "A^T bk16 (2-chunk rows)": lambda: gemm_case(128, 256, 64, bm=64, bn=128, bk=16, threads=128, ta=True),
    "B^T more stages than steps": lambda: gemm_case(128, 128, 64, bm=64, bn=64, bk=32, threads=128, tb=True,
                                                    stages=4, dtype=F16),
    "T.serial, 2 warps, fill": lambda: gemm_case(64, 128, 96, bm=32, bn=64, bk=32, threads=64, serial=True,
                                                 fill=0.5, out_dtype=F32),
    "clear_accum, // and % starts": lambda: gemm_case(128, 128, 256, bm=64, bn=64, bk=64, threads=128,
                                                      clear_accum=True, non_affine=True, out_dtype=F32),
    "odd row stride: scalar stores": lambda: gemm_case(128, 128, 64, bm=64, bn=64, bk=32, threads=128,
                                                       out_dtype=F32, out_cols=129),
    "3 warps, 6-chunk rows, fill": lambda: gemm_case(64, 48, 96, bm=64, bn=48, bk=32, threads=96, stages=2,
                                                     fill=0.5),
    "nested like allgather_gemm": lambda: nested_case(128, 96, 128),
    "load, store to shared, ragged copies": lambda: through_memory_case(96, 256, 128),
    "ragged K: clipped loads zero-filled": lambda: gemm_case(128, 128, 200, bm=64, bn=64, bk=64, threads=128,
                                                             out_dtype=F32),
    "ragged K, A^T B^T, fp16": lambda: gemm_case(128, 128, 72, bm=64, bn=64, bk=32, threads=128, ta=True,
                                                 tb=True, dtype=F16, out_dtype=F32, stages=2),
    "ragged M, N, K: clipped pair stores": lambda: gemm_case(100, 88, 72, bm=64, bn=64, bk=32, threads=128,
                                                             out_dtype=F32),
    # sources off the 16-byte grid: plain 2-byte loads into the ring (ts_copy16_u16), chunks across the buffer's
    # end partly zero
    "odd K: A's rows 154 bytes, ragged": lambda: gemm_case(100, 88, 77, bm=64, bn=64, bk=32, threads=128,
                                                         out_dtype=F32),
    "odd N: B's rows 200 bytes, ragged": lambda: gemm_case(128, 100, 96, bm=64, bn=64, bk=32, threads=128,
                                                         stages=2, out_dtype=F32),
    "odd K, A^T B^T, fp16": lambda: gemm_case(72, 88, 45, bm=64, bn=64, bk=32, threads=128, ta=True, tb=True,
                                              dtype=F16, out_dtype=F32),
    "ragged M, odd row stride: clipped scalar stores": lambda: gemm_case(100, 128, 64, bm=64, bn=64, bk=32,
                                                                         threads=128, out_cols=129),
    # examples/gemm.py's swapped product (C^T = B^T A^T, stored by one transposed copy from registers), 3 stages
    "swapped, 13 tokens, ragged": lambda: example_case(13, 200, 300,
                                                       dataclasses.replace(swapped_config(13), num_stages=3)),
    "swapped, 11 tokens, odd N, clipped on both sides": lambda: example_case(
        11, 131, 96, dataclasses.replace(swapped_config(11), num_stages=3)),
}


def _emulate(name: str, mod) -> tuple[np.ndarray, np.ndarray]:
    """(emulated output, host reference) of EMULATED[name] built as `mod`, on the case's integer-valued data (seeded
    by the name: the same data for a mutated module as for the one it came from)."""
    case = EMULATED[name]()
    rng = np.random.default_rng(len(name))
    data = [rng.integers(-3, 4, s).astype(np.float64) for s in case.shapes]  # exact sums in fp32
    out_dtype = np_dtype(case.kern.trace(*(S(s, d) for s, d in zip(case.shapes, case.dtypes))).outputs[0].dtype)
    poison = np.full(case.out_shape, np.nan, out_dtype)
    (got,) = emulator.run(mod, [x.astype(np_dtype(d)) for x, d in zip(data, case.dtypes)], [poison])
    return got, case.want(*data).astype(out_dtype)


@pytest.fixture(scope="module")
def emulated() -> dict[str, tuple]:
    """Every case's module and its emulated output (built and run in parallel)."""
    emulator.require()

    def run(name):
        mod = generate_cuda(EMULATED[name]().ir(), "sm_80")
        if not _mma(mod):
            return mod, None, None
        return (mod, *_emulate(name, mod))

    with ThreadPoolExecutor(max_workers=max(2, min(8, os.cpu_count() or 2))) as pool:
        return dict(zip(EMULATED, pool.map(run, EMULATED)))


@pytest.mark.parametrize("name", list(EMULATED))
def test_emulated_results_are_exact(emulated, name):
    mod, got, want = emulated[name]
    assert got is not None, mod.notes
    np.testing.assert_array_equal(got.astype(np.float64), want.astype(np.float64))


def test_emulator_sees_an_unaligned_chunk_cut_short(emulated):
    """The plain-load copies' element count is used: one element fewer a chunk and the product is wrong."""
    name = "odd K: A's rows 154 bytes, ragged"
    mod, got, want = emulated[name]
    assert "ts_copy16_u16(" in mod.source and got is not None
    bad = dataclasses.replace(mod, source=mod.source.replace("? ts_a_cv : 0", "? (ts_a_cv > 0 ? ts_a_cv - 1 : 0) : 0"))
    assert bad.source != mod.source
    wrong, _ = _emulate(name, bad)
    assert not np.array_equal(wrong.astype(np.float64), want.astype(np.float64))


def test_emulator_sees_a_wrong_swizzle(emulated):
    """The emulator is a real check: the same module with the ldmatrix swizzle dropped is wrong."""
    mod, _, want = emulated["bf16 128x128x64 3 stages"]
    bad = dataclasses.replace(mod, source=mod.source.replace("^ ts_xa ^ 2)", "^ 2)"))
    assert bad.source != mod.source
    got, _ = _emulate("bf16 128x128x64 3 stages", bad)
    assert not np.array_equal(got.astype(np.float64), want.astype(np.float64))


# ---- nvcc: sm_80 and sm_90, no spills --------------------------------------------------------------


# name -> (IR, the architectures to build it for): the default configurations and the
# communicating kernel for both, the variants for one each (nvcc time)
BUILDS = {
    "128x256x64 bf16 (examples/gemm.py's tiles)": (
        lambda: _example_ir(block_m=128, block_n=256, block_k=64, num_stages=4), ("sm_80", "sm_90")),
    "256x128x64 fp16": (lambda: _example_ir(dtype=F16, block_m=256, block_n=128, block_k=64, num_stages=3), ("sm_90",)),
    "128x128x32 bf16, 4 warps": (
        lambda: _example_ir(block_m=128, block_n=128, block_k=32, num_stages=4, threads=128), ("sm_80",)),
    "64x64x64 fp16, 4 warps": (
        lambda: _example_ir(dtype=F16, block_m=64, block_n=64, block_k=64, num_stages=2, threads=128), ("sm_80",)),
    "A^T B^T bk32": (lambda: gemm_case(256, 256, 256, bk=32, ta=True, tb=True).ir(), ("sm_90",)),
    "A^T fp16": (lambda: gemm_case(256, 256, 256, ta=True, dtype=F16, stages=4).ir(), ("sm_80",)),
    "B^T bk128": (lambda: gemm_case(256, 256, 256, bk=128, tb=True, stages=2).ir(), ("sm_90",)),
    "T.serial": (lambda: gemm_case(256, 256, 256, serial=True, out_dtype=F32).ir(), ("sm_80",)),
    "allgather_gemm bf16": (lambda: _ag_ir(), ("sm_80", "sm_90")),
    "allgather_gemm fp16 32x32 blocks": (lambda: _ag_ir(dtype=F16, block_m=32, block_n=32), ("sm_90",)),
}
BUILT = [(name, arch) for name, (_, archs) in BUILDS.items() for arch in archs]


@pytest.fixture(scope="module")
def built(session_cache, require_nvshmem) -> dict[tuple[str, str], tuple]:
    jobs = {}
    with ThreadPoolExecutor(max_workers=max(2, min(8, os.cpu_count() or 2))) as pool:
        for name, arch in BUILT:
            mod = generate_cuda(BUILDS[name][0](), arch, gemm_lowering="mma")
            jobs[name, arch] = (mod, pool.submit(compile_cubin, mod.source, arch=mod.arch, entry=mod.entry,
                                                 nvshmem=mod.uses_nvshmem))
        return {key: (mod, future.result()) for key, (mod, future) in jobs.items()}


@pytest.mark.parametrize("name,arch", BUILT)
def test_builds_without_spills(built, name, arch):
    mod, cubin = built[name, arch]
    assert _mma(mod) and mod.arch == arch, mod.notes
    got = kernel_resources(cubin, mod.entry)  # the kernel's own lines: NVSHMEM's device functions have theirs
    assert got is not None and got.registers is not None, ptxas_report(cubin)
    assert (got.spill_stores, got.spill_loads) == (0, 0), ptxas_report(cubin)
