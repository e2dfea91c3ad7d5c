"""The CUDA of T.load of memory that changes while the kernel runs (symmetric scratch, signal
words, outputs): a volatile load at the statement that holds it, after the wait (thread 0 waits and
fences, the block meets, then every thread reads), inputs still through `ts_load`; nvcc builds it."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from jax_tilescale.codegen import generate_cuda
from jax_tilescale.codegen.expr_printer import buffer_pointer_name
from jax_tilescale.compiler import compile_cubin
from jax_tilescale.ir.buffers import BufferKind
from tests.primitives.test_delivered_loads import M, N, delivered

S = jax.ShapeDtypeStruct


def traced():
    return delivered.trace(S((M, N), np.float32), S((3,), np.int32), mesh_axes=("x",), num_pes=2)


@pytest.fixture(scope="module")
def source() -> str:
    return generate_cuda(traced()).source


def test_changing_memory_is_read_with_volatile_loads(source: str) -> None:
    allocs = traced().allocs
    (box,) = [b for b in allocs if b.kind is BufferKind.SYMMETRIC and b.shape == (3,)]
    (sig,) = [b for b in allocs if b.kind is BufferKind.SIGNAL]
    box_ptr, sig_ptr = buffer_pointer_name(box.name), buffer_pointer_name(sig.name)
    assert f"((int64_t)reinterpret_cast<const volatile int32_t*>({box_ptr})[1])" in source  # the request box
    assert f"((int64_t)reinterpret_cast<const volatile uint64_t*>({sig_ptr})[1])" in source  # the signal word
    assert f"ts_load<int32_t>({box_ptr}" not in source and "ts_load<uint64_t>" not in source  # never the plain load


def test_the_load_follows_the_wait_and_the_block_barrier(source: str) -> None:
    """Statement order is kept: the wait (thread 0, then __threadfence and the barrier) comes before
    the first statement that reads the delivered words; nothing reads them before it."""
    wait = source.index("ts_wait<TS_CMP_EQ, false, true, uint64_t>")
    fence = source.index("__threadfence();", wait)
    barrier = source.index("__syncthreads();", fence)
    first_load = source.index("reinterpret_cast<const volatile int32_t*>(")
    assert wait < fence < barrier < first_load


@pytest.mark.usefixtures("session_cache", "require_nvshmem")
def test_nvcc_builds_it() -> None:
    module = generate_cuda(traced())
    cubin = compile_cubin(module.source, arch=module.arch, entry=module.entry, nvshmem=module.uses_nvshmem)
    data = cubin.read_bytes()
    assert data[:4] == b"\x7fELF" and module.entry.encode() + b"\0" in data
