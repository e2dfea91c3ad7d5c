"""nvcc builds the generated CUDA of the example kernels, with NVSHMEM, into loadable cubins.

Each nvcc run with NVSHMEM's headers takes seconds, so the whole matrix is compiled once per
module, in parallel, into the session's cache; the tests then look at the results.
"""

from __future__ import annotations

import os
import subprocess
from concurrent.futures import Future, ThreadPoolExecutor, wait

import ml_dtypes
import numpy as np
import pytest

from jax_tilescale.codegen import CudaModule, generate_cuda
from jax_tilescale.compiler import compile_cubin, ptxas_report

from . import kernels
from .conftest import cuobjdump

DTYPES = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16, "float32": np.float32}
SHAPES = {"small": (128, 64, 2, 64), "wide": (512, 384, 4, 128)}  # (m per PE, n, PEs, block_m)


def _cases() -> dict[str, object]:
    cases = {}
    for dname, dtype in DTYPES.items():
        for sname, (m, n, npes, bm) in SHAPES.items():
            cases[f"ring_shift-{dname}-{sname}"] = lambda m=m, n=n, p=npes, b=bm, d=dtype: kernels.ring_shift(
                m, n, p, b, d
            )
            cases[f"ring_allgather-{dname}-{sname}"] = lambda m=m, n=n, p=npes, b=bm, d=dtype: kernels.ring_allgather(
                m, n, p, b, d
            )
        cases[f"signal_exchange-{dname}"] = lambda d=dtype: kernels.signal_exchange(16, 96, 2, d, blocks=2)
    cases["index_math"] = kernels.python_index_math
    cases["local_copy"] = kernels.local_copy
    return cases


CASES = _cases()


@pytest.fixture(scope="module")
def built(session_cache, require_nvshmem) -> dict[str, tuple[CudaModule, Future]]:
    """Every case compiling (a future of its cubin), nvcc runs spread over the machine's cores."""
    modules = {name: generate_cuda(make()) for name, make in CASES.items()}
    with ThreadPoolExecutor(max_workers=max(2, min(8, os.cpu_count() or 2))) as pool:
        futures = {
            name: pool.submit(compile_cubin, m.source, arch="sm_90", entry=m.entry, nvshmem=m.uses_nvshmem)
            for name, m in modules.items()
        }
        wait(futures.values())
    return {name: (modules[name], futures[name]) for name in modules}


@pytest.mark.parametrize("name", list(CASES))
def test_kernel_builds_to_a_cubin(built, name):
    module, future = built[name]
    cubin = future.result()
    data = cubin.read_bytes()
    assert data[:4] == b"\x7fELF" and len(data) > 1000
    assert module.entry.encode() + b"\0" in data  # the entry is in the symbol table
    report = ptxas_report(cubin)
    assert report is not None and f"Compiling entry function '{module.entry}'" in report
    tool = cuobjdump()
    if tool:
        listing = subprocess.run([tool, "-elf", "-symbols", str(cubin)], check=False, capture_output=True, text=True)
        assert module.entry in listing.stdout + listing.stderr


def test_nvshmem_kernels_link_the_device_library(built):
    module, future = built["ring_shift-float16-small"]
    assert module.uses_nvshmem
    # NVSHMEM's device state lives in the linked cubin; a kernel without NVSHMEM has none.
    assert b"nvshmemi_device_state_d" in future.result().read_bytes()
    assert b"nvshmemi_device_state_d" not in built["local_copy"][1].result().read_bytes()


def test_cache_hit_returns_the_same_cubin(built):
    module, future = built["ring_allgather-bfloat16-small"]
    assert compile_cubin(module.source, arch="sm_90", entry=module.entry) == future.result()
