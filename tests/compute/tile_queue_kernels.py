"""The tile queue's test kernel (T.tile_queue, ir/tile_queue.py) and the checks of what it reports, shared by the
interpreter tests (tests/compute/test_tile_queue.py), the CPU emulator and nvcc tests of its CUDA
(tests/codegen/test_tile_queue_emulated.py) and the GPU tests (tests/gpu/test_tile_queue_gpu.py).

Tile t scales rows t*ROWS .. t*ROWS+ROWS-1 of x by scale[t] into y (a tile number that reached the wrong tile, or
a tile run twice or never, shows in y), and records the linear number of the block that drew it (`who[t]`) and how
many tiles that block had run before it (`rnd[t]`, counted in the block's shared memory): from these the tests see
how the tiles were dealt, which the queue leaves to the run."""

from __future__ import annotations

import math
from collections import defaultdict

import jax
import jax.numpy as jnp
import numpy as np

import jax_tilescale as ts
from jax_tilescale import language as T

SDS = jax.ShapeDtypeStruct
ROWS, COLS = 2, 16


def scale_rows(tiles: int, grid: tuple[int, ...], threads: int = 64, rows: int = ROWS,
               cols: int = COLS, static_rounds: int = 0) -> ts.TileKernel:
    """`(x[tiles*rows, cols], scale[tiles]) -> (y, who[tiles], rnd[tiles])`, the tiles dealt by one T.tile_queue
    over `grid` (one or two axes: the block's linear number is program_id(0) + grid[0] * program_id(1)), its first
    `static_rounds` rounds dealt statically."""
    assert 1 <= len(grid) <= 2

    @ts.kernel(out_shape=(SDS((tiles * rows, cols), jnp.float32), SDS((tiles,), jnp.int32),
                          SDS((tiles,), jnp.int32)), grid=grid, threads=threads)
    def tile_queue_scale(x, scale, y, who, rnd):
        block = T.program_id(0) + (grid[0] * T.program_id(1) if len(grid) == 2 else 0)
        done = T.alloc_shared((1,), jnp.int32)  # the tiles this block has run so far
        for i in T.Parallel(1):
            done[i] = 0
        for t in T.tile_queue(tiles, static_rounds=static_rounds):
            s = T.alloc_shared((rows, cols), jnp.float32)
            T.copy(x[T.ds(t * rows, rows), :], s)
            for i, j in T.Parallel(rows, cols):
                s[i, j] = s[i, j] * scale[t]
            T.copy(s, y[T.ds(t * rows, rows), :])
            for i in T.Parallel(1):
                who[t + i] = block
                rnd[t + i] = done[i]
                done[i] = done[i] + 1

    return tile_queue_scale


def inputs(rng: np.random.Generator, tiles: int, rows: int = ROWS, cols: int = COLS) -> list[np.ndarray]:
    """Fresh x and scale, none of them zero or one (either could hide a tile left unscaled or unwritten)."""
    x = rng.standard_normal((tiles * rows, cols))
    x = np.where(np.abs(x) < 0.1, x + 0.5, x).astype(np.float32)
    scale = (rng.uniform(1.5, 3.0, tiles) * rng.choice([-1.0, 1.0], tiles)).astype(np.float32)
    return [x, scale]


def want_y(x: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """numpy's y: each tile's rows times its scale (one float32 multiply, as the kernel does)."""
    rows = x.shape[0] // scale.shape[0]
    return x * np.repeat(scale, rows)[:, None]


def poisoned_outputs(tiles: int, rows: int = ROWS, cols: int = COLS) -> list[np.ndarray]:
    """NaN and -1 where the kernel has not written: a tile nobody ran shows."""
    return [np.full((tiles * rows, cols), np.nan, np.float32), np.full(tiles, -1, np.int32),
            np.full(tiles, -1, np.int32)]


def check_deal(who: np.ndarray, rnd: np.ndarray, grid: tuple[int, ...], static_rounds: int = 0) -> dict[int, list[int]]:
    """Every tile was recorded by a block of the grid (an unwritten -1 poison fails); each block's tiles, in the
    order it ran them (rnd: 0, 1, 2, ...), rise (tickets are drawn in counter order); the first `static_rounds` *
    blocks tiles on the static deal's block (tile t on block t % blocks as its round t // blocks). Returns each
    block's tiles."""
    blocks = math.prod(grid)
    assert who.shape == rnd.shape
    static = np.arange(static_rounds * blocks)
    np.testing.assert_array_equal(who[static], static % blocks, "a static round's tile on another block")
    np.testing.assert_array_equal(rnd[static], static // blocks, "a static round's tile in another round")
    assert ((who >= 0) & (who < blocks)).all(), f"a tile without a block of the grid: {who}"
    by_block: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for tile, (b, r) in enumerate(zip(who.tolist(), rnd.tolist())):
        by_block[b].append((r, tile))
    dealt = {}
    for b, runs in by_block.items():
        runs.sort()
        assert [r for r, _ in runs] == list(range(len(runs))), f"block {b} counted its rounds {runs}"
        tiles = [t for _, t in runs]
        assert tiles == sorted(tiles), f"block {b} ran its tiles out of counter order: {tiles}"
        dealt[b] = tiles
    return dealt
