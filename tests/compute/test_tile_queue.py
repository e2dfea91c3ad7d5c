"""T.tile_queue (ir/tile_queue.py) in the interpreter: every tile is run once, by the block that drew it, against
numpy on fresh random data, with fewer, as many and more blocks than tiles; the interpreter interleaves the blocks,
so several of them take tiles, each in rising order; the counter is left zero (two launches in one jitted function,
the interpreter checking left_zero at each launch's end); a queue orders no memory (two blocks' tiles writing one
element race); where a block stands inside a queue (the timeout report); the printed IR; the verifier's errors.
Its CUDA: tests/codegen/test_tile_queue_emulated.py; on GPUs: tests/gpu/test_tile_queue_gpu.py."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_tilescale as ts
from jax_tilescale import language as T
from jax_tilescale.errors import InterpreterTimeoutError, KernelTraceError
from jax_tilescale.ir.printer import format_kernel
from jax_tilescale.ir.tile_queue import TICKET_SLOTS, TileQueue
from tests.compute import tile_queue_kernels as tq
from tests.interpret.harness import build, launch, random_inputs, session
from tests.primitives.util import mesh_of, shard_run

SDS = jax.ShapeDtypeStruct


def _run(kern: ts.TileKernel, *args: np.ndarray) -> list[np.ndarray]:
    """One PE, as users call a kernel: through jax.jit; every output, as a list."""
    out = jax.jit(kern)(*args)
    return [np.asarray(o) for o in (out if isinstance(out, (tuple, list)) else (out,))]


# ---- what it computes and how it deals the tiles ------------------------------------------------


@pytest.mark.parametrize("tiles,grid", [(13, (4,)), (6, (6,)), (3, (5,)), (11, (2, 2)), (1, (3,))],
                         ids=["fewer-blocks", "as-many", "more-blocks", "2d-grid", "one-tile"])
def test_every_tile_once_on_the_block_that_drew_it(tiles, grid):
    """y against numpy (a tile run twice, never or with the wrong number shows), each block's tiles rising in the
    order it ran them; a 2-D grid counts its blocks as the product (with one axis' count the counter would go back
    to zero too early or never: tiles dealt twice, or the interpreter's end-of-launch left_zero check)."""
    x, scale = tq.inputs(np.random.default_rng(tiles * 10 + len(grid)), tiles)
    y, who, rnd = _run(tq.scale_rows(tiles, grid), x, scale)
    np.testing.assert_array_equal(y, tq.want_y(x, scale))
    dealt = tq.check_deal(who, rnd, grid)
    # the interpreter runs a step of each block in turn: with more than one tile, more than one block draws one
    assert len(dealt) > 1 if tiles > 1 else len(dealt) == 1, dealt


@pytest.mark.parametrize("tiles,grid,static", [(13, (4,), 2), (12, (4,), 3), (11, (2, 2), 1), (6, (3,), 1)],
                         ids=["tail-of-5", "all-static", "2d-grid", "tail-of-3"])
def test_static_rounds_deal_the_first_waves_and_draw_the_rest(tiles, grid, static):
    """`static_rounds`: tile t < static * blocks on block t % blocks as its round t // blocks (the static deal, no
    draw), the rest drawn in counter order past them; every tile once, and the counter left zero for the second
    call (its last raw draw, tiles - static * blocks + blocks - 1, resets it; the interpreter checks left_zero at
    each launch's end). With as many static tiles as tiles every block draws only the ticket that ends its loop."""
    kern = tq.scale_rows(tiles, grid, static_rounds=static)
    for seed in (1, 2):  # two calls: the second finds the counter zero
        x, scale = tq.inputs(np.random.default_rng(seed * 100 + tiles), tiles)
        y, who, rnd = _run(kern, x, scale)
        np.testing.assert_array_equal(y, tq.want_y(x, scale))
        tq.check_deal(who, rnd, grid, static_rounds=static)


@pytest.mark.parametrize("static,match", [
    (4, r"tile_queue: static_rounds=4 deals 16 tiles statically over 4 blocks, more than the queue's 8 \(or fewer "
        r"than none\): take static_rounds from 0 to 2"),
    (-1, r"T.tile_queue: static_rounds must be an int >= 0, got -1"),
    (1.0, r"T.tile_queue: static_rounds must be an int >= 0, got 1.0"),
], ids=["more-than-the-tiles", "negative", "float"])
def test_static_rounds_past_the_tiles_or_not_an_int_are_refused(static, match):
    def body(x, y):
        for t in T.tile_queue(8, static_rounds=static):
            _copy_tile(x, y, t)

    with pytest.raises(KernelTraceError, match=match):
        _trace(body)


def test_two_launches_in_one_jit_find_the_counter_zero():
    """The second launch takes its input from the first's output (XLA neither merges nor reorders them): had the
    first left its counter past zero, the second would skip tiles (and the interpreter's left_zero check at the
    first launch's end would have failed it already)."""
    tiles, grid = 9, (4,)
    kern = tq.scale_rows(tiles, grid)
    x, scale = tq.inputs(np.random.default_rng(3), tiles)

    def twice(x, scale):
        y1, who1, rnd1 = kern(x, scale)
        y2, who2, rnd2 = kern(y1, scale)
        return y1, y2, who1, rnd1, who2, rnd2

    y1, y2, who1, rnd1, who2, rnd2 = (np.asarray(o) for o in jax.jit(twice)(x, scale))
    np.testing.assert_array_equal(y1, tq.want_y(x, scale))
    np.testing.assert_array_equal(y2, tq.want_y(tq.want_y(x, scale), scale))
    for who, rnd in ((who1, rnd1), (who2, rnd2)):
        assert len(tq.check_deal(who, rnd, grid)) > 1
    # and a second jitted call of the kernel on fresh data
    x3, scale3 = tq.inputs(np.random.default_rng(4), tiles)
    y3, who3, rnd3 = _run(kern, x3, scale3)
    np.testing.assert_array_equal(y3, tq.want_y(x3, scale3))
    tq.check_deal(who3, rnd3, grid)


def test_each_pe_deals_its_own_tiles():
    """Under shard_map every PE's launch has its own counter (global scratch is per PE): each PE runs all of its
    tiles on its own rows."""
    pes, tiles, grid = 2, 7, (3,)
    kern = tq.scale_rows(tiles, grid)
    rng = np.random.default_rng(5)
    parts = [tq.inputs(rng, tiles) for _ in range(pes)]
    x = np.concatenate([p[0] for p in parts])
    scale = np.concatenate([p[1] for p in parts])
    y, who, rnd = (np.asarray(o) for o in shard_run(kern, mesh_of((pes,)), x, scale))
    for pe, (xp, sp) in enumerate(parts):
        np.testing.assert_array_equal(y[pe * tiles * tq.ROWS:(pe + 1) * tiles * tq.ROWS], tq.want_y(xp, sp))
        assert len(tq.check_deal(who[pe * tiles:(pe + 1) * tiles], rnd[pe * tiles:(pe + 1) * tiles], grid)) > 1


def test_two_queues_in_one_kernel_have_a_counter_each():
    """Two queues one after the other: each deals all of its tiles (and leaves its own counter zero)."""
    n, cols, grid = 6, 8, (4,)

    @ts.kernel(out_shape=SDS((2 * n, cols), jnp.float32), grid=grid)
    def k(x, y):
        for t in T.tile_queue(n):
            for j in T.Parallel(cols):
                y[t, j] = x[t, j] * 2.0
        for t in T.tile_queue(n):
            for j in T.Parallel(cols):
                y[n + t, j] = x[n + t, j] + 1.0

    x = tq.inputs(np.random.default_rng(6), 2 * n, rows=1, cols=cols)[0]
    (y,) = _run(k, x)
    np.testing.assert_array_equal(y, np.concatenate([x[:n] * np.float32(2), x[n:] + np.float32(1)]))
    queues = [s for s in k.trace(SDS(x.shape, x.dtype)).body if isinstance(s, TileQueue)]
    assert len(queues) == 2 and queues[0].counter != queues[1].counter


# ---- memory: the queue deals tile numbers, it orders nothing --------------------------------------


def _halving(grid: tuple[int, ...], tiles: int = 8, cols: int = 8) -> ts.TileKernel:
    """Tiles 2r and 2r + 1 both write row r of y."""

    @ts.kernel(out_shape=SDS((tiles // 2, cols), jnp.float32), grid=grid)
    def halving(x, y):
        for t in T.tile_queue(tiles):
            for j in T.Parallel(cols):
                y[t // 2, j] = x[t, j]

    return halving


def test_two_blocks_tiles_writing_one_element_race():
    x = tq.inputs(np.random.default_rng(7), 8, rows=1, cols=8)[0]
    with pytest.raises(ts.RaceError, match=r"(?s)data race on PE 0's output buffer y: elements y\[\d+, 0:8\] .*"
                                           r"block \(\d,\).*block \(\d,\)"):
        _run(_halving((3,)), x)


def test_one_block_s_tiles_writing_one_element_do_not_race():
    """The same kernel on one block: its tiles run in program order, the later tile's row wins."""
    x = tq.inputs(np.random.default_rng(8), 8, rows=1, cols=8)[0]
    (y,) = _run(_halving((1,)), x)
    np.testing.assert_array_equal(y, x[1::2])


# ---- reports and the printed IR -----------------------------------------------------------------


def test_a_timeout_says_which_tile_of_the_queue_each_block_is_on():
    long = 10**9

    def spin(a, b):
        tile = T.alloc_shared((1, 8), np.float32)
        for t in T.tile_queue(4):
            T.copy(a[T.ds(t, 1), :], b[T.ds(t, 1), :])
            for _ in T.serial(long):
                T.fill(tile, 1.0)

    kernel = build(spin, inputs=[((4, 8), np.float32)], outputs=[((4, 8), np.float32)], grid=(2,), num_pes=1)
    res = launch(session(kernel, timeout_s=0.5), [[random_inputs(np.random.default_rng(9), 1, (4, 8))[0]]])
    (err,) = res.errors
    assert isinstance(err, InterpreterTimeoutError), repr(err)
    queue = next(s for s in kernel.body if isinstance(s, TileQueue))
    msg = str(err)
    for tile in (0, 1):  # the two blocks drew the first two tiles, one each
        assert f", tile {tile} of 4 of the tile queue at {queue.loc}" in msg, msg
    assert f" of {long} of the loop at " in msg


def test_the_printed_ir_shows_the_queue_its_counter_and_its_ticket_words():
    text = format_kernel(tq.scale_rows(5, (2,)).trace(SDS((5 * tq.ROWS, tq.COLS), jnp.float32),
                                                      SDS((5,), jnp.float32)))
    lines = text.splitlines()
    assert "  alloc tile_queue: global int32[1] level=global left_zero" in lines
    assert f"  alloc tile_drawn: shared int32[{TICKET_SLOTS}]" in lines
    at = next(i for i, ln in enumerate(lines) if " in tile_queue(" in ln)
    assert lines[at].startswith("  for i") and lines[at].endswith(" in tile_queue(5, counter=tile_queue):")
    assert lines[at + 1].startswith("    ")  # its body, one level in
    text = format_kernel(tq.scale_rows(5, (2,), static_rounds=2).trace(SDS((5 * tq.ROWS, tq.COLS), jnp.float32),
                                                                       SDS((5,), jnp.float32)))
    assert " in tile_queue(5, static_rounds=2, counter=tile_queue):" in text


# ---- where it may stand: the verifier's errors --------------------------------------------------


def _trace(body, grid: tuple[int, ...] = (4,), num_pes: int = 1, **kw: object) -> None:
    """Traces `body(x, y)` (float32[8, 8] each) as a kernel, through the decorator's rewrite of Python `if`."""
    kern = ts.kernel(out_shape=SDS((8, 8), jnp.float32), grid=grid, **kw)(body)
    kern.trace(SDS((8, 8), jnp.float32), mesh_axes=("x",), num_pes=num_pes)


def _copy_tile(x, y, t) -> None:
    for j in T.Parallel(8):
        y[t, j] = x[t, j]


def _in_a_serial_loop(x, y):
    for _ in T.serial(2):
        for t in T.tile_queue(8):
            _copy_tile(x, y, t)


def _in_an_if(x, y):
    if T.program_id(0) < 2:
        for t in T.tile_queue(8):
            _copy_tile(x, y, t)


@pytest.mark.parametrize("body", [_in_a_serial_loop, _in_an_if], ids=["serial", "if"])
def test_a_queue_below_the_top_level_is_refused(body):
    with pytest.raises(KernelTraceError, match=r"tile_queue: it stands at the top level of the kernel's body "
                                               r"\(one queue per launch: inside a loop or an if") as err:
        _trace(body)
    assert "test_tile_queue.py" in str(err.value)


def test_a_queue_in_a_kernel_with_clusters_is_refused():
    def body(x, y):
        for t in T.tile_queue(8):
            _copy_tile(x, y, t)

    _trace(body, grid=(4,))  # the same body without clusters is fine
    with pytest.raises(KernelTraceError, match=r"tile_queue: not in a kernel with clusters \(\(2,\)\)"):
        _trace(body, grid=(4,), cluster=2)


def _after_each_tile(statement):
    """A queue whose body copies its tile and then calls `statement()` (a barrier every block must reach)."""
    def body(x, y):
        for t in T.tile_queue(8):
            _copy_tile(x, y, t)
            statement()

    return body


def _nested_queue(x, y):
    for t in T.tile_queue(2):
        for u in T.tile_queue(4):
            _copy_tile(x, y, t * 4 + u)


def _barrier_deeper(x, y):
    for t in T.tile_queue(8):
        for _ in T.serial(2):
            if t < 4:
                T.barrier_all()


@pytest.mark.parametrize("body,what", [
    (_after_each_tile(T.barrier_all), "barrier_all"), (_after_each_tile(T.sync_all), "sync_all"),
    (_after_each_tile(T.barrier_all_block), "barrier_all_block"),
    (_nested_queue, "tile_queue"), (_barrier_deeper, "barrier_all"),
], ids=["barrier_all", "sync_all", "team-barrier", "nested-queue", "barrier-in-a-loop-and-if"])
def test_what_every_block_must_reach_is_refused_in_the_body(body, what):
    with pytest.raises(KernelTraceError, match=rf"tile_queue: {what} \(at .*test_tile_queue.py:\d+\) cannot stand "
                                               r"in its body: every block must reach it the same number of times"):
        _trace(body, num_pes=2)


@pytest.mark.parametrize("n", [0, -3, 2.5, "4", True], ids=["zero", "negative", "float", "str", "bool"])
def test_a_trip_count_not_a_positive_int_is_refused(n):
    def body(x, y):
        for t in T.tile_queue(n):
            _copy_tile(x, y, t)

    with pytest.raises(KernelTraceError, match=rf"T.tile_queue: the trip count must be a positive Python int, "
                                               rf"got {n!r}"):
        _trace(body)


def test_a_run_time_trip_count_is_refused():
    def body(x, y):
        for t in T.tile_queue(T.program_id(0) + 1):
            _copy_tile(x, y, t)

    with pytest.raises(KernelTraceError, match=r"T.tile_queue: the trip count must be known when the kernel is "
                                               r"traced .*not a run-time value"):
        _trace(body)
