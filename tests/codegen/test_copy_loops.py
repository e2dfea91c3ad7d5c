"""Copies between two buffers in memory (codegen/common.py `batched_loop`): each thread loads up to
COPY_BATCH elements before it stores any. The generated kernels run on the CPU emulator
(tests/codegen/emulator) against numpy's slicing, on random data with the output poisoned, at sizes
that divide the block's threads and sizes that leave a partial round, in 1 to 3 dimensions."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_tilescale as ts
from jax_tilescale import language as T
from jax_tilescale.codegen import generate_cuda
from jax_tilescale.codegen.common import COPY_BATCH
from tests.codegen import emulator
from tests.conftest import missing_tool

S = jax.ShapeDtypeStruct


def _window_copy(shape: tuple[int, ...], window: tuple[slice, ...], at: tuple[int, ...], threads: int):
    """out[at + window extent] = x[window] (out starts poisoned); one block of `threads`."""

    @ts.kernel(out_shape=S(shape, jnp.float32), grid=(1,), threads=threads)
    def copy(x, out):
        dst = tuple(T.ds(a, s.stop - s.start) for a, s in zip(at, window))
        T.copy(x[window], out[dst])

    return copy.trace(S(shape, jnp.float32))


CASES = {
    # name: (shape, window, destination corner, threads)
    "rows, threads divide it": ((64, 64), (slice(0, 64), slice(0, 64)), (0, 0), 128),
    "64 rounds per thread: 8 batches": ((256, 128), (slice(0, 256), slice(0, 128)), (0, 0), 128),
    "partial last round": ((50, 12), (slice(0, 50), slice(0, 12)), (0, 0), 128),
    "fewer elements than threads": ((3, 7), (slice(0, 3), slice(0, 7)), (0, 0), 128),
    "strided window, shifted": ((40, 36), (slice(3, 33), slice(5, 29)), (7, 2), 96),
    "three dimensions": ((6, 10, 12), (slice(1, 5), slice(2, 9), slice(0, 12)), (2, 0, 0), 64),
}


@pytest.mark.parametrize("name", CASES)
def test_a_copy_in_memory_moves_every_element_once(name):
    reason = emulator.available()
    if reason:
        missing_tool(f"the CPU emulator cannot run: {reason}")
    shape, window, at, threads = CASES[name]
    mod = generate_cuda(_window_copy(shape, window, at, threads), "sm_80")
    body = mod.source.split("__global__", 1)[1]
    assert "ts_r[ts_u] = ts_src[" in body and "] = ts_r[ts_u];" in body  # the batched form, not the plain loop
    rng = np.random.default_rng(len(name))
    x = rng.standard_normal(shape).astype(np.float32)
    poison = np.full(shape, np.nan, np.float32)
    (got,) = emulator.run(mod, [x], [poison])
    want = poison.copy()
    want[tuple(slice(a, a + s.stop - s.start) for a, s in zip(at, window))] = x[window]
    np.testing.assert_array_equal(got, want)  # NaN where nothing may be written, x's values where it must


def test_the_batch_is_capped_and_copies_with_tiles_keep_the_plain_loop():
    mod = generate_cuda(_window_copy((256, 128), (slice(0, 256), slice(0, 128)), (0, 0), 128), "sm_80")
    assert f"ts_r[{COPY_BATCH}]" in mod.source  # 64 rounds per thread: batches of COPY_BATCH

    @ts.kernel(out_shape=S((64, 64), jnp.float32), grid=(1,), threads=128)
    def through_tile(x, out):
        tile = T.alloc_shared((64, 64), jnp.float32)
        T.copy(x, tile)
        T.copy(tile, out)

    body = generate_cuda(through_tile.trace(S((64, 64), jnp.float32)), "sm_80").source.split("__global__", 1)[1]
    assert "ts_r[" not in body and "ts_i = threadIdx.x; ts_i <" in body
