"""Kernels whose staging copies the kernel itself does (codegen/stage_in.py, stage_out.py), or not, shared by
tests/codegen/test_stage_in.py, test_stage_out.py (on the CPU) and tests/gpu/test_kernel_staging_gpu.py
(two PEs)."""

from __future__ import annotations

import jax
import numpy as np

import jax_tilescale as ts
from jax_tilescale import language as T

S = jax.ShapeDtypeStruct


def column_shift(rows: int, cols: int, dtype, col_block: int, steps: int) -> ts.TileKernel:
    """Output columns in windows of `col_block` (rows of one pitch: 2-D windows), put to the next PE in
    `steps` iterations of a loop, each window's signal awaited by the receiver's same block and step."""
    blocks = cols // (col_block * steps)

    @ts.kernel(out_shape=S((rows, cols), dtype), grid=(blocks,), threads=128)
    def column_shift(src, dst):
        arrived = T.alloc_signal(blocks * steps)
        bx = T.program_id(0)
        for i in range(steps):
            c = T.ds((bx * steps + i) * col_block, col_block)
            T.putmem_signal_nbi_block(dst[:, c], src[:, c], sig=arrived[bx * steps + i], value=1,
                                      op=T.SignalOp.SET, pe=(T.get_pe() + 1) % T.get_pe_num())
        for i in range(steps):
            T.signal_wait_until(arrived[bx * steps + i], T.Cmp.GE, 1)

    return column_shift


def crossed_waits(rows: int, cols: int, dtype) -> ts.TileKernel:
    """Block b waits for the signal of block (b + 1) % blocks as well as its own: each word is awaited twice
    (copied once, by the first wait that reaches it in the tables' order), and a block copies a window
    another block's put announced."""
    blocks = rows // 8

    @ts.kernel(out_shape=S((rows, cols), dtype), grid=(blocks,), threads=64)
    def crossed(src, dst):
        arrived = T.alloc_signal(blocks)
        bx = T.program_id(0)
        r = T.ds(bx * 8, 8)
        T.putmem_signal_nbi_block(dst[r, :], src[r, :], sig=arrived[bx], value=1, op=T.SignalOp.SET,
                                  pe=(T.get_pe() + 1) % T.get_pe_num())
        T.signal_wait_until(arrived[(bx + 1) % blocks], T.Cmp.EQ, 1)
        T.signal_wait_until(arrived[bx], T.Cmp.EQ, 1)

    return crossed


def half_covered(rows: int, cols: int, dtype) -> ts.TileKernel:
    """Puts only the first half of the rows: the rest of the output is never written by a peer, so the
    handler must copy the whole staged output out (what the kernel left there)."""

    @ts.kernel(out_shape=S((rows, cols), dtype), grid=(1,), threads=64)
    def half(src, dst):
        arrived = T.alloc_signal(1)
        h = T.ds(0, rows // 2)
        T.putmem_signal_nbi_block(dst[h, :], src[h, :], sig=arrived[0], value=1, op=T.SignalOp.SET,
                                  pe=(T.get_pe() + 1) % T.get_pe_num())
        T.signal_wait_until(arrived[0], T.Cmp.EQ, 1)

    return half


def also_written_locally(rows: int, cols: int, dtype) -> ts.TileKernel:
    """A signalled shift that also copies its input into its own output's first row after the wait: a
    local write, which the kernel's copy-out would race with."""

    @ts.kernel(out_shape=S((rows, cols), dtype), grid=(1,), threads=64)
    def local(src, dst):
        arrived = T.alloc_signal(1)
        T.putmem_signal_nbi_block(dst, src, sig=arrived[0], value=1, op=T.SignalOp.SET,
                                  pe=(T.get_pe() + 1) % T.get_pe_num())
        T.signal_wait_until(arrived[0], T.Cmp.EQ, 1)
        T.copy(src[T.ds(0, 1), :], dst[T.ds(0, 1), :])

    return local


def trace(kern: ts.TileKernel, shape: tuple[int, ...], dtype, npes: int):
    return kern.trace(S(shape, np.dtype(dtype)), mesh_axes=("x",), num_pes=npes)


def pull_rows(rows: int, cols: int, dtype, block_m: int) -> ts.TileKernel:
    """Each block gets its rows of the previous PE's input: peers read the input, which is staged and, with
    NVSHMEM's calls, copied in by the kernel itself (codegen/stage_in.py)."""

    @ts.kernel(out_shape=S((rows, cols), dtype), grid=(rows // block_m,), threads=128)
    def pull(src, dst):
        r = T.ds(T.program_id(0) * block_m, block_m)
        n = T.get_pe_num()
        T.getmem_nbi_block(dst[r, :], src[r, :], pe=(T.get_pe() + n - 1) % n)

    return pull
