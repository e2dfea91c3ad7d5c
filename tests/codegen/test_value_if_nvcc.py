"""nvcc builds the generated CUDA of the kernels with `if`/`elif`/`else` and conditional
expressions on element values (tests/compute/value_if_kernels.py, which the CPU tests run in the
interpreter): per-iteration ifs inside T.Parallel, block-uniform and thread-dependent element
conditions at block level, in float32/float16/bfloat16/int32. The text is checked for what the
lowering promises: a plain C if inside the iteration (no barrier in it), conditions evaluated in
the compute type, bounds checks only where the guard does not prove the index."""

from __future__ import annotations

import os
from concurrent.futures import Future, ThreadPoolExecutor, wait

import pytest

from jax_tilescale.codegen import CudaModule, generate_cuda
from jax_tilescale.compiler import compile_cubin
from tests.compute import value_if_kernels as K

CASES = K.all_cases()


def _body(module: CudaModule) -> str:
    return module.source[module.source.index('extern "C"'):]


@pytest.fixture(scope="module")
def modules() -> dict[str, CudaModule]:
    return {name: generate_cuda(case.kernel.trace(*case.inputs)) for name, case in CASES.items()}


@pytest.fixture(scope="module")
def built(modules, session_cache, require_nvcc) -> dict[str, Future]:
    """Every case compiling (none communicates: no NVSHMEM needed)."""
    with ThreadPoolExecutor(max_workers=max(2, min(8, os.cpu_count() or 2))) as pool:
        futures = {name: pool.submit(compile_cubin, m.source, arch="sm_90", entry=m.entry, nvshmem=m.uses_nvshmem)
                   for name, m in modules.items()}
        wait(futures.values())
    return futures


@pytest.mark.parametrize("name", list(CASES))
def test_value_if_kernel_builds_to_a_cubin(built, modules, name):
    data = built[name].result().read_bytes()
    assert data[:4] == b"\x7fELF" and modules[name].entry.encode() + b"\0" in data


def test_parallel_if_is_a_plain_c_if_inside_the_iteration(modules):
    body = _body(modules["masked_tile-bf16"])
    loop = body[body.index("for (uint32_t ts_it"):body.index("__syncthreads();")]
    # The guard (index conditions, short-circuit `and`), then the value condition in float32.
    assert "if (((int64_t)((((int64_t)(((ts_bx * 16) + ts_i0) < (int64_t)37)) != 0) && " in loop
    assert "if ((ts_rep(reinterpret_cast<__nv_bfloat16*>(p_x)[" in loop and "> 0.0f)) {" in loop
    assert "} else {" in loop and "__float2bfloat16_rn(" in loop
    # Columns are proven in bounds by j < 53 (narrowed), rows by the multi-variable guard only at run time.
    assert "ts_elem_index(((ts_bx * 16) + ts_i0), 37, ts_where)" in loop and "ts_elem_index(ts_i1" not in loop


def test_and_reads_its_right_side_only_where_the_left_holds(modules):
    body = _body(modules["shared_then_global-f32"])
    assert "== 0.0f) ? (((int64_t)(ts_mod(ts_i1, 2, ts_where) == (int64_t)1)) != 0) : false)) {" in body


def test_block_level_element_conditions(modules):
    body = _body(modules["block_level"])
    # Block-uniform: every thread evaluates the flag and takes the same side (a T.copy inside).
    assert "if ((ts_rep(reinterpret_cast<float*>(p_x)[(int64_t)ts_bx * 64]) > 0.0f)) {" in body
    # Thread-dependent: a per-thread branch (the atomic issued by each thread of it), then the block meets.
    start = body.index("ts_tx < (int64_t)8")
    inner = body[start:]
    # tx < 8 (the enclosing if) proves the index: no run-time check.
    assert "if ((ts_rep(reinterpret_cast<float*>(p_x)[(int64_t)ts_bx * 64 + (int64_t)ts_tx]) > 0.0f)) {" in inner
    assert "ts_atomic_add(" in inner and "// this thread" in inner
