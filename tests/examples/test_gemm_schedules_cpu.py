"""examples/gemm.py's split-K, persistent and swapped schedules on the interpreter, against jnp.dot in
float32 on random data at ragged shapes, and the tile table's (codegen/gemm_table.py) picks."""

from __future__ import annotations

import collections
import itertools
from dataclasses import replace

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jax_tilescale.codegen import generate_cuda
from jax_tilescale.codegen.gemm_table import (
    DEFAULT,
    DEFAULT_PERSISTENT,
    MID,
    NARROW,
    NARROW_K128,
    NARROW_WIDE,
    SWAP_MAX_M,
    SWAPPED,
    GemmConfig,
    fp8_pick,
    pick_config,
    skinny_seconds,
    swapped_config,
)
from jax_tilescale.ir.nodes import Gemm, walk_stmts
from tests.conftest import load_example

gemm_example = load_example("gemm")
SMALL_TILES = dict(block_m=64, block_n=32, block_k=16, num_stages=2, threads=128)


def _product(m, n, k, dtype, seed, **cfg):
    rng = np.random.default_rng(seed)
    a = jnp.asarray(rng.standard_normal((m, k)), dtype)
    b = jnp.asarray(rng.standard_normal((k, n)), dtype)
    got = jax.jit(gemm_example.gemm(m, n, k, jnp.dtype(dtype), **cfg))(a, b)
    want = jnp.dot(a.astype(jnp.float32), b.astype(jnp.float32), precision=jax.lax.Precision.HIGHEST)
    return got, want


def _random_f32(m, n, k, seed):
    """A [m, k] and B [k, n], float32, standard normal."""
    rng = np.random.default_rng(seed)
    return jnp.asarray(rng.standard_normal((m, k)), jnp.float32), jnp.asarray(rng.standard_normal((k, n)), jnp.float32)


def _assert_close(got, want, dtype):
    tol = 2e-2 if dtype == jnp.bfloat16 else 1e-4
    assert got.shape == want.shape
    err = float(jnp.max(jnp.abs(got.astype(jnp.float32) - want)))
    assert err <= tol * float(jnp.max(jnp.abs(want))), err


@pytest.mark.parametrize("reduce", ["kernel", "xla"])
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
@pytest.mark.parametrize("m,n,k,split", [(200, 136, 80, 5), (130, 70, 96, 2), (70, 96, 88, 3), (150, 40, 64, 4)])
def test_split_k_matches_dot_at_ragged_shapes(dtype, m, n, k, split, reduce):
    """K over `split` blocks per tile (72 = 4.5 k-steps of 16: the last split's last step clips),
    the partials summed by the tile's last split (in the kernel) or by XLA afterwards."""
    kern = gemm_example.gemm(m, n, k, jnp.dtype(dtype), split_k=split, split_reduce=reduce, **SMALL_TILES)
    assert isinstance(kern, gemm_example.SplitK) and kern.splits == split
    got, want = _product(m, n, k, dtype, m + n + k, split_k=split, split_reduce=reduce, **SMALL_TILES)
    _assert_close(got, want, dtype)


@pytest.mark.parametrize("splits", [2, 4])
def test_split_k_in_the_kernel_is_deterministic_and_sums_in_split_order(splits):
    """Whichever split of a tile finishes last, C is slab 0 + slab 1 + ... of its float32 partials
    (the kernel's second output), the same bits every run (two splits: the last one adds the other's
    slab to its own, still in its registers)."""
    m, n, k = 96, 64, 128
    kern = gemm_example.gemm(m, n, k, jnp.dtype(jnp.float32), split_k=splits, split_reduce="kernel",
                             **SMALL_TILES)
    a, b = _random_f32(m, n, k, 5)
    first, second = jax.jit(kern)(a, b), jax.jit(kern)(a, b)
    assert np.array_equal(np.asarray(first), np.asarray(second))
    c, w = jax.jit(kern.kernel)(a, b)
    bm, bn = SMALL_TILES["block_m"], SMALL_TILES["block_n"]
    tiles_m, tiles_n = -(-m // bm), -(-n // bn)
    # slab (split, tile) at rows (split * tiles + tile) * bm, tile the launch order's number, whose (tile row, tile
    # column) the grouped order says
    group = gemm_example.group_of(tiles_m, GemmConfig(**SMALL_TILES))
    parts = np.asarray(w).reshape(splits, tiles_m * tiles_n, bm, bn)
    slabs = np.zeros((splits, tiles_m * bm, tiles_n * bn), np.float32)
    for pid in range(tiles_m * tiles_n):
        tm, tn = gemm_example.grouped_tile(pid, tiles_m, tiles_n, group)
        slabs[:, tm * bm:(tm + 1) * bm, tn * bn:(tn + 1) * bn] = parts[:, pid]
    slabs = slabs[:, :m, :n]
    want = slabs[0]
    for s in range(1, splits):  # the documented order, in float32
        want = want + slabs[s]
    assert np.array_equal(np.asarray(first), want) and np.array_equal(np.asarray(c), want)
    dot = np.asarray(a, np.float64) @ np.asarray(b, np.float64)
    assert np.max(np.abs(want - dot)) <= 1e-4 * np.max(np.abs(dot))  # and the slabs are the product's parts


def test_split_k_summed_by_xla_sums_in_split_order():
    m, n, k = 96, 64, 128
    kern = gemm_example.gemm(m, n, k, jnp.dtype(jnp.float32), split_k=4, split_reduce="xla", **SMALL_TILES)
    a, b = _random_f32(m, n, k, 5)
    first = jax.jit(kern)(a, b)
    slabs = np.asarray(jax.jit(kern.kernel)(a, b)).reshape(4, kern.rows, n)[:, :m]
    want = ((slabs[0] + slabs[1]) + slabs[2]) + slabs[3]
    assert np.array_equal(np.asarray(first), want)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
@pytest.mark.parametrize("m,n,k,split", [(130, 70, 96, 2), (150, 40, 64, 4), (70, 96, 256, 8)])
def test_split_k_in_a_cluster_matches_dot_at_ragged_shapes(dtype, m, n, k, split):
    """A tile's splits as one cluster adding through shared memory (reduce="cluster"), ragged M and N."""
    kern = gemm_example.gemm(m, n, k, jnp.dtype(dtype), split_k=split, split_reduce="cluster", **SMALL_TILES)
    assert kern.kernel.spec.cluster == (1, 1, split)
    got, want = _product(m, n, k, dtype, m + 2 * n + k, split_k=split, split_reduce="cluster", **SMALL_TILES)
    _assert_close(got, want, dtype)


def test_split_k_in_a_cluster_adds_pairwise_in_a_fixed_order():
    """Four splits: (p0 + p1) + (p2 + p3), each partial the float32 product of its quarter of K, bit for bit."""
    m, n, k = 64, 32, 128
    kern = gemm_example.gemm(m, n, k, jnp.dtype(jnp.float32), split_k=4, split_reduce="cluster", **SMALL_TILES)
    a, b = _random_f32(m, n, k, 11)
    got = np.asarray(jax.jit(kern)(a, b))
    parts = [np.asarray(jax.jit(gemm_example.gemm(m, n, 32, jnp.dtype(jnp.float32), **SMALL_TILES))(
        a[:, 32 * s:32 * (s + 1)], b[32 * s:32 * (s + 1)])) for s in range(4)]
    assert np.array_equal(got, (parts[0] + parts[1]) + (parts[2] + parts[3]))


def test_split_k_in_a_cluster_needs_a_power_of_two_up_to_eight():
    with pytest.raises(ValueError, match="split_k must be 2, 4 or 8, not 3"):
        gemm_example.gemm(64, 64, 96, jnp.dtype(jnp.float32), split_k=3, split_reduce="cluster", **SMALL_TILES)


def test_a_split_that_does_not_divide_the_k_steps_is_refused():
    with pytest.raises(ValueError, match=r"split_k=3 does not divide the 5 k-steps of K=72 .*use one of \[1, 5\]"):
        gemm_example.gemm(64, 64, 72, jnp.dtype(jnp.float32), split_k=3, **SMALL_TILES)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
@pytest.mark.parametrize("m,n,k,sms", [(200, 136, 72, 5), (256, 64, 48, 3), (70, 40, 33, 16)])
def test_persistent_matches_dot_at_ragged_shapes(dtype, m, n, k, sms):
    """Fewer blocks than tiles (the last wave partial: the `tile < tiles` guard), and more SMs than
    tiles (one tile per block)."""
    got, want = _product(m, n, k, dtype, m * n + k, persistent=True, num_sms=sms, **SMALL_TILES)
    _assert_close(got, want, dtype)


def test_grouped_order_visits_every_tile_once_with_a_partial_last_group():
    """grouped_tile where the group does not divide the rows of tiles: a bijection onto the tiles, each run of
    group * tiles_n consecutive pids within `group` adjacent rows (the last group takes the rows left)."""
    for tiles_m, tiles_n, group in itertools.product(range(1, 24), range(1, 10), range(1, 9)):
        order = [gemm_example.grouped_tile(p, tiles_m, tiles_n, group) for p in range(tiles_m * tiles_n)]
        assert sorted(order) == [(r, c) for r in range(tiles_m) for c in range(tiles_n)], (tiles_m, tiles_n, group)
        for start in range(0, tiles_m * tiles_n, group * tiles_n):
            rows = {r for r, _ in order[start:start + group * tiles_n]}
            assert max(rows) - min(rows) < group and min(rows) == start // tiles_n, (tiles_m, tiles_n, group)
    assert gemm_example.group_of(103, GemmConfig(group_m=8)) == 8  # was 1 (row after row) where 8 did not divide


def test_edge_last_order_visits_every_tile_once_and_the_last_column_last():
    """edge_last_tile: a bijection onto the tiles; the last tiles_m pids walk the last column top to bottom, the
    others are grouped_tile's order over the other columns."""
    for tiles_m, tiles_n, group in itertools.product(range(1, 20), range(1, 8), range(1, 6)):
        order = [gemm_example.edge_last_tile(p, tiles_m, tiles_n, group) for p in range(tiles_m * tiles_n)]
        assert sorted(order) == [(r, c) for r in range(tiles_m) for c in range(tiles_n)], (tiles_m, tiles_n, group)
        if tiles_n > 1:
            assert order[-tiles_m:] == [(r, tiles_n - 1) for r in range(tiles_m)]
            body = tiles_m * (tiles_n - 1)
            assert order[:body] == [gemm_example.grouped_tile(p, tiles_m, tiles_n - 1, group) for p in range(body)]


def test_edge_last_in_column_groups_visits_every_tile_once_and_the_last_column_last():
    """persistent_tile with group_columns and edge_last (N ragged): a bijection onto the tiles; the last tiles_m pids
    walk the edge column top to bottom, the others are the column-grouped order over the full columns."""
    for tiles_m, tiles_n, group_m in itertools.product(range(1, 12), range(1, 14), range(1, 9)):
        cfg = GemmConfig(group_m=group_m, persistent=True, group_columns=True, edge_last=True)
        group = min(group_m, tiles_n)
        order = [gemm_example.persistent_tile(p, tiles_m, tiles_n, group, cfg, edge=True)
                 for p in range(tiles_m * tiles_n)]
        assert sorted(order) == [(r, c) for r in range(tiles_m) for c in range(tiles_n)], (tiles_m, tiles_n, group)
        if tiles_n > 1:
            assert order[-tiles_m:] == [(r, tiles_n - 1) for r in range(tiles_m)], (tiles_m, tiles_n, group)
            body = tiles_m * (tiles_n - 1)
            columns = GemmConfig(group_m=group_m, persistent=True, group_columns=True)
            assert order[:body] == [gemm_example.persistent_tile(p, tiles_m, tiles_n - 1, min(group, tiles_n - 1),
                                                                 columns) for p in range(body)]
        # where N is a multiple of block_n there is no edge column: column groups' own order
        plain = [gemm_example.persistent_tile(p, tiles_m, tiles_n, group, cfg) for p in range(tiles_m * tiles_n)]
        assert plain == [gemm_example.persistent_tile(p, tiles_m, tiles_n, group,
                                                      GemmConfig(group_m=group_m, persistent=True, group_columns=True))
                         for p in range(tiles_m * tiles_n)]


def test_the_edge_tiles_of_column_groups_land_on_one_third_of_the_blocks_unless_walked_last():
    """Why edge_last matters in column groups at 16384 x 8192 x 1024 (128 x 43 tiles of 128x192 in groups of 8 on 132
    blocks, block b taking tiles b, b + 132, ...): without it the edge column's 128 tiles are every third tile of the
    last group of 3 columns, and 132 is a multiple of 3, so 44 blocks take all of them while blocks with 42 full tiles
    take none (the kernel lasts 42 tile-times); walked last, no block takes more than 41 full tiles and one edge
    tile."""
    tiles_m, tiles_n, blocks = 128, 43, 132
    for edge_last in (False, True):
        cfg = GemmConfig(block_m=128, block_n=192, persistent=True, pingpong=True, group_columns=True,
                         edge_last=edge_last)
        full, edges = [0] * blocks, [0] * blocks
        for t in range(tiles_m * tiles_n):
            _, tn = gemm_example.persistent_tile(t, tiles_m, tiles_n, 8, cfg, edge=True)
            (edges if tn == tiles_n - 1 else full)[t % blocks] += 1
        holders = {b for b in range(blocks) if edges[b]}
        if edge_last:
            assert max(full) == 41 and max(edges) == 1
            assert all(full[b] + edges[b] <= 42 for b in range(blocks))
        else:
            assert len(holders) == 44 and max(full) == 42
            assert any(full[b] == 42 for b in range(blocks) if b not in holders)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
@pytest.mark.parametrize("m,n,k,sms,group", [(200, 136, 72, 5, 2), (330, 260, 40, 3, 3)])
def test_edge_last_in_column_groups_matches_dot(dtype, m, n, k, sms, group):
    """Column groups with the edge column last (5 and 9 tile columns of 32, the last ragged), through the
    interpreter."""
    got, want = _product(m, n, k, dtype, m * 7 + n + k, persistent=True, num_sms=sms, group_columns=True,
                         edge_last=True, **dict(SMALL_TILES, group_m=group))
    _assert_close(got, want, dtype)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
@pytest.mark.parametrize("m,n,k,sms", [(200, 136, 72, 5), (320, 100, 40, 3), (64, 70, 33, 16)])
def test_edge_last_matches_dot(dtype, m, n, k, sms):
    """The persistent grid with the edge column last (N ragged: 136, 100, 70 in tiles of 32; the last on one row of
    tiles), through the interpreter."""
    got, want = _product(m, n, k, dtype, m * 3 + n + k, persistent=True, num_sms=sms, edge_last=True, **SMALL_TILES)
    _assert_close(got, want, dtype)


def test_edge_last_is_for_persistent_unswapped_grids():
    for kw in (dict(), dict(persistent=True, swap=True, block_m=16, block_n=64, threads=128)):
        with pytest.raises(ValueError, match="edge_last orders the tiles of a persistent grid"):
            gemm_example.gemm(100, 100, 64, jnp.dtype(jnp.bfloat16), edge_last=True, **kw)


def test_column_groups_visit_every_tile_once_each_group_within_its_columns():
    """persistent_tile with group_columns: a bijection onto the tiles; each run of group * tiles_m consecutive pids
    stays within `group` adjacent tile columns (the last group takes the columns left) and walks every row."""
    for tiles_m, tiles_n, group_m in itertools.product(range(1, 12), range(1, 14), range(1, 9)):
        cfg = GemmConfig(group_m=group_m, persistent=True, group_columns=True)
        group = min(group_m, tiles_n)
        order = [gemm_example.persistent_tile(p, tiles_m, tiles_n, group, cfg) for p in range(tiles_m * tiles_n)]
        assert sorted(order) == [(r, c) for r in range(tiles_m) for c in range(tiles_n)], (tiles_m, tiles_n, group)
        for start in range(0, tiles_m * tiles_n, group * tiles_m):
            run = order[start:start + group * tiles_m]
            cols = {c for _, c in run}
            assert max(cols) - min(cols) < group and min(cols) == start // tiles_m, (tiles_m, tiles_n, group)
            assert {r for r, _ in run} == set(range(tiles_m))


def test_rows_in_pairs_visit_every_tile_once_and_pairs_share_a_column():
    """persistent_tile with group_columns and pair_rows: a bijection onto the tiles; pids 2q and 2q + 1 take tiles
    (2r, c) and (2r + 1, c) (so a pair of blocks shares B's tile at every wave), the pairs in column groups as
    group_columns' order has them, and with an odd number of tile rows the last row after every pair, left to right."""
    for tiles_m, tiles_n, group_m in itertools.product(range(1, 12), range(1, 14), range(1, 9)):
        cfg = GemmConfig(group_m=group_m, persistent=True, group_columns=True, pair_rows=True)
        group = min(group_m, tiles_n)
        tiles = tiles_m * tiles_n
        order = [gemm_example.persistent_tile(p, tiles_m, tiles_n, group, cfg) for p in range(tiles)]
        assert sorted(order) == [(r, c) for r in range(tiles_m) for c in range(tiles_n)], (tiles_m, tiles_n, group)
        if tiles_m == 1:
            continue  # one row: group_columns' own order
        paired = tiles_m // 2 * 2 * tiles_n
        for q in range(paired // 2):
            (r0, c0), (r1, c1) = order[2 * q], order[2 * q + 1]
            assert c0 == c1 and r0 % 2 == 0 and r1 == r0 + 1, (tiles_m, tiles_n, group, q)
        assert order[paired:] == [(tiles_m - 1, c) for c in range(tiles_n)] if tiles_m % 2 else order[paired:] == []
        rows_of_pairs = GemmConfig(group_m=group_m, persistent=True, group_columns=True)
        pairs = [(order[2 * q][0] // 2, order[2 * q][1]) for q in range(paired // 2)]
        assert pairs == [gemm_example.persistent_tile(q, tiles_m // 2, tiles_n, group, rows_of_pairs)
                         for q in range(paired // 2)]


def test_serpentine_orders_visit_every_tile_once_and_start_each_group_where_the_last_one_ended():
    """persistent_tile with serpentine, in row groups and column groups (with and without rows in pairs, with and
    without the edge column last): a bijection onto the tiles; in the plain orders the odd-numbered groups are the
    even ones' walk reversed, so that each group's first tiles share the walked operand's tile with the previous
    group's last ones."""
    for tiles_m, tiles_n, group_m in itertools.product(range(1, 11), range(1, 11), range(1, 6)):
        for columns, pairs, edge_last in itertools.product((False, True), repeat=3):
            if pairs and (not columns or edge_last):
                continue
            cfg = GemmConfig(group_m=group_m, persistent=True, group_columns=columns, pair_rows=pairs,
                             edge_last=edge_last, serpentine=True)
            group = min(group_m, tiles_n if columns else tiles_m)
            order = [gemm_example.persistent_tile(p, tiles_m, tiles_n, group, cfg, edge=True)
                     for p in range(tiles_m * tiles_n)]
            assert sorted(order) == [(r, c) for r in range(tiles_m) for c in range(tiles_n)], (
                tiles_m, tiles_n, group, columns, pairs, edge_last)
            if pairs or edge_last:
                continue
            walked = tiles_m if columns else tiles_n
            plain = [gemm_example.persistent_tile(p, tiles_m, tiles_n, group, replace(cfg, serpentine=False))
                     for p in range(tiles_m * tiles_n)]
            width = group * walked
            for start in range(0, tiles_m * tiles_n, width):
                run, base = order[start:start + width], plain[start:start + width]
                if start // width % 2 == 0:
                    assert run == base
                else:  # the same tiles, the walk reversed: index 0 (rows) or 1 (columns) of each tile flipped
                    flip = 0 if columns else 1
                    assert run == [tuple(walked - 1 - t[i] if i == flip else t[i] for i in range(2)) for t in base]
                    assert run[0][flip] == order[start - 1][flip]  # starts on the operand tile the last group ended on


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
@pytest.mark.parametrize("columns", [False, True])
def test_serpentine_matches_dot(dtype, columns):
    """Serpentine orders through the interpreter: 7 x 5 tiles of 32 (M and N ragged) in groups of 2 (the last
    partial, walked backwards: the third group) on 3 blocks."""
    got, want = _product(200, 136, 72, dtype, 11 + columns, persistent=True, num_sms=3, group_columns=columns,
                         serpentine=True, **dict(SMALL_TILES, group_m=2))
    _assert_close(got, want, dtype)


def test_serpentine_is_for_persistent_unsplit_grids():
    for kw in (dict(), dict(persistent=True, split_k=2)):
        with pytest.raises(ValueError, match="serpentine orders the tiles of a persistent grid"):
            gemm_example.gemm(100, 100, 64, jnp.dtype(jnp.bfloat16), serpentine=True, **kw)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
@pytest.mark.parametrize("pingpong", [False, True])
def test_tile_queue_matches_dot(dtype, pingpong):
    """A persistent grid whose blocks draw their tiles from a tile queue, through the interpreter (which deals the
    tiles among the blocks it interleaves): 4 x 5 tiles of 64 x 32 (M and N ragged) on 3 blocks, in column groups."""
    got, want = _product(200, 136, 72, dtype, 21 + pingpong, persistent=True, num_sms=3, group_columns=True,
                         tile_queue=True, pingpong=pingpong, **dict(SMALL_TILES, group_m=2))
    _assert_close(got, want, dtype)


@pytest.mark.parametrize("pingpong", [False, True])
def test_a_tile_queue_s_tail_matches_dot(pingpong):
    """queue_tail=1: 4 x 5 tiles on 3 blocks, the first 5 full waves dealt statically and the last 5 tiles drawn,
    through the interpreter, against jnp.dot in float32."""
    dtype = jnp.bfloat16
    got, want = _product(200, 136, 72, dtype, 31 + pingpong, persistent=True, num_sms=3, group_columns=True,
                         tile_queue=True, queue_tail=1, pingpong=pingpong, **dict(SMALL_TILES, group_m=2))
    _assert_close(got, want, dtype)


def test_a_queue_tail_takes_a_tile_queue():
    for kw in (dict(persistent=True), dict(persistent=True, tile_queue=True, queue_tail=-1)):
        with pytest.raises(ValueError, match=r"queue_tail .* takes tile_queue=True and a count >= 0"):
            gemm_example.gemm(100, 100, 64, jnp.dtype(jnp.bfloat16), queue_tail=kw.pop("queue_tail", 2), **kw)


def test_tile_queue_is_for_persistent_unsplit_grids():
    for kw in (dict(), dict(persistent=True, split_k=2)):
        with pytest.raises(ValueError, match="tile_queue deals the tiles of a persistent grid"):
            gemm_example.gemm(100, 100, 64, jnp.dtype(jnp.bfloat16), tile_queue=True, **kw)


def _banded_reference(tiles_m, tiles_n, group, band_columns, band_rows):
    """The banded order written as loops: super-groups of columns, bands of rows, column groups walking the band."""
    out = []
    for c0 in range(0, tiles_n, band_columns):
        columns = range(c0, min(c0 + band_columns, tiles_n))
        for r0 in range(0, tiles_m, band_rows):
            rows = range(r0, min(r0 + band_rows, tiles_m))
            for g0 in range(columns.start, columns.stop, group):
                cols = range(g0, min(g0 + group, columns.stop))
                out += [(r, c) for r in rows for c in cols]
    return out


def test_banded_column_groups_follow_their_loops_and_visit_every_tile_once():
    """banded_tile (through persistent_tile) against the same order written as loops, partial super-groups, bands and
    groups included; at the pick's 128 x 43 tiles in bands of 16 x 16 each wave's blocks want any one of A's tile rows
    at most 8 at a time (the plain column groups of 16: 16)."""
    for tiles_m, tiles_n in itertools.product(range(1, 14), range(1, 12)):
        for group_m, band_columns, band_rows in itertools.product((1, 2, 3), (2, 4, 5), (1, 3, 4)):
            cfg = GemmConfig(group_m=group_m, persistent=True, group_columns=True, band_columns=band_columns,
                             band_rows=band_rows)
            group = min(group_m, tiles_n)
            order = [gemm_example.persistent_tile(p, tiles_m, tiles_n, group, cfg) for p in range(tiles_m * tiles_n)]
            assert order == _banded_reference(tiles_m, tiles_n, group, band_columns, band_rows), (
                tiles_m, tiles_n, group_m, band_columns, band_rows)
    cfg = GemmConfig(block_n=192, persistent=True, pingpong=True, group_columns=True, band_columns=16, band_rows=16)
    order = [gemm_example.persistent_tile(p, 128, 43, 8, cfg) for p in range(128 * 43)]
    assert sorted(order) == [(r, c) for r in range(128) for c in range(43)]
    waves = [order[s:s + 132] for s in range(0, len(order), 132)]
    assert max(max(collections.Counter(r for r, _ in wave).values()) for wave in waves) <= 16
    assert sum(max(collections.Counter(r for r, _ in wave).values()) for wave in waves) / len(waves) < 10


def test_bands_are_for_column_groups():
    for kw in (dict(persistent=True, band_columns=16, band_rows=16),
               dict(persistent=True, group_columns=True, band_columns=16),
               dict(persistent=True, group_columns=True, band_columns=16, band_rows=16, serpentine=True)):
        with pytest.raises(ValueError, match="band_columns and band_rows"):
            gemm_example.gemm(300, 300, 64, jnp.dtype(jnp.bfloat16), **kw)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_banded_column_groups_match_dot(dtype):
    """7 x 5 tiles of 32 (M and N ragged) in super-groups of 3 columns (the last 2), bands of 3 rows (the last 1),
    groups of 2 (partial in each super-group), on 3 blocks, through the interpreter."""
    got, want = _product(200, 136, 72, dtype, 21, persistent=True, num_sms=3, group_columns=True, band_columns=3,
                         band_rows=3, **dict(SMALL_TILES, group_m=2))
    _assert_close(got, want, dtype)


def test_rows_in_pairs_are_for_column_groups():
    for kw in (dict(), dict(group_columns=True, edge_last=True)):
        with pytest.raises(ValueError, match="pair_rows walks the rows of group_columns' order two at a time"):
            gemm_example.gemm(300, 300, 64, jnp.dtype(jnp.bfloat16), persistent=True, pair_rows=True, **kw)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
@pytest.mark.parametrize("m,n,k,sms,group", [(256, 136, 72, 4, 2), (200, 260, 40, 6, 3)])
def test_rows_in_pairs_match_dot(dtype, m, n, k, sms, group):
    """Column groups with the rows in pairs through the interpreter: M = 256 and 200 (4 tile rows, every row in a
    pair; at 200 the last partial), then 64 rows fewer (3 tile rows: the last alone, after the pairs); 5 and 9 tile
    columns in groups of 2 and 3 (the last group partial)."""
    got, want = _product(m, n, k, dtype, m * 3 + n + k, persistent=True, num_sms=sms, group_columns=True,
                         pair_rows=True, **dict(SMALL_TILES, group_m=group))
    _assert_close(got, want, dtype)
    got, want = _product(m - 64, n, k, dtype, m + n + k, persistent=True, num_sms=sms, group_columns=True,
                         pair_rows=True, **dict(SMALL_TILES, group_m=group))  # an odd number of tile rows
    _assert_close(got, want, dtype)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
@pytest.mark.parametrize("m,n,k,sms,group", [(200, 136, 72, 5, 2), (330, 260, 40, 3, 3), (64, 70, 33, 16, 8)])
def test_column_groups_match_dot(dtype, m, n, k, sms, group):
    """The persistent grid in column groups (N ragged: 5, 9 and 3 tile columns, groups of 2, 3 and all of them: the
    last group partial in the first two), through the interpreter; the swapped product's too."""
    got, want = _product(m, n, k, dtype, m * 5 + n + k, persistent=True, num_sms=sms, group_columns=True,
                         **dict(SMALL_TILES, group_m=group))
    _assert_close(got, want, dtype)
    got, want = _product(m, n, k, dtype, m + n + k, persistent=True, num_sms=sms, group_columns=True, swap=True,
                         block_m=16, block_n=64, block_k=16, num_stages=2, threads=128, group_m=group)
    _assert_close(got, want, dtype)


def test_column_groups_are_for_persistent_unsplit_grids():
    for kw in (dict(), dict(persistent=True, split_k=2)):
        with pytest.raises(ValueError, match="group_columns orders the tiles of a persistent grid"):
            gemm_example.gemm(100, 100, 64, jnp.dtype(jnp.bfloat16), group_columns=True, **kw)


def test_the_ping_pong_pick_takes_column_groups_up_to_short_k_in_bands_where_they_pay():
    """PERSISTENT_BANDED at 16384 x 8192 x 1024 and 8192 x 8192 x 1024 (43 tile columns: three super-groups of 16,
    the last 11; 128 and 64 tile rows), PERSISTENT_COLUMNS at 3072 x 3072 x 1024 (16 tile columns: one super-group),
    PERSISTENT at K = 2048 (not measured: the row groups stay)."""
    from jax_tilescale.codegen.gemm_table import PERSISTENT, PERSISTENT_BANDED, PERSISTENT_COLUMNS

    assert pick_config(16384, 8192, 1024, "bfloat16") == PERSISTENT_BANDED
    assert PERSISTENT_BANDED.describe() == "128x192x64/4/g4/p/pp/gc/band16x16"
    assert pick_config(8192, 8192, 1024, "bfloat16") == PERSISTENT_BANDED
    assert pick_config(3072, 3072, 1024, "bfloat16") == PERSISTENT_COLUMNS
    assert PERSISTENT_COLUMNS.describe() == "128x192x64/4/g8/p/pp/gc"
    assert pick_config(16384, 8192, 2048, "bfloat16") == PERSISTENT


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
@pytest.mark.parametrize("m,n,k,group,persistent", [(320, 96, 40, 2, False), (330, 100, 48, 4, False),
                                                    (320, 96, 40, 3, True), (450, 64, 32, 3, True)])
def test_partial_last_group_matches_dot(dtype, m, n, k, group, persistent):
    """Rows of 64-row tiles (5, 6, 5, 8) that the group (2, 4, 3, 3) does not divide: the grouped order's last group
    is partial (1, 2, 2, 2 rows), on the one-tile-a-block grid and on a persistent one (M, N ragged in the second)."""
    cfg = dict(SMALL_TILES, group_m=group) | (dict(persistent=True, num_sms=3) if persistent else {})
    got, want = _product(m, n, k, dtype, m + n * k, **cfg)
    _assert_close(got, want, dtype)


def test_table_picks_split_k_for_skinny_and_persistence_for_short_k():
    assert pick_config(128, 8192, 8192, jnp.bfloat16, 132) == NARROW_K128  # 128 tiles of 64x128: one wave
    assert pick_config(128, 4096, 8192, jnp.bfloat16, 132) == replace(NARROW_K128, split_k=2)  # 64 of them: split K
    assert pick_config(64, 8192, 8192, jnp.bfloat16, 132) == NARROW_K128  # 64 too, but memory-bound: they keep up
    assert pick_config(64, 2048, 8192, jnp.bfloat16, 132).split_k > 1  # 16: under a third of the SMs
    assert pick_config(128, 2048, 8192, jnp.bfloat16, 132) == replace(NARROW_K128, split_k=4)  # 32 narrow tiles: split
    # 224 tiles of 64x128 would take two waves; 112 of 64x256 one, unsplit (no partials to sum)
    assert pick_config(128, 14336, 4096, jnp.bfloat16, 132) == NARROW_WIDE
    assert pick_config(128, 6144, 4096, jnp.bfloat16, 132) == NARROW_K128  # 96 of 64x128: no split, no partials
    # up to 56 tokens the swapped product where its blocks make a wave (64 and 96 here), else the estimate's pick
    assert pick_config(16, 4096, 4096, jnp.bfloat16, 132) == swapped_config(16)
    assert pick_config(5, 6144, 4096, jnp.bfloat16, 132) == swapped_config(5)
    assert pick_config(32, 4096, 14336, jnp.bfloat16, 132) == swapped_config(32)
    assert pick_config(16, 14336, 4096, jnp.bfloat16, 132) == NARROW_K128  # 224 swapped blocks: two waves
    assert pick_config(56, 4096, 4096, jnp.bfloat16, 132) == swapped_config(56)
    assert not pick_config(57, 4096, 4096, jnp.bfloat16, 132).swap  # above 56 tokens: level with NARROW_K128 at 64
    # FP8: as far (FP8_SWAP_PICK_M), where the swapped blocks make at most a wave
    assert fp8_pick(56, 4096, 4096).swap and not fp8_pick(57, 4096, 4096).swap
    assert fp8_pick(56, 4096, 4096).block_m == 56 and not fp8_pick(32, 14336, 4096).swap
    # larger M keeps the older rule: 128 narrow tiles (4 rows of 32), one wave
    assert pick_config(512, 2048, 8192, jnp.bfloat16, 132) == NARROW_K128
    # 64 tiles of 128x256 (too few), 256 of 64x128 (two waves): 128 of 128x128 make one wave, unsplit
    assert pick_config(512, 4096, 4096, jnp.bfloat16, 132) == MID
    assert pick_config(384, 4096, 4096, jnp.bfloat16, 132) == MID  # 96: more than half a wave
    assert pick_config(768, 4096, 4096, jnp.bfloat16, 132) == DEFAULT  # 96 of 128x256: enough of the wide tiles
    assert pick_config(16384, 8192, 1024, jnp.bfloat16, 132).persistent
    wide = pick_config(8192, 8192, 8192, jnp.bfloat16, 132)
    assert wide.block_m == 256 and wide.persistent  # the widest tiles when they fill waves, one block per SM
    # 256x192 would leave a third of a wave idle; 512 tiles of 128x256 are ~4 waves: the persistent grid
    assert pick_config(4096, 4096, 4096, jnp.bfloat16, 132) == DEFAULT_PERSISTENT
    assert pick_config(64, 64, 64, jnp.float32, 132) == DEFAULT  # only fp16/bf16 take the table
    # one wave of 128x256 tiles (128 at 2048^3): plain 128x256 (two 128x128 blocks per SM measured slower)
    assert pick_config(2048, 2048, 2048, jnp.bfloat16, 132) == DEFAULT
    assert pick_config(2048, 4096, 2048, jnp.bfloat16, 132) == DEFAULT_PERSISTENT  # 256 tiles: two waves already
    # gemm() with no tile arguments takes the pick; explicit arguments win
    assert isinstance(gemm_example.gemm(128, 2048, 8192, jnp.dtype(jnp.bfloat16), num_sms=132), gemm_example.SplitK)
    assert not isinstance(gemm_example.gemm(128, 2048, 8192, jnp.dtype(jnp.bfloat16), num_sms=132, split_k=1),
                          gemm_example.SplitK)
    explicit = gemm_example.gemm(128, 8192, 8192, jnp.dtype(jnp.bfloat16), block_m=128, block_n=256, block_k=64)
    assert not isinstance(explicit, gemm_example.SplitK)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_two_blocks_per_sm_matches_dot_at_a_ragged_shape(dtype):
    """blocks_per_sm only shapes the GPU build; the kernel the interpreter runs is the same."""
    kern = gemm_example.gemm(130, 70, 96, jnp.dtype(dtype), blocks_per_sm=2, **SMALL_TILES)
    assert kern.trace(jax.ShapeDtypeStruct((130, 96), dtype), jax.ShapeDtypeStruct((96, 70), dtype)).blocks_per_sm == 2
    got, want = _product(130, 70, 96, dtype, 17, blocks_per_sm=2, **SMALL_TILES)
    _assert_close(got, want, dtype)


@pytest.mark.parametrize("m,n,k", [
    (2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192), (8192, 28672, 8192), (16384, 8192, 1024),
    (128, 8192, 8192), (64, 8192, 8192), (256, 4096, 8192), (128, 4096, 8192), (32, 8192, 8192),
    (1000, 3000, 777), (4000, 5000, 300), (96, 8192, 4096), (520, 1000, 4096), (512, 4096, 4096), (384, 4096, 4096),
    (16, 4096, 4096), (1, 6144, 4096), (16, 4096, 14336),  # the swapped product
])
def test_every_table_pick_takes_the_hopper_plan_as_asked(m, n, k):
    """Whatever the table picks for a bf16 product on an H100/H200 (132 SMs), the Hopper plan takes as it is:
    no loop off wgmma, no ring shortened, no ping-pong refused (the notes a PerformanceWarning would carry)."""
    kern = gemm_example.gemm(m, n, k, jnp.dtype(jnp.bfloat16), num_sms=132)
    mod = generate_cuda(kern.trace(jax.ShapeDtypeStruct((m, k), jnp.bfloat16),
                                   jax.ShapeDtypeStruct((k, n), jnp.bfloat16)), "sm_90")
    assert mod.arch == "sm_90a" and mod.notes == (), (pick_config(m, n, k, jnp.bfloat16, 132).describe(), mod.notes)


def test_skinny_estimate_weighs_waves_bytes_and_partials():
    """skinny_seconds (codegen/gemm_table.py): a second wave costs a second block time; a product bound by its
    operands' bytes takes their time however its blocks run; a split adds its partials' bytes and the sum's kernel."""
    sms = 132
    one_wave = skinny_seconds(128, 14336, 4096, NARROW_WIDE, 1, sms)  # 112 blocks
    two_waves = skinny_seconds(128, 14336, 4096, NARROW, 1, sms)  # 224 blocks
    assert two_waves > one_wave
    operands = 2 * (128 * 4096 + 4096 * 14336 + 128 * 14336) / 3.5e12
    assert one_wave == pytest.approx(operands)  # the bytes, not the products, bound it
    unsplit = skinny_seconds(128, 4096, 4096, NARROW, 1, sms)  # 64 blocks of 64 k-steps
    split = skinny_seconds(128, 4096, 4096, NARROW, 2, sms)  # 128 blocks of 32, plus the sum
    assert split < unsplit
    assert skinny_seconds(128, 4096, 4096, DEFAULT, 8, sms) > split  # eight partials of each element cost more


# ---- the swapped product: C^T = B^T A^T, a decoder's few tokens on the tensor cores' narrow side ----


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
@pytest.mark.parametrize("m,n,k,cfg", [
    (16, 200, 300, {}),  # swapped_config(16): 16x64x128, N ragged, K ragged
    (5, 130, 512, dict(split_k=2)),  # 5 tokens in an 8-row tile, split in two (partials summed by XLA)
    (40, 70, 33, dict(block_m=24, block_n=64, block_k=16, num_stages=2, threads=128)),  # two token tiles, ragged
    # persistent: 3 blocks walk 2 x 4 tiles of 24 rows x 64 columns, the last wave short, every edge ragged
    (40, 200, 70, dict(block_m=24, block_n=64, block_k=32, num_stages=2, threads=128, persistent=True, num_sms=3)),
])
def test_swapped_product_matches_dot_at_ragged_shapes(dtype, m, n, k, cfg):
    """Each block's tile computed transposed and stored back the right way round, the part inside C only."""
    kern = gemm_example.gemm(m, n, k, jnp.dtype(dtype), swap=True, **cfg)
    ir = kern.trace(jax.ShapeDtypeStruct((m, k), dtype), jax.ShapeDtypeStruct((k, n), dtype))
    (g,) = [s for s in walk_stmts(ir.body) if isinstance(s, Gemm)]  # the accumulator is C's tile transposed
    assert g.transpose_a and g.transpose_b and g.c.buffer.shape == (64, cfg.get("block_m", swapped_config(m).block_m))
    got, want = _product(m, n, k, dtype, m * 7 + n + k, swap=True, **cfg)
    _assert_close(got, want, dtype)


def test_swapped_config_rounds_the_tokens_to_wgmma_n_and_sizes_its_stages():
    assert swapped_config(1) == replace(SWAPPED, block_m=8, num_stages=10)
    assert swapped_config(16) == SWAPPED
    assert swapped_config(17).block_m == 24 and swapped_config(SWAP_MAX_M).block_m == SWAP_MAX_M
    for m in (1, 16, 33, SWAP_MAX_M):  # about the same bytes in flight whatever the tokens
        cfg = swapped_config(m)
        stage = (cfg.block_m + cfg.block_n) * cfg.block_k * 2
        assert 150 * 1024 <= stage * cfg.num_stages <= 192 * 1024, (m, cfg.describe())
    with pytest.raises(ValueError, match="at most 64"):
        swapped_config(SWAP_MAX_M + 1)


@pytest.mark.parametrize("kw,match", [
    (dict(blocks_per_sm=2), "take it without blocks_per_sm"),
    (dict(persistent=True, split_k=2), "with split_k computes one tile a block"),
    (dict(split_k=2, split_reduce="kernel"), "take split_reduce='xla'"),
    (dict(split_k=2, split_reduce="cluster"), "take split_reduce='xla'"),
    (dict(block_m=16, block_n=96, threads=128), "block_n=96 is not a multiple of 64: take threads=128"),
    (dict(block_m=16, block_n=64, threads=256), "2 consumer warpgroup.* not a multiple of 128"),
    (dict(block_m=20, block_n=64, threads=128), "take block_m a multiple of 8 up to 256, not 20"),
])
def test_swapped_forms_it_does_not_take_are_refused(kw, match):
    with pytest.raises(ValueError, match=match):
        gemm_example.gemm(16, 256, 512, jnp.dtype(jnp.bfloat16), swap=True, **kw)


def test_swap_without_tiles_for_many_rows_says_to_give_them():
    with pytest.raises(ValueError, match="take block_m"):
        gemm_example.gemm(SWAP_MAX_M + 1, 256, 512, jnp.dtype(jnp.bfloat16), swap=True)
    kern = gemm_example.gemm(128, 256, 512, jnp.dtype(jnp.bfloat16), swap=True, block_m=128, block_n=64,
                             block_k=64, threads=128)  # explicit tiles: any M
    mod = generate_cuda(kern.trace(jax.ShapeDtypeStruct((128, 512), jnp.bfloat16),
                                   jax.ShapeDtypeStruct((512, 256), jnp.bfloat16)), "sm_90")
    assert mod.arch == "sm_90a" and not mod.notes, mod.notes
