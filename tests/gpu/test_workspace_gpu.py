"""The symmetric workspace across call sites on GPUs: a launch whose scratch is larger than any
before it must still find its signal words zero, although earlier launches kept staged buffers
(outputs peers wrote, full of data) in the same half of the workspace (xla_ffi/workspace.h, the
scratch arena). Found by the two-PE suite on 2026-12-01: ADD signals landed on stale data and the
waits never saw their value."""

from __future__ import annotations

import jax
import numpy as np

import jax_tilescale as ts
from jax_tilescale import language as T
from tests.primitives.util import F32, assert_equal, random_rows, shard_run

ROWS, COLS = 256, 1024  # 1 MiB of float32 per PE: a staged output much larger than the scratch arena's step
WORDS, STRIDE = 96 * 1024, 4096  # 768 KiB of signal words, one used per STRIDE: spread over the old staged bytes
BLOCKS = WORDS // STRIDE


@ts.kernel(out_shape=jax.ShapeDtypeStruct((ROWS, COLS), F32), grid=(ROWS // 64,))
def shift(src, dst):
    """Fills this PE's staged output (peers write it) with random data: the stale bytes."""
    rows = T.ds(T.program_id(0) * 64, 64)
    T.putmem_nbi_block(dst[rows, :], src[rows, :], pe=(T.get_pe() + 1) % T.get_pe_num())


@ts.kernel(out_shape=jax.ShapeDtypeStruct((BLOCKS, 8), F32), grid=(BLOCKS,), wait_timeout_s=20)
def count(src, dst):
    """Every PE adds 1 to word bx * STRIDE of its own signals and of the next PE's, and waits for 2, which
    only a word that started at zero reaches."""
    bx, me = T.program_id(0), T.get_pe()
    sig = T.alloc_signal(WORDS)
    T.signal_op(sig[bx * STRIDE], 1, T.SignalOp.ADD, me)
    T.signal_op(sig[bx * STRIDE], 1, T.SignalOp.ADD, (me + 1) % T.get_pe_num())
    T.signal_wait_until(sig[bx * STRIDE], T.Cmp.EQ, 2)
    T.copy(src[T.ds(bx, 1), :], dst[T.ds(bx, 1), :])


def test_larger_scratch_after_staged_buffers(gpu_mesh, monkeypatch):
    # Kernels with NVSHMEM's calls, so that the shift's output is staged: a call-free kernel would write
    # into XLA's buffer (zero-copy) and leave nothing stale in the workspace.
    monkeypatch.setenv("TILESCALE_CALL_FREE", "0")
    rng = np.random.default_rng(7)
    n = gpu_mesh.size
    for _ in range(3):  # alternate: the shift's staged output, then the larger scratch, in both halves
        x = random_rows(rng, n, (ROWS, COLS))
        (shifted,) = shard_run(shift, gpu_mesh, x)
        assert_equal(shifted, np.roll(x.reshape(n, ROWS, COLS), 1, axis=0).reshape(x.shape))
        y = random_rows(rng, n, (BLOCKS, 8))
        (copied,) = shard_run(count, gpu_mesh, y)
        assert_equal(copied, y)
