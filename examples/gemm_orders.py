"""The tile orders of examples/gemm.py's grids: which output tile the pid-th tile of a grid is, and the rules for
combining them (`check_order`). A persistent grid's tile t is its (t % blocks)-th block's (t // blocks)-th, and all
blocks walk together, so the order decides which tiles of A and B a wave of blocks wants from L2 at once and how
often each is read from HBM (tools/l2_order_model.py counts it; benchmarks/NOTES.md has what each order measured).

Every function takes `pid` as an int (tests, the L2 model) or as a kernel's index expression: the arithmetic is the
same, divisions only by constants (a division by a runtime value cost a ping-pong producer its register share:
benchmarks/NOTES.md, forty-second session).
"""

from __future__ import annotations

from jax_tilescale import language as T
from jax_tilescale.codegen.gemm_table import GemmConfig


def check_order(cfg: GemmConfig) -> None:
    """Refuses the order switches a configuration cannot combine, saying what to take instead."""
    if cfg.group_columns and (not cfg.persistent or cfg.split_k > 1):
        raise ValueError(f"group_columns orders the tiles of a persistent grid (unsplit), not {cfg.describe()}: take "
                         f"persistent=True without split_k")
    if cfg.pair_rows and (not cfg.group_columns or cfg.edge_last):
        raise ValueError(f"pair_rows walks the rows of group_columns' order two at a time, every column in its pairs, "
                         f"not {cfg.describe()}'s: take group_columns=True with it, without edge_last")
    if (cfg.band_columns or cfg.band_rows) and (cfg.band_columns <= 0 or cfg.band_rows <= 0 or not cfg.group_columns
                                                or cfg.pair_rows or cfg.edge_last or cfg.serpentine):
        raise ValueError(f"band_columns and band_rows (both positive) order group_columns' tiles in bands, without "
                         f"pair_rows, edge_last or serpentine, not {cfg.describe()}")
    if cfg.serpentine and (not cfg.persistent or cfg.split_k > 1):
        raise ValueError(f"serpentine orders the tiles of a persistent grid (unsplit), not {cfg.describe()}: take "
                         f"persistent=True without split_k")
    if cfg.queue_tail < 0 or (cfg.queue_tail and not cfg.tile_queue):
        raise ValueError(f"queue_tail (waves at the launch's end drawn from the tile queue, the rounds before dealt "
                         f"statically) takes tile_queue=True and a count >= 0, not {cfg.describe()}")
    if cfg.tile_queue and (not cfg.persistent or cfg.split_k > 1):
        raise ValueError(f"tile_queue deals the tiles of a persistent grid (unsplit) to its blocks, not "
                         f"{cfg.describe()}: take persistent=True without split_k")
    if cfg.edge_last and (not cfg.persistent or cfg.swap or cfg.split_k > 1):
        raise ValueError(f"edge_last orders the tiles of a persistent grid (unswapped, unsplit), not "
                         f"{cfg.describe()}: take persistent=True without swap and split_k")


def grouped_tile(pid, tiles_m: int, tiles_n: int, group: int, serpentine: bool = False):
    """(tile row, tile column) of the pid-th tile in grouped order: `group` rows of tiles walk the
    columns together, so that the blocks running at one time share tiles of B (and A) in L2. Where `group` does not
    divide tiles_m, the last group has the rows left (tiles_m % group of them). `serpentine`: the odd-numbered groups
    walk the columns from the last to the first, so that each group starts on the columns its predecessor ended on
    (still in L2). `pid` an int or an index expression."""
    width = group * tiles_n
    first, in_group = pid // width * group, pid % width
    if tiles_m % group == 0:  # kept apart: the code every measured pick runs (no clamps; see below)
        row, col = first + in_group % group, in_group // group
        return row, (_backwards(pid // width, col, tiles_n) if serpentine else col)
    # The last group has tiles_m % group rows. Each division is by one of two constants, chosen by the group: a
    # division by the group's row count as a runtime value (64-bit) took more registers than a ping-pong producer's
    # setmaxnreg share wherever group was not a power of two, and ptxas then dropped the split and spilled the
    # accumulators (C7507, 2.3 KB: benchmarks/NOTES.md, forty-second session). The clamps change nothing for
    # pid < tiles_m * tiles_n; they let interval arithmetic (ir/ranges.py value_bounds) see that both results stay
    # inside, so copies at divisible shapes stay unclipped.
    last = tiles_m % group
    in_last = first >= tiles_m - last
    row = _select(in_last, in_group % last, in_group % group)
    col = _min(_select(in_last, in_group // last, in_group // group), tiles_n - 1)
    return _min(first + row, tiles_m - 1), (_backwards(pid // width, col, tiles_n) if serpentine else col)


def _backwards(group_index, col, tiles_n: int):
    """grouped_tile's column in a serpentine order: reversed in the odd-numbered groups."""
    return _select(group_index % 2 == 1, tiles_n - 1 - col, col)


def edge_last_tile(pid, tiles_m: int, tiles_n: int, group: int, columns: bool = False, serpentine: bool = False):
    """(tile row, tile column) of the pid-th tile where the last column of tiles (N not a multiple of block_n: its
    tiles narrow) comes after all the others: the first tiles_m * (tiles_n - 1) in grouped order over the full
    columns (`columns`: the order turned round, `group` columns walking the rows; `serpentine`: grouped_tile's),
    then the last column top to bottom. So the last wave of a persistent grid takes narrow tiles, which the Hopper
    lowering computes with narrower products (jax_tilescale/codegen/gemm_sm90_edge.py). (In column groups without
    it, the edge column's tiles are every group-th tile of the last group, and with a block count that the group
    divides, as 132 blocks and a last group of 3 at 16384 x 8192 x 1024, the same third of the blocks takes all of
    them.)"""
    if tiles_n == 1:
        return grouped_tile(pid, tiles_m, tiles_n, group, serpentine)
    body = tiles_m * (tiles_n - 1)
    if columns:
        tn, tm = grouped_tile(pid, tiles_n - 1, tiles_m, min(group, tiles_n - 1), serpentine)
    else:
        tm, tn = grouped_tile(pid, tiles_m, tiles_n - 1, group, serpentine)
    # clamps, as in grouped_tile: both results provably inside for the interval arithmetic
    inside = pid < body
    return _select(inside, tm, _min(_max(pid - body, 0), tiles_m - 1)), _select(inside, tn, tiles_n - 1)


def _select(cond, a, b):
    return (a if cond else b) if isinstance(cond, bool) else T.if_then_else(cond, a, b)


def _min(a, b):
    return min(a, b) if isinstance(a, int) and isinstance(b, int) else T.min(a, b)


def _max(a, b):
    return max(a, b) if isinstance(a, int) and isinstance(b, int) else T.max(a, b)


def group_rows(tiles_m: int, group_m: int) -> int:
    """Rows of tiles a group of grouped_tile's order takes: group_m, or all of them where there are fewer. (Before
    the thirty-sixth session 1 wherever group_m did not divide tiles_m: rows of tiles one after another, every block
    of a wave reading its own columns of B, e.g. 3000 x 28672 x 8192's 12 rows of 256x192 tiles read B 12 times.)"""
    return min(group_m, tiles_m)


def group_of(tiles_m: int, cfg: GemmConfig) -> int:
    return group_rows(tiles_m, cfg.group_m)


def persistent_grid(m: int, n: int, cfg: GemmConfig, num_sms: int) -> tuple[int, int, int, int, int]:
    """(tile rows, tile columns, tiles, blocks, group) of a persistent grid: as many blocks as the SMs hold at once
    (at most one per tile), the tiles walked in grouped order (`group`: the rows, or with cfg.group_columns the
    columns, of tiles a group takes)."""
    tiles_m, tiles_n = T.ceildiv(m, cfg.block_m), T.ceildiv(n, cfg.block_n)
    tiles = tiles_m * tiles_n
    group = group_rows(tiles_n, cfg.group_m) if cfg.group_columns else group_of(tiles_m, cfg)
    return tiles_m, tiles_n, tiles, min(num_sms * cfg.blocks_per_sm, tiles), group


def persistent_tile(pid, tiles_m: int, tiles_n: int, group: int, cfg: GemmConfig, edge: bool = False):
    """(tile row, tile column) of a persistent grid's pid-th tile: grouped_tile's order, or with cfg.group_columns
    the same order turned round (`group` columns of tiles walk the rows together: each of B's tiles is shared by
    more of a wave's blocks, each of A's by fewer; with cfg.pair_rows too, its rows two at a time: row_paired_tile),
    or with cfg.edge_last where `edge` (N not a multiple of block_n) edge_last_tile's (in either order); with
    cfg.serpentine every other group walked the other way."""
    if cfg.group_columns:
        if cfg.band_columns:
            return banded_tile(pid, tiles_m, tiles_n, group, cfg.band_columns, cfg.band_rows)
        if cfg.pair_rows and tiles_m > 1:
            return row_paired_tile(pid, tiles_m, tiles_n, group, cfg.serpentine)
        if cfg.edge_last and edge:
            return edge_last_tile(pid, tiles_m, tiles_n, group, columns=True, serpentine=cfg.serpentine)
        tn, tm = grouped_tile(pid, tiles_n, tiles_m, group, cfg.serpentine)
        return tm, tn
    if cfg.edge_last and edge:
        return edge_last_tile(pid, tiles_m, tiles_n, group, serpentine=cfg.serpentine)
    return grouped_tile(pid, tiles_m, tiles_n, group, cfg.serpentine)


def banded_tile(pid, tiles_m: int, tiles_n: int, group: int, band_columns: int, band_rows: int):
    """(tile row, tile column) of the pid-th tile with the tile columns in super-groups of `band_columns` (the last
    takes the columns left), each super-group walked in bands of `band_rows` tile rows (the last takes the rows left),
    each band's columns in groups of `group` walking the band's rows (grouped_tile turned round, as group_columns).
    A's tile rows are read by every column of a super-group within a band's time, so they stay in L2 between their
    readers, while about `group` blocks want one of them at a time. Every division is by a constant: the cases of a
    partial super-group and band are each computed and one is selected (grouped_tile's reason)."""
    width = band_columns * tiles_m
    c0, local = pid // width * band_columns, pid % width
    widths = [band_columns] + ([tiles_n % band_columns] if tiles_n % band_columns else [])
    heights = [band_rows] + ([tiles_m % band_rows] if tiles_m % band_rows else [])
    by_width = []
    for w in widths:
        r0, inner = local // (band_rows * w) * band_rows, local % (band_rows * w)
        cases = [(r0 + tm, c0 + tn) for tn, tm in (grouped_tile(inner, w, h, min(group, w)) for h in heights)]
        by_width.append(_last_or(r0 >= tiles_m - heights[-1], cases))
    row, col = _last_or(c0 >= tiles_n - widths[-1], by_width)
    # clamps, as in grouped_tile: both results provably inside for the interval arithmetic
    return _min(row, tiles_m - 1), _min(col, tiles_n - 1)


def _last_or(in_last, cases: list[tuple]):
    """The one (row, column) of `cases`, or of two (a whole group's, then a partial last one's) the last's where
    `in_last` holds."""
    if len(cases) == 1:
        return cases[0]
    whole, last = cases
    return tuple(_select(in_last, b, a) for a, b in zip(whole, last))


def row_paired_tile(pid, tiles_m: int, tiles_n: int, group: int, serpentine: bool = False):
    """(tile row, tile column) of the pid-th tile in column groups that walk the rows two at a time: pids 2q and
    2q + 1 take tiles (2r, c) and (2r + 1, c), where (c, r) is the q-th tile of the column-grouped order over
    tiles_m // 2 rows of pairs. So the blocks of a pair, which take pids 2q and 2q + 1 at every wave of a grid with
    an even block count, share B's tile. With tiles_m odd the last row comes after all the pairs, left to right."""
    half = tiles_m // 2
    tn, pair = grouped_tile(pid // 2, tiles_n, half, group, serpentine)
    if tiles_m % 2 == 0:
        return 2 * pair + pid % 2, tn
    # the last row's tiles (clamped as in grouped_tile: both results provably inside for the interval arithmetic)
    paired = 2 * half * tiles_n
    in_pairs = pid < paired
    return (_select(in_pairs, _min(2 * pair + pid % 2, tiles_m - 1), tiles_m - 1),
            _select(in_pairs, tn, _min(_max(pid - paired, 0), tiles_n - 1)))
