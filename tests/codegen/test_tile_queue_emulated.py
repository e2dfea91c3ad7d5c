"""The generated CUDA of T.tile_queue (codegen/control.py emit_tile_queue: thread 0 draws each round's ticket with
ts_queue_draw into a shared word, one block barrier, every thread reads it), for sm_90 and sm_80: the kernel of
tests/compute/tile_queue_kernels.py run on the CPU emulator (tests/codegen/emulator) into poisoned outputs, against
numpy; the emulator checks the counter (left_zero scratch) is zero after the grid. It runs the blocks one after
another, so the first block takes every tile there and the rest draw only the ticket that ends their loop (the GPU
suite sees the tiles shared: tests/gpu/test_tile_queue_gpu.py). And the source builds with nvcc."""

from __future__ import annotations

import math
import re

import jax
import numpy as np
import pytest

from jax_tilescale.codegen import generate_cuda
from jax_tilescale.codegen.cuda import CudaModule
from jax_tilescale.compiler import compile_cubin
from tests.codegen import emulator
from tests.compute import tile_queue_kernels as tq

SDS = jax.ShapeDtypeStruct
ARCHS = ["sm_90", "sm_80"]


def _module(tiles: int, grid: tuple[int, ...], arch: str, static_rounds: int = 0) -> CudaModule:
    kern = tq.scale_rows(tiles, grid, static_rounds=static_rounds)
    return generate_cuda(kern.trace(SDS((tiles * tq.ROWS, tq.COLS), np.float32), SDS((tiles,), np.float32)), arch)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("tiles,grid", [(13, (4,)), (5, (5,)), (3, (6,)), (9, (2, 3))],
                         ids=["fewer-blocks", "as-many", "more-blocks", "2d-grid"])
def test_every_tile_once_on_the_emulator(arch, tiles, grid):
    emulator.require()
    x, scale = tq.inputs(np.random.default_rng(tiles + 100 * len(grid)), tiles)
    y, who, rnd = emulator.run(_module(tiles, grid, arch), [x, scale], tq.poisoned_outputs(tiles))
    np.testing.assert_array_equal(y, tq.want_y(x, scale))
    tq.check_deal(who, rnd, grid)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("tiles,grid,static", [(13, (4,), 2), (9, (3,), 3), (11, (2, 2), 1)],
                         ids=["tail-of-5", "all-static", "2d-grid"])
def test_static_rounds_on_the_emulator(arch, tiles, grid, static):
    """The static rounds' tiles on their blocks (blockIdx.x + gridDim.x * blockIdx.y, as the interpreter counts),
    the rest drawn past them, the counter zero after the grid (the emulator checks left_zero scratch)."""
    emulator.require()
    x, scale = tq.inputs(np.random.default_rng(tiles + 7 * static), tiles)
    mod = _module(tiles, grid, arch, static_rounds=static)
    y, who, rnd = emulator.run(mod, [x, scale], tq.poisoned_outputs(tiles))
    np.testing.assert_array_equal(y, tq.want_y(x, scale))
    tq.check_deal(who, rnd, grid, static_rounds=static)
    assert f"< {static}u ?" in mod.source  # the static rounds take no ticket from the counter


@pytest.mark.parametrize("arch", ARCHS)
def test_the_draw_and_the_last_ticket_in_the_source_and_it_builds(arch, session_cache, require_nvcc):
    """Thread 0 draws with ts_queue_draw, whose last ticket (tiles + blocks - 1) zeroes the counter, into the round's
    word of the shared ticket words; the block meets; every thread reads the word, leaves on a ticket past the
    tiles. Then nvcc builds it."""
    tiles, grid = 29, (3, 2)
    mod = _module(tiles, grid, arch)
    src = mod.source
    last = tiles + math.prod(grid) - 1
    draw = re.search(r"if \(threadIdx\.x == 0\) reinterpret_cast<int32_t\*>\((\w+)\)\[(\w+)_round & 1u\] = "
                     r"ts_queue_draw\(reinterpret_cast<int32_t\*>\(\w+\), (\d+)\);", src)
    assert draw, src
    assert int(draw.group(3)) == last
    words, tile = draw.group(1), draw.group(2)
    after = src[draw.end():]
    steps = ["__syncthreads();",
             f"const int64_t {tile} = (int64_t)(uint32_t)reinterpret_cast<int32_t*>({words})[{tile}_round & 1u];",
             f"if ({tile} >= {tiles}) break;"]
    at = 0
    for step in steps:  # each right after the one before
        nxt = after.find(step, at)
        assert 0 <= nxt - at < 200, (step, after[:600])
        at = nxt
    assert src.count("= ts_queue_draw(") == 1  # one draw site (the header defines ts_queue_draw too)
    compile_cubin(src, arch=mod.arch, entry=mod.entry, nvshmem=False)
