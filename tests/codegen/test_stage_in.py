"""Staged inputs copied in by the kernel itself (codegen/stage_in.py, TS_STAGE_KERNEL_IN): which kernels
do it, what the handler is told, where the copy stands (before the entry barrier), that its counters get
scratch of their own, and that nvcc builds it. tests/gpu/test_kernel_staging_gpu.py runs it on two PEs."""

from __future__ import annotations

import sys
from pathlib import Path

import jax
import numpy as np

import jax_tilescale as ts
from jax_tilescale import abi
from jax_tilescale import language as T
from jax_tilescale.codegen import generate_cuda
from jax_tilescale.compiler import compile_cubin
from tests.codegen import staging_kernels as K

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import allgather


def _body(m) -> str:
    return m.source[m.source.index('extern "C" __global__'):]


def test_a_pull_copies_its_input_in_before_the_entry_barrier() -> None:
    kernel = K.trace(K.pull_rows(256, 77, np.float16, 64), (256, 77), np.float16, 2)
    m = generate_cuda(kernel, p2p_peers=False)
    assert m.staged == (abi.STAGE_COPY_IN | abi.STAGE_KERNEL_IN, 0)  # the input; the output is XLA's
    body = _body(m)
    assert body.index("ts_copy_in(args, ts_copy_ins, 1, ") < body.index("ts_call_start(args, ")
    assert "shard copied in by this kernel just before" not in body  # the param is called src here
    assert "src copied in by this kernel just before" in body
    assert f"ts_copy_ins[1] = {{{{0, 0, {256 * 77 * 2}}}}};" in m.source
    assert m.scratch_bytes > 0  # the two counters, zeroed with the scratch by the last block
    cubin = compile_cubin(m.source, arch=m.arch, entry=m.entry, nvshmem=m.uses_nvshmem)
    assert cubin.read_bytes()[:4] == b"\x7fELF"


def test_a_kernel_whose_peers_read_copies_in_but_leaves_the_copy_out_to_the_handler() -> None:
    """Its signalled puts do not prove its output complete while peers read its memory (end_of_call.py,
    condition 1), so the output is the handler's to copy out; the input is the kernel's to copy in."""

    @ts.kernel(out_shape=jax.ShapeDtypeStruct((64, 32), np.float32), grid=(2,), threads=64)
    def pull_then_push(src, dst):
        arrived = T.alloc_signal(2)
        bx = T.program_id(0)
        r = T.ds(bx * 32, 32)
        n = T.get_pe_num()
        T.putmem_signal_nbi_block(dst[r, :], src[r, :], sig=arrived[bx], value=1, op=T.SignalOp.SET,
                                  pe=(T.get_pe() + 1) % n)
        T.signal_wait_until(arrived[bx], T.Cmp.EQ, 1)
        T.getmem_nbi_block(dst[r, :], src[r, :], pe=(T.get_pe() + n - 1) % n)

    kernel = pull_then_push.trace(jax.ShapeDtypeStruct((64, 32), np.float32), mesh_axes=("x",), num_pes=2)
    m = generate_cuda(kernel, p2p_peers=False)
    assert m.staged[0] == abi.STAGE_COPY_IN | abi.STAGE_KERNEL_IN
    assert m.staged[1] == abi.STAGE_COPY_OUT
    assert "ts_stage_windows" not in _body(m) and "ts_copy_in(args, ts_copy_ins, 1, " in _body(m)
    assert "staged outputs copied out by the handler after the kernel: peers read this PE's memory" in m.source


def test_call_free_kernels_aliased_outputs_and_the_switch_leave_it_to_the_handler(monkeypatch) -> None:
    pull = K.trace(allgather.allgather_pull(64, 64, 2, np.dtype(np.float32)), (64, 64), np.float32, 2)
    m = generate_cuda(pull)  # one machine: call-free, zero-copy
    assert m.call_free and "ts_copy_in(" not in _body(m)

    @ts.kernel(out_shape=jax.ShapeDtypeStruct((64, 32), np.float32), grid=(1,), threads=64,
               input_output_aliases={0: 0})
    def in_place(x, o):  # peers read the aliased pair: staged both ways, the handler's
        n = T.get_pe_num()
        T.getmem_block(o[T.ds(0, 32), :], o[T.ds(32, 32), :], pe=(T.get_pe() + 1) % n)

    aliased = in_place.trace(jax.ShapeDtypeStruct((64, 32), np.float32), mesh_axes=("x",), num_pes=2)
    m = generate_cuda(aliased, p2p_peers=False)
    assert not any(f & (abi.STAGE_KERNEL_IN | abi.STAGE_KERNEL_OUT) for f in m.staged)
    monkeypatch.setenv("TILESCALE_KERNEL_STAGING", "0")
    m = generate_cuda(pull, p2p_peers=False)
    assert m.staged[0] == abi.STAGE_COPY_IN and "ts_copy_in(" not in _body(m)
    assert "by the handler before the launch" in _body(m)


def test_an_input_with_more_chunks_than_the_grid_has_warps_stays_the_handlers() -> None:
    """One block of 4 warps copies at most 4 chunks of abi.COPY_IN_CHUNK bytes; a larger input would make a
    warp copy several, one after the other, slower than the handler's copy (benchmarks/NOTES.md)."""
    fits = K.trace(K.pull_rows(32, 128, np.float32, 32), (32, 128), np.float32, 2)  # 16 KiB: 4 chunks
    m = generate_cuda(fits, p2p_peers=False)
    assert 32 * 128 * 4 == 4 * abi.COPY_IN_CHUNK and m.staged[0] & abi.STAGE_KERNEL_IN
    larger = K.trace(K.pull_rows(33, 128, np.float32, 33), (33, 128), np.float32, 2)  # 5 chunks
    m = generate_cuda(larger, p2p_peers=False)
    assert m.staged[0] == abi.STAGE_COPY_IN and "ts_copy_in(" not in _body(m)
    assert "src copied in by the handler before the launch" in _body(m)
