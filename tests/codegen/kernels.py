"""Kernels the code-generator tests build: the TileScale examples in miniature, plus corner cases."""

from __future__ import annotations

import numpy as np

from jax_tilescale import language as T
from jax_tilescale.ir import KernelIR, verify_kernel
from jax_tilescale.ir.expr import expr_max, expr_min
from jax_tilescale.language.tracing import trace_kernel


def build(fn, *, name, inputs, outputs, grid, num_pes, threads=128) -> KernelIR:
    return verify_kernel(
        trace_kernel(
            fn, name=name, inputs=inputs, outputs=outputs, grid=grid, threads=threads, mesh_axes=("x",), num_pes=num_pes
        )
    )


def ring_shift(m: int, n: int, npes: int, block_m: int, dtype) -> KernelIR:
    """Each PE puts its [block_m, n] blocks, straight from the global input, to PE + 1."""

    def kernel(a, b):
        bx, me = T.program_id(0), T.get_pe()
        rows = a[bx * block_m : (bx + 1) * block_m, :]
        T.putmem_nbi_block(b[bx * block_m : (bx + 1) * block_m, :], rows, pe=(me + 1) % T.get_pe_num())

    return build(
        kernel,
        name="ring_shift",
        inputs=[((m, n), dtype)],
        outputs=[((m, n), dtype)],
        grid=(m // block_m,),
        num_pes=npes,
    )


def ring_allgather(m_per_pe: int, n: int, npes: int, block_m: int, dtype) -> KernelIR:
    """TileScale's ring all-gather: tile to shared, own rows locally, the tile to PE me + by + 1."""

    def kernel(a, b):
        bx, by = T.program_id(0), T.program_id(1)
        me, npes_ = T.get_pe(), T.get_pe_num()
        tile = T.alloc_shared((block_m, n), dtype)
        T.copy(a[bx * block_m : (bx + 1) * block_m, :], tile)
        rows = b[T.ds(me * m_per_pe + bx * block_m, block_m), :]
        T.copy(tile, rows)
        T.putmem_nbi_block(rows, tile, pe=(me + by + 1) % npes_)

    return build(
        kernel,
        name="ring_allgather",
        inputs=[((m_per_pe, n), dtype)],
        outputs=[((m_per_pe * npes, n), dtype)],
        grid=(m_per_pe // block_m, npes - 1),
        num_pes=npes,
    )


def signal_exchange(rows: int, n: int, npes: int, dtype, blocks: int = 2) -> KernelIR:
    """Put-with-signal (contiguous and strided), wait, quiet, fence and barrier_all in one kernel.

    Block bx sends its rows of `a` to the next PE's `b` (signalling word bx), and a column slice
    to the previous PE's `b2` (signalling word blocks + bx with SET); it then waits for its own
    word, copies what arrived to `c` through shared memory, and after barrier_all copies the
    rows of the neighbouring block (written by another block) from `c` to `d`.
    """
    half = n // 2

    def kernel(a, b, b2, c, d):
        bx, me, npes_ = T.program_id(0), T.get_pe(), T.get_pe_num()
        sig = T.alloc_signal(2 * blocks)
        tile = T.alloc_shared((rows, n), dtype)
        mine = T.ds(bx * rows, rows)
        T.putmem_signal_nbi_block(b[mine, :], a[mine, :], sig=sig[bx], value=1, op=T.SignalOp.ADD, pe=(me + 1) % npes_)
        T.putmem_signal_nbi_block(
            b2[mine, 0:half],
            a[mine, half:n],
            sig=sig[blocks + bx],
            value=me + 7,
            op=T.SignalOp.SET,
            pe=(me - 1) % npes_,
        )
        T.signal_wait_until(sig[bx], T.Cmp.GE, 1)
        T.copy(b[mine, :], tile)
        T.copy(tile, c[mine, :])
        T.signal_wait_until(sig[blocks + bx], T.Cmp.NE, 0)
        T.quiet()
        T.fence()
        T.barrier_all()
        T.copy(c[T.ds(((bx + 1) % blocks) * rows, rows), :], d[mine, :])

    shape = (rows * blocks, n)
    return build(
        kernel,
        name="signal_exchange",
        inputs=[(shape, dtype)],
        outputs=[(shape, dtype)] * 4,
        grid=(blocks,),
        num_pes=npes,
    )


def barrier_chain(rows: int, n: int, npes: int, dtype, blocks: int) -> KernelIR:
    """Data that crosses blocks and PEs only through barrier_all.

    Block bx puts its rows of `a` to the next PE's `b`; after a barrier_all it copies the rows
    that the peer delivered for block bx + 1 into `c`; after another, the rows of `c` that block
    bx + 1 wrote into `d`. So b = a of PE - 1, c = b shifted by one block, d = b by two.
    """

    def kernel(a, b, c, d):
        bx, me = T.program_id(0), T.get_pe()
        mine, nxt = T.ds(bx * rows, rows), T.ds(((bx + 1) % blocks) * rows, rows)
        T.putmem_nbi_block(b[mine, :], a[mine, :], pe=(me + 1) % T.get_pe_num())
        T.barrier_all()
        T.copy(b[nxt, :], c[mine, :])
        T.barrier_all()
        T.copy(c[nxt, :], d[mine, :])

    shape = (rows * blocks, n)
    return build(
        kernel,
        name="barrier_chain",
        inputs=[(shape, dtype)],
        outputs=[(shape, dtype)] * 3,
        grid=(blocks,),
        num_pes=npes,
    )


def python_index_math(npes: int = 4) -> KernelIR:
    """Floor division and modulo of negative values, and min/max, in offsets and PEs.

    Block bx copies row (3 bx - 4) % 4 of `a` to row min(bx, 2) + max(bx - 2, 0) = bx of `c`,
    and puts row 0 of `a` to row (bx - 5) // 2 + 3 of `b` on PE (me - 1) % npes. With C's
    truncating division both would pick other (or out-of-range) rows.
    """

    def kernel(a, b, c):
        bx, me = T.program_id(0), T.get_pe()
        T.copy(a[T.ds((bx * 3 - 4) % 4, 1), :], c[T.ds(expr_min(bx, 2) + expr_max(bx - 2, 0), 1), :])
        T.putmem_nbi_block(b[T.ds((bx - 5) // 2 + 3, 1), :], a[0:1, :], pe=(me - 1) % npes)

    return build(
        kernel,
        name="index_math",
        inputs=[((4, 8), np.float32)],
        outputs=[((4, 8), np.float32), ((4, 8), np.float32)],
        grid=(4,),
        num_pes=npes,
    )


def local_copy(dtype=np.float32) -> KernelIR:
    """No communication at all: builds without NVSHMEM."""

    def kernel(a, b):
        bx = T.program_id(0)
        tile = T.alloc_shared((16, 33), dtype)
        T.copy(a[T.ds(bx * 16, 16), 1:34], tile)
        T.copy(tile, b[T.ds(bx * 16, 16), 0:33])

    return build(
        kernel, name="local_copy", inputs=[((64, 40), dtype)], outputs=[((64, 40), dtype)], grid=(4,), num_pes=1
    )


def serial_allgather_gemm(m_per_pe: int, k: int, n_per_pe: int, npes: int, dtype, block_m: int = 64,
                          block_n: int = 64, block_k: int = 32) -> KernelIR:
    """The all-gather + GEMM that examples/allgather_gemm.py was before the Hopper plan took kernels
    that communicate: one block per row block of the gathered A, its GEMM loop inside a T.serial
    loop over column tiles (so the Hopper plan leaves it to the mma.sync lowering)."""
    mb = m_per_pe // block_m
    m = npes * m_per_pe

    def kernel(a, b, c):
        bx, me = T.program_id(0), T.get_pe()
        gathered = T.alloc_symmetric((m, k), dtype)
        arrived = T.alloc_signal(npes * mb)
        a_s = T.alloc_shared((block_m, block_k), dtype)
        b_s = T.alloc_shared((block_k, block_n), dtype)
        acc = T.alloc_fragment((block_m, block_n), np.float32)
        r = bx % mb
        T.putmem_signal_nbi_block(gathered[T.ds(me * m_per_pe + r * block_m, block_m), :],
                                  a[T.ds(r * block_m, block_m), :], sig=arrived[me * mb + r], value=1,
                                  op=T.SignalOp.SET, pe=(me + bx // mb) % npes)
        T.signal_wait_until(arrived[bx], T.Cmp.EQ, 1)
        rows = T.ds(bx * block_m, block_m)
        for nt in T.serial(n_per_pe // block_n):
            T.clear(acc)
            for ko in T.Pipelined(k // block_k, num_stages=3):
                T.copy(gathered[rows, T.ds(ko * block_k, block_k)], a_s)
                T.copy(b[T.ds(ko * block_k, block_k), T.ds(nt * block_n, block_n)], b_s)
                T.gemm(a_s, b_s, acc)
            T.copy(acc, c[rows, T.ds(nt * block_n, block_n)])

    return build(kernel, name="ag_gemm", inputs=[((m_per_pe, k), dtype), ((k, n_per_pe), dtype)],
                 outputs=[((m, n_per_pe), dtype)], grid=(npes * mb,), num_pes=npes)


def scaled_relu_gemm(m: int, n: int, k: int):
    """A bf16 GEMM (examples/gemm.py's loop, 128x128x64 tiles) whose register accumulator is updated
    element-wise before its store: C = max(A @ B * s[0], 0). A `ts.kernel` (trace or call it)."""
    import jax
    import jax.numpy as jnp

    import jax_tilescale as ts

    @ts.kernel(out_shape=jax.ShapeDtypeStruct((m, n), jnp.bfloat16), grid=(n // 128, m // 128), threads=256)
    def scaled(A, B, s, C):
        A_s = T.alloc_shared((128, 64), jnp.bfloat16)
        B_s = T.alloc_shared((64, 128), jnp.bfloat16)
        C_f = T.alloc_fragment((128, 128), jnp.float32)
        T.clear(C_f)
        for ko in T.Pipelined(k // 64, num_stages=3):
            T.copy(A[T.ds(T.program_id(1) * 128, 128), T.ds(ko * 64, 64)], A_s)
            T.copy(B[T.ds(ko * 64, 64), T.ds(T.program_id(0) * 128, 128)], B_s)
            T.gemm(A_s, B_s, C_f)
        for i, j in T.Parallel(128, 128):
            C_f[i, j] = T.max(C_f[i, j] * s[0], 0.0)
        T.copy(C_f, C[T.ds(T.program_id(1) * 128, 128), T.ds(T.program_id(0) * 128, 128)])

    return scaled


def started_gemm(m: int, n: int, k: int, start: str = "clear", block_m: int = 64, block_n: int = 128,
                 threads: int = 128):
    """A bf16 GEMM of `block_m` x `block_n` tiles (float32 C) whose pipelined loop's accumulator starts as `start`
    says: "clear" (T.clear, folded into the loop's first products on the Hopper plan), "fill" (T.fill with 0.5:
    C = 0.5 + A @ B), or "each" (T.gemm(clear_accum=True) at every stage: C = the last k-step's product only).
    A `ts.kernel`."""
    import jax
    import jax.numpy as jnp

    import jax_tilescale as ts

    @ts.kernel(out_shape=jax.ShapeDtypeStruct((m, n), jnp.float32), grid=(n // block_n, m // block_m),
               threads=threads)
    def started(A, B, C):
        A_s = T.alloc_shared((block_m, 64), jnp.bfloat16)
        B_s = T.alloc_shared((64, block_n), jnp.bfloat16)
        C_f = T.alloc_fragment((block_m, block_n), jnp.float32)
        if start == "fill":
            T.fill(C_f, 0.5)
        else:
            T.clear(C_f)
        for ko in T.Pipelined(k // 64, num_stages=4):
            T.copy(A[T.ds(T.program_id(1) * block_m, block_m), T.ds(ko * 64, 64)], A_s)
            T.copy(B[T.ds(ko * 64, 64), T.ds(T.program_id(0) * block_n, block_n)], B_s)
            T.gemm(A_s, B_s, C_f, clear_accum=start == "each")
        T.copy(C_f, C[T.ds(T.program_id(1) * block_m, block_m), T.ds(T.program_id(0) * block_n, block_n)])

    return started
