"""T.tile_queue on the GPU (one PE: every process runs it on its own GPU): the kernel of
tests/compute/tile_queue_kernels.py, called several times in a row on fresh random data into outputs poisoned
before each call, against numpy element by element. A launch that found the counter where the one before left it
would skip the tiles below it (their rows would keep the poison or an earlier call's values), so this checks the
drawer of the last ticket sets it back to zero. On the GPU the blocks run at once: with many more tiles than blocks
several blocks take tiles, each in rising order. Run with the GPU suite (tests/gpu/conftest.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.compute import tile_queue_kernels as tq

CALLS = 4


def _poisoned_call(fn: Callable[..., Any], *args: np.ndarray) -> list[np.ndarray]:
    """fn(*args) right after a NaN (or -1) array of each output's size was made and freed: the allocator tends to
    hand that block to the next allocation of the same size, so rows no tile wrote read as poison (best effort:
    the fresh inputs of each call are what catch a skipped tile for sure, as its rows keep another call's values)."""
    for o in jax.tree_util.tree_leaves(jax.eval_shape(fn, *args)):
        junk = jnp.full(o.shape, jnp.nan if jnp.issubdtype(o.dtype, jnp.floating) else -1, o.dtype)
        junk.block_until_ready()
        del junk
    return [np.asarray(o) for o in fn(*args)]


@pytest.mark.parametrize("tiles,grid", [(4096, (132,)), (1000, (66, 2)), (37, (132,))],
                         ids=["4096-tiles-132-blocks", "2d-grid", "more-blocks-than-tiles"])
def test_every_tile_once_in_launch_after_launch(tiles, grid):
    kern = jax.jit(tq.scale_rows(tiles, grid))
    rng = np.random.default_rng(tiles)
    shared = []
    for call in range(CALLS):
        x, scale = tq.inputs(rng, tiles)
        y, who, rnd = _poisoned_call(kern, x, scale)
        np.testing.assert_array_equal(y, tq.want_y(x, scale), err_msg=f"call {call}")
        dealt = tq.check_deal(who, rnd, grid)
        shared.append(len(dealt))
    if tiles > 10 * np.prod(grid):  # the blocks run at once: one of them cannot take every tile
        assert min(shared) > 1, shared


@pytest.mark.parametrize("tiles,grid,static", [(4096, (132,), 28), (1000, (66, 2), 7)], ids=["1d", "2d-grid"])
def test_static_rounds_then_drawn_tiles_in_launch_after_launch(tiles, grid, static):
    """T.tile_queue(tiles, static_rounds=...): the first rounds' tiles on the static deal's blocks, the rest drawn
    by the blocks as they finish (several of them), every tile once, launch after launch (the counter reset by the
    last raw draw)."""
    kern = jax.jit(tq.scale_rows(tiles, grid, static_rounds=static))
    rng = np.random.default_rng(tiles + static)
    for call in range(CALLS):
        x, scale = tq.inputs(rng, tiles)
        y, who, rnd = _poisoned_call(kern, x, scale)
        np.testing.assert_array_equal(y, tq.want_y(x, scale), err_msg=f"call {call}")
        tq.check_deal(who, rnd, grid, static_rounds=static)
        drawn = who[static * int(np.prod(grid)):]
        assert len(set(drawn.tolist())) > 1, "one block took every drawn tile"


def test_two_launches_in_one_jit():
    """The second launch reads the first's output (XLA runs them in order, one right after the other on the
    stream): it finds the counter zero and scales every tile again."""
    tiles, grid = 2048, (132,)
    kern = tq.scale_rows(tiles, grid)

    def twice(x, scale):
        y1, _, _ = kern(x, scale)
        return kern(y1, scale)

    f = jax.jit(twice)
    rng = np.random.default_rng(1)
    for _ in range(2):
        x, scale = tq.inputs(rng, tiles)
        y, who, rnd = _poisoned_call(f, x, scale)
        np.testing.assert_array_equal(y, tq.want_y(tq.want_y(x, scale), scale))
        tq.check_deal(who, rnd, grid)
