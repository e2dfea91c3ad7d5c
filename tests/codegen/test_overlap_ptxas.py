"""What ptxas says of the overlap examples' kernels at the issue's size (bf16 8192^3, the examples'
default tiles): the consumers' accumulators stay in registers (0 bytes spilled in the kernel).

The regressions this guards (issue 15, benchmarks/NOTES.md): GEMM-ReduceScatter's owner waits for
its peers' partial tiles after its main loop, with 128 float32 accumulators per thread live; the
wait's slow path was a call, and ptxas then kept the whole accumulator array in local memory
across the main loop (1 KiB of spill stores and loads per k-step), 5x slower on the GPU."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import pytest

from jax_tilescale.codegen import generate_cuda
from jax_tilescale.compiler import compile_cubin, ptxas_report
from tests.conftest import load_example

ag = load_example("allgather_gemm")
rs = load_example("gemm_reducescatter")
S = jax.ShapeDtypeStruct
BF16 = jnp.bfloat16
SIZE = 8192


def _ir(which: str, npes: int):
    if which == "rs":
        kern = rs.gemm_reducescatter(SIZE, SIZE // npes, SIZE, npes, BF16)
        args = (S((SIZE, SIZE // npes), BF16), S((SIZE // npes, SIZE), BF16))
    else:
        kern = ag.allgather_gemm(SIZE // npes, SIZE, SIZE // npes, npes, BF16)
        args = (S((SIZE // npes, SIZE), BF16), S((SIZE, SIZE // npes), BF16))
    return kern.trace(*args, mesh_axes=("x",), num_pes=npes)


def kernel_resources(report: str, entry: str) -> tuple[int, int, int]:
    """(registers, spill store bytes, spill load bytes) of the entry function in a ptxas report."""
    m = re.search(rf"Function properties for {re.escape(entry)}\n\s*(\d+) bytes stack frame, (\d+) bytes spill stores, "
                  rf"(\d+) bytes spill loads\n.*?Used (\d+) registers", report, re.S)
    assert m, f"no resource lines for {entry} in the ptxas report:\n{report}"
    return int(m.group(4)), int(m.group(2)), int(m.group(3))


@pytest.mark.parametrize("which,npes", [("rs", 1), ("rs", 2)])
def test_overlap_kernel_keeps_its_accumulators_in_registers(which, npes, session_cache, require_nvshmem):
    mod = generate_cuda(_ir(which, npes), "sm_90")
    assert mod.arch == "sm_90a" and mod.uses_nvshmem
    report = ptxas_report(compile_cubin(mod.source, arch=mod.arch, entry=mod.entry, nvshmem=True)) or ""
    regs, stores, loads = kernel_resources(report, mod.entry)
    assert (stores, loads) == (0, 0), f"{mod.entry}: {stores} B spill stores, {loads} B spill loads, {regs} registers"


@pytest.mark.parametrize("which,npes", [("rs", 1), ("ag", 1), ("rs", 2), ("ag", 2)])
def test_overlap_kernel_wgmma_is_not_serialised(which, npes, session_cache, require_nvshmem):
    """Generated call-free (codegen/call_free.py: puts as P2P stores, signals as release atomics, the
    end-of-call barrier inlined), ptxas keeps the wgmma pipeline (no C7509) and spills nothing. C7504
    (setmaxnreg ignored) comes with -rdc itself and costs nothing at 128 x 256 tiles, whose 128
    accumulators fit the 168 registers ptxas gives; it is not asserted."""
    mod = generate_cuda(_ir(which, npes), "sm_90")
    assert mod.call_free and "#define TS_CALL_FREE 1" in mod.source
    assert "nvshmemx_" not in mod.source.split("__global__", 1)[1]  # no NVSHMEM call in the kernel
    report = ptxas_report(compile_cubin(mod.source, arch=mod.arch, entry=mod.entry, nvshmem=True)) or ""
    assert "(C7509)" not in report, report
    regs, stores, loads = kernel_resources(report, mod.entry)
    assert (stores, loads) == (0, 0), f"{mod.entry}: {stores} B spill stores, {loads} B spill loads, {regs} registers"
