"""Race detection across the two refs of an aliased pair (`ts.kernel(input_output_aliases=)`): the
input ref and the output ref are one memory, so a read through one and a write through the other,
by different blocks and unordered, is a race; ordered by a barrier, the read sees the write."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import jax_tilescale as ts
from jax_tilescale import language as T
from jax_tilescale.errors import RaceError

F32 = np.float32
M, N, BM = 64, 8, 16
SDS = jax.ShapeDtypeStruct


def rand(seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((M, N)).astype(F32)
    return np.where(np.abs(x) < 0.1, x + 0.5, x).astype(F32)


def test_a_read_of_the_input_ref_and_another_blocks_write_of_the_output_ref_race() -> None:
    """Block 1 reads x[0:16] while block 0 writes o[0:16], the same memory, with nothing between."""
    @ts.kernel(out_shape=SDS((M, N), F32), grid=(2,), input_output_aliases={0: 0})
    def swap_halves(x, o):
        b = T.program_id(0)
        tile = T.alloc_fragment((BM, N), F32)
        T.copy(x[T.ds((1 - b) * BM, BM), :], tile)
        T.copy(tile, o[T.ds(b * BM, BM), :])

    with pytest.raises(RaceError) as err:
        np.asarray(jax.jit(swap_halves)(rand(0)))
    msg = str(err.value)
    assert "data race on PE 0" in msg, msg
    assert "x[0:16, 0:8]" in msg and "o[0:16, 0:8]" in msg, msg


def test_after_a_barrier_a_read_of_the_input_ref_sees_the_other_blocks_write() -> None:
    """The correct version: each block doubles its rows through o, barrier_all, then reads the other
    block's rows through x: they hold the doubled values (one memory)."""
    @ts.kernel(out_shape=(SDS((M, N), F32), SDS((2 * BM, N), F32)), grid=(2,), input_output_aliases={0: 0})
    def double_then_swap(x, o, swapped):
        b = T.program_id(0)
        tile = T.alloc_fragment((BM, N), F32)
        T.copy(x[T.ds(b * BM, BM), :], tile)
        for i, j in T.Parallel(BM, N):
            tile[i, j] = tile[i, j] * 2
        T.copy(tile, o[T.ds(b * BM, BM), :])
        T.barrier_all()
        T.copy(x[T.ds((1 - b) * BM, BM), :], tile)
        T.copy(tile, swapped[T.ds(b * BM, BM), :])

    x = rand(1)
    o, swapped = (np.asarray(a) for a in jax.jit(double_then_swap)(x))
    np.testing.assert_array_equal(o[: 2 * BM], x[: 2 * BM] * 2)
    np.testing.assert_array_equal(o[2 * BM:], x[2 * BM:])
    np.testing.assert_array_equal(swapped, np.concatenate([x[BM:2 * BM], x[0:BM]]) * 2)
