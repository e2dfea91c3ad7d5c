"""Kernels that hold every primitive of issue 3 (few kernels, many statements: each nvcc run costs
seconds). Used by the CUDA source tests and the nvcc build tests."""

from __future__ import annotations

import numpy as np

from jax_tilescale import language as T
from jax_tilescale.ir import KernelIR, verify_kernel
from jax_tilescale.language.tracing import trace_kernel

F32 = np.float32


def build(fn, *, name, inputs, outputs, grid, num_pes, threads=128, mesh_axes=("x",), sizes=None) -> KernelIR:
    return verify_kernel(
        trace_kernel(
            fn, name=name, inputs=inputs, outputs=outputs, grid=grid, threads=threads, mesh_axes=mesh_axes,
            num_pes=num_pes, mesh_axis_sizes=sizes,
        )
    )


def point_to_point(npes: int = 4, rows: int = 8, n: int = 64, dtype=F32) -> KernelIR:
    """Every transfer at every scope, signals, waits (local and remote), quiet and fence.

    a: this PE's data [4 * rows, n]; counts: int32 row counts [npes] (T.load, run-time sizes).
    out0..out3 are written by peers or by gets; flags holds flags peers poll."""

    def p2p(a, counts, out0, out1, out2, out3, flags):
        me, npes_ = T.get_pe(), T.get_pe_num()
        nxt, prv = (me + 1) % npes_, (me + npes_ - 1) % npes_
        sig = T.alloc_signal(4)
        tile = T.alloc_shared((rows, n), dtype)
        sym = T.alloc_symmetric((rows, n), dtype)
        word = T.alloc_symmetric((2,), np.int32)
        r = T.ds(T.program_id(0) * rows, rows)
        # putmem family: thread / warp / block, blocking and not, with and without signal.
        T.putmem(out0[r, :], a[r, :], pe=nxt)
        T.putmem_nbi_warp(out1[r, 0 : n // 2], a[r, 0 : n // 2], pe=nxt)
        T.putmem_nbi_warp(out1[r, n // 2 : n], a[r, n // 2 : n], pe=nxt)
        T.putmem_signal_block(sym, a[r, :], sig=sig[0], value=1, op=T.SignalOp.ADD, pe=nxt)
        T.putmem_signal_nbi(out2[r, 0 : n // 2], a[r, 0 : n // 2], sig=sig[1], value=me + 1, op=T.SignalOp.SET,
                            pe=nxt)
        T.putmem_signal_nbi_warp(out2[r, n // 2 : n], a[r, n // 2 : n], sig=sig[2], value=1, op=T.SignalOp.ADD,
                                 pe=nxt)
        # A run-time size read from an input: counts[me] rows of `a` from row 0.
        T.putmem_nbi_block(out3[me, :], a[0, :], counts[me] * n * np.dtype(dtype).itemsize, nxt)
        T.fence()
        T.signal_op(sig[3], 1, T.SignalOp.ADD, nxt)
        T.signal_wait_until(sig[3], T.Cmp.GE, 1)
        T.quiet()
        # getmem family into shared memory and outputs.
        T.getmem_block(tile, a[r, :], pe=prv)
        T.getmem_nbi(tile[0:1, :], a[0:1, :], pe=prv)
        T.getmem_nbi_warp(tile[1:2, :], sym[1:2, :], pe=prv)
        T.getmem_warp(tile[2:3, :], a[2:3, :], pe=prv)
        T.getmem_nbi_block(tile[3:4, 0:8], a[3:4, 8:16], pe=prv)
        T.quiet()
        # Direct peer access through nvshmem_ptr.
        T.put_block(tile, out0[r, :], dst_pe=prv)
        T.put_warp(tile[0:2, :], out1[T.ds(T.program_id(0) * rows, 2), :], dst_pe=prv)
        T.get_block(sym, tile, src_pe=nxt)
        T.get_warp(a[r, :], tile, src_pe=nxt)
        T.copy(tile, sym)
        # Waits: local symmetric word, a remote one, and every comparison.
        T.wait_eq(word[0], 0)
        T.wait_ge(word[1], 0, pe=nxt)
        T.wait_ne(flags[0], 7, pe=prv)
        T.wait_le(word[0], 5)
        T.wait_gt(sig[0], 0)
        T.wait_lt(word[1], 1 + T.load(counts[0]))
        # The remaining forms (appended: the source tests address statements by index).
        T.putmem_nbi(out0[r, :], a[r, :], pe=nxt)
        T.putmem_warp(out0[r, 0 : n // 2], a[r, 0 : n // 2], pe=nxt)
        T.putmem_block(out0[r, :], a[r, :], pe=nxt)
        T.putmem_signal(out2[r, :], a[r, :], sig=sig[1], value=2, op=T.SignalOp.SET, pe=nxt)
        T.putmem_signal_warp(out2[r, :], a[r, :], sig=sig[1], value=3, op=T.SignalOp.SET, pe=nxt)
        T.putmem_signal_nbi_block(out2[r, 0 : n // 2], a[r, 0 : n // 2], sig=sig[2], value=1, op=T.SignalOp.ADD,
                                  pe=nxt)
        T.getmem(tile, sym, pe=prv)
        T.getmem_nbi_block(out1[T.ds(counts[me], 1), :], sym[0, :], counts[prv] * n * np.dtype(dtype).itemsize, prv)

    return build(
        p2p,
        name="point_to_point",
        inputs=[((4 * rows, n), dtype), ((npes,), np.int32)],
        outputs=[((4 * rows, n), dtype)] * 4 + [((4,), np.uint64)],
        grid=(4,),
        num_pes=npes,
    )


def collectives(npes: int = 4, rows: int = 4, n: int = 32, dtype=F32, grid: tuple[int, ...] = (1,)) -> KernelIR:
    """barrier_all / sync_all, every team barrier, broadcast and fcollect at every scope."""

    def coll(a, bcast, gathered, gathered2, bcast2):
        me = T.get_pe()
        sym = T.alloc_symmetric((rows, n), dtype)
        tile = T.alloc_shared((rows, n), dtype)
        T.copy(a, tile)
        T.barrier_all()
        T.sync_all()
        T.barrier_all_block()
        T.barrier_all_warp()
        T.sync_all_block()
        T.sync_all_warp()
        T.broadcast(bcast, a, 0)
        T.broadcast_warp(sym, tile, npes - 1)
        T.broadcast_block(bcast2[:, 0 : n // 2], a[:, n // 2 : n], me * 0 + 1)
        T.fcollect(gathered, a)
        T.fcollect_warp(gathered2[:, 0 : n // 2], tile[:, 0 : n // 2])
        T.fcollect_block(gathered2[:, n // 2 : n], sym[:, n // 2 : n])
        T.copy(sym[:, n // 2 : n], bcast2[:, n // 2 : n])

    return build(
        coll,
        name="collectives",
        inputs=[((rows, n), dtype)],
        outputs=[((rows, n), dtype), ((npes * rows, n), dtype), ((npes * rows, n), dtype), ((rows, n), dtype)],
        grid=grid,
        num_pes=npes,
    )
