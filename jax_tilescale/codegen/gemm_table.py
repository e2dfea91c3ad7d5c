"""Which tile configuration a GEMM of a given problem takes when its caller names none
(`examples/gemm.py`'s `gemm()` with no tile arguments): a small heuristic keyed by
(M, N, K, element type, SM count), counted in benchmarks/NOTES.md ("Issue 16, item 3").

The three levers, and when each pays:
- the tile shape: 256x192 reads the fewest L2 bytes per FLOP (fastest at 8192-sized shapes
  under the power cap) but needs 192 accumulators per thread, so only fp16/bf16 on the Hopper
  plan take it, on a persistent grid whose epilogue borrows the ring's last stages; 128x256 is the
  portable default;
- skinny products (M up to SKINNY_M, too few 128x256 tiles for half the SMs: a decoder's tokens times a weight) are
  bound by the weight's bytes from HBM. There the pick is the fastest by an estimate (`skinny_seconds`) among
  NARROW_K128 (NARROW's tiles with k-steps of 128 and 4 stages: 1.07x XLA at 128 x 8192 x 8192 where NARROW ran
  0.97x, thirty-second session; it wins the estimate's ties with NARROW), NARROW (64x128 tiles, one consumer
  warpgroup, 8 stages, the two blocks of a tile column next to each other: group_m 2, B's column read once from HBM
  for both, in rows of 256 bytes), NARROW_WIDE (64x256, 5 stages) and
  the default tiles, each unsplit or split along K: each wave of blocks takes the longer of a block's products
  (BLOCK_S_PER_K, measured per tile shape) and its share of the operands' bytes at HBM_BYTES_PER_S, and a split
  adds its float32 partials' bytes (written, then read by XLA's sum) and the sum's own kernel. Measured on the
  H200 (benchmarks/NOTES.md, twenty-seventh session, loop / graph x XLA, with the sums timed whole): 128 x 14336 x
  4096 NARROW_WIDE 1.01 / 0.95 where the old pick (split-K 2 of 128x256) gave 0.79 / 0.76; 128 x 4096 x 14336
  NARROW split 2 0.95 / 0.94 (split-K 8 of 128x256: 0.86 / 0.79); 128 x 4096 x 4096 NARROW split 2 0.98 / 0.97
  (0.63 / 0.62); 128 x 6144 x 4096 NARROW unsplit 1.14 / 1.17; 128 x 8192 x 8192 NARROW unsplit, level with XLA's
  kernel in a trace (2026-12-03);
- narrow tiles for larger M: a problem with fewer 128x256 tiles than half the SMs whose 64x128 tiles make about
  one wave takes NARROW_K128, and below half a wave (down to a third) where the product is memory-bound
  (`narrow_keeps_up`: a block's 64 x 128 x K product takes as long as it takes, NARROW_BLOCK_S_PER_K, the slower
  NARROW's figure: the rule predates NARROW_K128). At 512 x 2048 x 8192 NARROW_K128 ran 1.01 / 0.92 x XLA where
  NARROW ran 0.83 / 0.77 (thirty-second session);
- square tiles for the middle: a problem with too few 128x256 tiles, too many 64x128 ones for one wave, whose
  128x128 tiles make between half a wave and one takes MID (128x128 tiles, k-steps of 128, 3 stages, one consumer
  warpgroup) unsplit: 512 x 4096 x 4096 1.04 / 0.99 x XLA, 384 x 4096 x 4096 0.88 / 0.88 and 512 x 4096 x 14336
  0.96 / 0.94, where split-K 2 of 128x256 ran 0.85 / 0.88, 0.82 / 0.79 and 0.91 / 0.89 (thirty-second session; at
  768 x 4096 x 4096, two waves of them, 0.81 / 0.77 against the 128x256 tiles' 0.89 / 0.85);
- split-K: a problem with too few tiles even then splits K over `split_k` blocks per tile, whose
  float32 partials are summed in split order (deterministic; by XLA afterwards, which measured faster
  than the tile's last split summing them inside the kernel);
- a persistent grid (one block per SM walking the tiles in grouped order): the producer loads
  the next tile's stages while the consumers store the last one, which matters when a tile's
  epilogue is a large part of its time (short K, many waves). There the two consumer warpgroups take
  alternate 128x192 tiles (`pingpong`), each storing its tile while the other's main loop runs, with
  4 stages (the staging boxes go out in rounds to leave room for the fourth): 0.96x XLA at
  16384 x 8192 x 1024 against 0.94x for 128x256 tiles shared by both (benchmarks/NOTES.md, 2026-12-02);
  up to K = 1024 in groups of tile columns walking the rows (`group_columns`, `PERSISTENT_COLUMNS`), and where
  there are at least three super-groups of 16 tile columns and more than 16 tile rows those groups in bands
  (`PERSISTENT_BANDED`);
  With longer K and more than one wave of 128x256 tiles (4096^3) the same grid without ping-pong
  (`DEFAULT_PERSISTENT`): the epilogue still stops the tensor cores, but the next tile's operands are
  already loading and no block has to start;
- two blocks per SM (`blocks_per_sm=2`, 128x128 tiles, one consumer warpgroup, 3 stages: half the
  registers and shared memory of an SM each, `PAIRED`): no longer picked. It was the pick where the
  128x256 tiles make one wave or less (2048^3), from runs of 20 products per timing; with timed runs of
  20 ms it measured 0.91x XLA there against 0.98x for plain 128x256 tiles (benchmarks/NOTES.md).

Explicit arguments to `gemm()` always win over the table. `gemm(..., autotune=True)` times the table's pick against
the other configurations `tune_candidates` names for the problem instead (jax_tilescale/tune), once per problem and
GPU, and keeps the fastest on disk.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

HOPPER_SMS = 132  # an H100 SXM / H200: the SM count assumed when no GPU says otherwise


@dataclass(frozen=True)
class GemmConfig:
    """One tile configuration of examples/gemm.py's kernel."""

    block_m: int = 128
    block_n: int = 256
    block_k: int = 64
    num_stages: int = 4
    threads: int = 256
    group_m: int = 8
    split_k: int = 1  # blocks per output tile along K (float32 partials summed in split order)
    persistent: bool = False  # grid = SM count, each block walks tiles in grouped order
    blocks_per_sm: int = 1  # blocks one SM runs at once (ts.kernel's blocks_per_sm)
    pingpong: bool = False  # persistent: the consumer warpgroups take alternate tiles (ts.kernel's pingpong)
    # each block computes its tile transposed, C^T = B^T A^T: block_n (B's columns) on the tensor cores' 64-row side
    # and block_m (A's rows, a decoder's few tokens) on their narrow side (wgmma's n8-n256), not on 64 mostly empty rows
    swap: bool = False
    # persistent: the last column of tiles, where N is not a multiple of block_n, walked after all the others, so
    # that the last wave's tiles are its narrow ones (with gemm_sm90_edge.EDGE_LOOP they take narrower products)
    edge_last: bool = False
    # persistent: the grouped order turned round, groups of `group_m` tile columns walking the rows (a wave's blocks
    # share each of B's tiles among more blocks and each of A's among fewer); 1-4% faster for the ping-pong pick at
    # 16384 x 8192 x 1024, 3% slower at K = 4096 (benchmarks/NOTES.md, forty-second session)
    group_columns: bool = False
    # group_columns: the column groups walk the rows two at a time, tiles (2r, c) and (2r + 1, c) one after the
    # other, so that the blocks of a pair (2b, 2b + 1) take one tile column at every wave and can share B's tile
    # (gemm_sm90.MULTICAST), as XLA's kernel at 16384 x 8192 x 1024 does (12% fewer L2 sectors than ours). Measured
    # there: level with the pick with multicast, 1-2% behind without; not in the table (benchmarks/NOTES.md,
    # forty-third session)
    pair_rows: bool = False
    # persistent: every other group of the grouped order (rows or columns) walks its tiles the other way, so that a
    # group starts on the operand tiles its predecessor ended on, which are still in L2 (examples/gemm.py
    # grouped_tile); tools/l2_order_model.py counts 218 -> 157-194 MB of operands from HBM for the ping-pong pick at
    # 16384 x 8192 x 1024 (benchmarks/NOTES.md, forty-fifth session)
    serpentine: bool = False
    # group_columns in bands (both > 0): the tile columns in super-groups of `band_columns`, each walked in bands of
    # `band_rows` tile rows, each band's columns in groups of group_m walking the band's rows (examples/gemm.py
    # banded_tile): A's rows read for band_columns columns while they are in L2, but wanted by about group_m blocks at
    # a time (the plain column groups of 16 read A half as often and ran 1.23x the cycles: benchmarks/NOTES.md,
    # forty-fifth session)
    band_columns: int = 0
    band_rows: int = 0
    # persistent: the blocks take their tiles from a tile queue (T.tile_queue: each block draws its next tile from a
    # counter as it finishes the last) instead of block b taking tiles b, b + blocks, ...: a block on a slow SM takes
    # fewer (benchmarks/NOTES.md, forty-seventh session)
    tile_queue: bool = False
    # with tile_queue: only the launch's last `queue_tail` waves drawn from the queue, the rounds before dealt
    # statically (T.tile_queue's static_rounds): a slow SM held the static deal's launch 3-4% past its median SM
    # (benchmarks/NOTES.md, forty-ninth session); 0: every tile drawn
    queue_tail: int = 0

    def describe(self) -> str:
        """`128x256x64/4/g8` (+ `/t128`, `/s4`, `/p`, `/swap`, `/el`, `/gc`, `/pr`, `/sn`, `/tq`, `/qtN`): the form
        bench_gemm.py's --configs reads."""
        text = f"{self.block_m}x{self.block_n}x{self.block_k}/{self.num_stages}/g{self.group_m}"
        text += f"/t{self.threads}" if self.threads != 256 else ""
        text += f"/s{self.split_k}" if self.split_k > 1 else ""
        text += f"/b{self.blocks_per_sm}" if self.blocks_per_sm > 1 else ""
        text += "".join(f"/{suffix}" for suffix, flag in FLAG_SUFFIXES.items() if getattr(self, flag))
        text += f"/band{self.band_columns}x{self.band_rows}" if self.band_columns else ""
        return text + (f"/qt{self.queue_tail}" if self.queue_tail else "")


# GemmConfig's switches by the suffix `describe` writes for each, in its order (bench_gemm.py's --configs reads them)
FLAG_SUFFIXES = {"swap": "swap", "p": "persistent", "pp": "pingpong", "el": "edge_last", "gc": "group_columns",
                 "pr": "pair_rows", "sn": "serpentine", "tq": "tile_queue"}


DEFAULT = GemmConfig()
# DEFAULT's tiles on a persistent grid, for more than one wave of them: a block that stays on its SM starts the
# next tile's loads during the last one's epilogue, where a new block pays its start and fill (4096^3: 2,100
# cycles between loops on an SM against 3,782, and 0.96-0.99x XLA against 0.95-0.98x in the five runs that timed
# both: benchmarks/NOTES.md, twenty-third session)
DEFAULT_PERSISTENT = GemmConfig(persistent=True)
# fewest L2 bytes per FLOP (benchmarks/NOTES.md, issue 6), persistent: the epilogue staged through the loop's last
# two stages while the producer fills the other two (gemm_sm90.BORROW_RING; 1.01x XLA at 8192^3 against 0.99x for
# one block per tile, which pays ~5,400 cycles between blocks and a 1,800-cycle fill a tile: NOTES, 2026-12-04)
WIDE = GemmConfig(block_m=256, block_n=192, persistent=True)
# persistent: ping-pong consumers on 128x192 tiles (192 accumulators per thread, as WIDE's), 4 stages of
# 40 KiB and two staging boxes of 16 KiB per warpgroup
PERSISTENT = GemmConfig(block_n=192, num_stages=4, persistent=True, pingpong=True)
# the same in column groups, for K up to SHORT_K: 16384 x 8192 x 1024 0.97-0.99x XLA against 0.94-0.98x in row groups
# in four runs of one H100 (benchmarks/NOTES.md, forty-second session); at K = 4096 the row groups' order was 3% ahead
PERSISTENT_COLUMNS = replace(PERSISTENT, group_columns=True)
SHORT_K = 1024
# the column groups in bands of 16 tile columns x 16 tile rows (GemmConfig.band_columns): A's rows read from HBM
# half as often (16384 x 8192 x 1024 on an H100: 119.6 against 218.2 MB), each still wanted by about 8 blocks at a
# time; 1.4% fewer cycles there (ncu, 1.026 against 1.041x XLA's kernel) and 0-2% faster timed (two runs: loop /
# graph / calls 0.97 / 0.98 / 0.98 against 0.96 / 0.97 / 0.97, and 0.95 / 0.97 / 0.96 against 0.95 / 0.95 / 0.96);
# level at 8192 x 8192 x 1024 (benchmarks/NOTES.md, forty-fifth session). Where the columns make fewer than three
# super-groups (3072 x 3072 x 1024: one) A is read once a group of 8 at most three times and the bands are not taken.
# The bands' column groups are of 4, not 8 (each of A's rows wanted by about 4 blocks at a time): the same median
# cycles under ncu (1.022-1.029 against 1.021-1.026x XLA's) with fewer slow launches (0 of 30 against 20 of 48),
# timed in three calls at 16384 x 8192 x 1024 loop / graph / calls 0.99 / 0.99 / 0.99, 0.98 / 0.98 / 0.98 and
# 0.99 / 1.00 / 0.98 against groups of 8's 0.99 / 0.98 / 0.98, 0.97 / 0.96 / 0.98 and 0.98 / 0.97 / 0.99; level at
# 8192 x 8192 x 1024 (1.02 / 0.99 / 1.01 against 1.02 / 0.99 / 1.00) (benchmarks/NOTES.md, forty-sixth and
# forty-eighth sessions)
PERSISTENT_BANDED = replace(PERSISTENT_COLUMNS, group_m=4, band_columns=16, band_rows=16)
# two per SM: 128x128 tiles, one consumer warpgroup (128 accumulators per thread in a 216-register
# share), 3 stages of 32 KiB (2 x ~98 KiB per SM; 4 stages would not fit twice)
PAIRED = GemmConfig(block_m=128, block_n=128, num_stages=3, threads=128, blocks_per_sm=2)
# skinny: 64x128 tiles, one consumer warpgroup (m64n128), 8 stages of 24 KiB, a tile column's two blocks
# adjacent (they share B's column)
NARROW = GemmConfig(block_m=64, block_n=128, num_stages=8, threads=128, group_m=2)
# NARROW with k-steps of 128: 4 stages of 48 KiB (the same bytes in flight as NARROW's 8 of 24), half the barrier
# rounds and wgmma waits per byte. Measured against NARROW in the same runs (benchmarks/NOTES.md, thirty-second
# session, loop / graph x XLA): 128 x 8192 x 8192 1.07 / 1.05 against 0.97 / 0.97; 128 x 6144 x 4096 1.14 / 1.11
# against 1.10 / 1.03; split in two at 128 x 4096 x 14336 0.98 / 0.93 against 0.95 / 0.91
NARROW_K128 = GemmConfig(block_m=64, block_n=128, block_k=128, num_stages=4, threads=128, group_m=2)
# the middle (module doc): 128x128 tiles with k-steps of 128, 3 stages of 64 KiB, one consumer warpgroup (two m64n128
# products a k-step, 128 accumulators a thread), a tile column's two blocks adjacent
MID = GemmConfig(block_m=128, block_n=128, block_k=128, num_stages=3, threads=128, group_m=2)
# skinny too, a tile column twice as wide: 64x256 tiles, one consumer warpgroup (m64n256), 5 stages of 40 KiB
NARROW_WIDE = GemmConfig(block_m=64, block_n=256, num_stages=5, threads=128, group_m=2)
# the swapped product (GemmConfig.swap) for a decoder's few tokens: 64 of B's columns a block on wgmma's m64, the tokens
# (block_m, a multiple of 8 up to SWAP_MAX_M) on its n, k-steps of 128, one consumer warpgroup; its stages are
# sized by `swapped_config` to about SWAP_BYTES_IN_FLIGHT. The table picks it up to SWAP_PICK_M rows of A where its
# blocks make one wave or less (skinny_pick): H100, thirty-third session, loop / graph x XLA against NARROW_K128's
# pick: 16 x 4096 x 4096 0.77 / 0.76 against 0.60 / 0.50 (split in two), 16 x 6144 x 4096 0.94 / 0.93 against
# 0.90 / 0.86, 16 x 4096 x 14336 0.96 / 0.95 against 0.95 / 0.93 (split); at 16 x 14336 x 4096 (224 blocks, two
# waves) 0.96 / 0.95 against unsplit NARROW_K128's 1.00 / 0.98, which stays. Thirty-fourth session (H100, same
# form): 32 x 4096 x 4096 swapped 0.79 / 0.78 against the pick then (NARROW_K128 split in two) 0.65 / 0.57; at 64 rows
# level (64 x 4096 x 4096 1.09 / 1.19 against 1.00-1.16 / 1.23-1.27), so NARROW_K128 keeps those; 32 x 14336 x 4096
# (two waves) 0.99 / 0.98 against NARROW_K128's 1.05 / 1.04. Thirty-fifth session (H100, same form, 5 rounds): 48 x
# 4096 x 4096 swapped 1.08 / 1.05 against the pick then (NARROW_K128 split in two) 0.84 / 0.93 and unsplit 1.01 /
# 0.99; 56 x 4096 x 4096 0.95 / 1.05 against 0.77 / 0.96 and 0.91 / 1.01: so up to 56 rows (SWAP_PICK_M), and 64
# rows stay NARROW_K128's. Above SWAP_PICK_M rows: gemm(swap=True) and autotune's candidates. FP8 the same
# (FP8_SWAP_PICK_M, 16 until the thirty-sixth session): H100, 5 rounds, x torch._scaled_mm loop / graph with each
# product's operands from HBM (bench_gemm --cold, as a decoder reads its weights), swapped against FP8_NARROW:
# 32 x 4096 x 4096 1.11 / 1.32 against 1.13 / 1.08; 48 x 4096 x 4096 1.01 / 1.18 against 1.00 / 1.03; 64 x 4096 x
# 4096 1.04 / 1.43 against 1.10 / 1.26 (the loop column, L2-warm, level within its rounds' wide spread)
SWAPPED = GemmConfig(block_m=16, block_n=64, block_k=128, num_stages=9, threads=128, group_m=1, swap=True)
SWAP_MAX_M = 64
SWAP_PICK_M = 56
FP8_SWAP_PICK_M = SWAP_PICK_M
SWAP_BYTES_IN_FLIGHT = 192 * 1024
SWAP_MAX_STAGES = 10
# one NARROW block's time per element of K (~36 us at K = 8192, 128 x 4096 x 8192 at the power cap) and the HBM
# read rate skinny products reach (XLA's and ours, ~3.3-3.5 TB/s at 128 x 8192 x 8192): benchmarks/NOTES.md
NARROW_BLOCK_S_PER_K = 36e-6 / 8192
HBM_BYTES_PER_S = 3.5e12
# A block's time per element of K by tile shape (benchmarks/NOTES.md): NARROW_K128 ~30 us at K = 8192 (64 blocks
# unsplit: 31 us at 128 x 4096 x 8192, 52 us at 128 x 4096 x 14336); NARROW's above; NARROW_WIDE 46.2 us at
# K = 8192 (128 x 8192 x 8192, 64 blocks: one warpgroup of m64n256 short of the tensor rate); DEFAULT ~28 us at
# K = 2048 (2048^3, one wave). NARROW_K128 first: where the operands' bytes bound both 64x128 forms their estimates
# are equal, and the first wins (it measured faster at every such shape)
BLOCK_S_PER_K = {NARROW_K128: 30e-6 / 8192, NARROW: NARROW_BLOCK_S_PER_K, NARROW_WIDE: 46.2e-6 / 8192,
                 DEFAULT: 28e-6 / 2048}
SKINNY_M = 256  # up to this M, a product with few 128x256 tiles is picked by skinny_seconds
SPLIT_SUM_S = 2e-6  # XLA's sum of a split's partials: its own kernel's start and end, besides the bytes it moves
MIN_K_STEPS_PER_SPLIT = 8  # fewer k-steps per block and the pipeline's fill dominates
MAX_SPLIT_K = 8


def _ceildiv(a: int, b: int) -> int:
    return -(-a // b)


def tiles_of(m: int, n: int, cfg: GemmConfig) -> int:
    """Output tiles of an m x n product at `cfg`'s tile shape."""
    return _ceildiv(m, cfg.block_m) * _ceildiv(n, cfg.block_n)


def split_for(m: int, n: int, k: int, cfg: GemmConfig, sm_count: int) -> int:
    """K splits that bring the blocks of a product with too few output tiles closest to one full
    wave without a split under MIN_K_STEPS_PER_SPLIT k-steps; 1 when the tiles fill half the
    SMs already."""
    tiles = tiles_of(m, n, cfg)
    if 2 * tiles > sm_count:
        return 1
    k_steps = _ceildiv(k, cfg.block_k)
    best = 1
    for s in range(2, MAX_SPLIT_K + 1):
        if tiles * s > sm_count or k_steps < s * MIN_K_STEPS_PER_SPLIT:
            break
        if k_steps % s == 0:  # every split the same number of k-steps (examples/gemm.py's SplitK)
            best = s
    return best


def pick_config(m: int, n: int, k: int, dtype: np.dtype | str, sm_count: int = HOPPER_SMS) -> GemmConfig:
    """The configuration `gemm()` takes for an m x n x k product of `dtype` tiles on a GPU with
    `sm_count` SMs (module doc). Element types other than fp16/bf16 keep the default tiles."""
    dt = np.dtype(dtype)
    if dt.itemsize != 2 or dt.kind not in "fV":  # bf16 is kind 'V' to numpy
        return DEFAULT
    tiles = tiles_of(m, n, DEFAULT)
    if 2 * tiles <= sm_count:  # too few wide tiles
        if m <= SKINNY_M:
            return skinny_pick(m, n, k, sm_count)
        narrow = tiles_of(m, n, NARROW)
        if narrow <= sm_count and (2 * narrow >= sm_count or narrow_keeps_up(m, n, sm_count)):
            return NARROW_K128  # about one wave of narrow ones: no split, no partials
        if sm_count <= 2 * tiles_of(m, n, MID) <= 2 * sm_count:
            return MID  # half a wave to one of 128x128 tiles: no split, no partials
    split = split_for(m, n, k, DEFAULT, sm_count)
    if split > 1:
        return GemmConfig(split_k=split)
    if tiles > 2 * sm_count and k <= 2048:  # many waves of short tiles: overlap each epilogue
        if k > SHORT_K:
            return PERSISTENT
        banded = PERSISTENT_BANDED
        if _ceildiv(n, banded.block_n) > 2 * banded.band_columns and _ceildiv(m, banded.block_m) > banded.band_rows:
            return banded
        return PERSISTENT_COLUMNS
    if tiles_of(m, n, WIDE) >= 2 * sm_count and idle(m, n, WIDE, sm_count) <= idle(m, n, DEFAULT, sm_count) + 0.03:
        return WIDE  # large, and its last wave not much emptier: the fewest L2 bytes per FLOP
    if tiles > sm_count:
        return DEFAULT_PERSISTENT  # more than one wave: the blocks stay and walk the tiles
    return DEFAULT


def splits_of(k: int, cfg: GemmConfig) -> list[int]:
    """The splits of K a product may take at `cfg`'s block_k: 1, and every split up to MAX_SPLIT_K that divides the
    k-steps (examples/gemm.py's SplitK) and leaves each block at least MIN_K_STEPS_PER_SPLIT of them."""
    k_steps = _ceildiv(k, cfg.block_k)
    return [1] + [s for s in range(2, MAX_SPLIT_K + 1) if k_steps % s == 0 and k_steps >= s * MIN_K_STEPS_PER_SPLIT]


def skinny_seconds(m: int, n: int, k: int, cfg: GemmConfig, split: int, sm_count: int) -> float:
    """The estimated time of an m x n x k product at `cfg`'s tiles split `split` ways along K, where the operands'
    bytes bound it (module doc): each wave of blocks takes the longer of one block's products and the wave's share
    of the operands' bytes from HBM; a split adds its partials' bytes, written and read back, C's, and the sum's
    kernel."""
    blocks = tiles_of(m, n, cfg) * split
    block_s = _ceildiv(_ceildiv(k, cfg.block_k), split) * cfg.block_k * BLOCK_S_PER_K[cfg]
    operands_s = 2 * (m * k + k * n + m * n) / HBM_BYTES_PER_S
    seconds, left = 0.0, blocks
    while left > 0:
        wave = min(left, sm_count)
        seconds += max(block_s, operands_s * wave / blocks)
        left -= wave
    if split > 1:
        seconds += (2 * 4 * split + 2) * m * n / HBM_BYTES_PER_S + SPLIT_SUM_S
    return seconds


def skinny_options(k: int) -> list[tuple[GemmConfig, int]]:
    """(tile configuration, split along K) pairs skinny_pick weighs: each tile shape of BLOCK_S_PER_K, unsplit or
    split (splits_of), fewest splits first."""
    return [(cfg, s) for cfg in BLOCK_S_PER_K for s in splits_of(k, cfg)]


def skinny_pick(m: int, n: int, k: int, sm_count: int) -> GemmConfig:
    """Up to SWAP_PICK_M rows of A, the swapped product where its blocks make at most one wave; else the fastest by
    skinny_seconds of NARROW_K128, NARROW, NARROW_WIDE and the default tiles, each unsplit or split along K (the
    first of them, fewest splits first, where two estimates are equal)."""
    if m <= SWAP_PICK_M and tiles_of(m, n, swapped_config(m)) <= sm_count:
        return swapped_config(m)
    cfg, split = min(skinny_options(k), key=lambda o: skinny_seconds(m, n, k, o[0], o[1], sm_count))
    return cfg if split == 1 else replace(cfg, split_k=split)


def swapped_config(m: int, itemsize: int = 2) -> GemmConfig:
    """SWAPPED for an m-row A (m <= SWAP_MAX_M) of `itemsize`-byte elements: block_m the tokens rounded up to
    wgmma's multiple of 8, k-steps of 256 bytes a row (128 bf16 elements, 256 float8), as many stages as keep about
    SWAP_BYTES_IN_FLIGHT loading (at most SWAP_MAX_STAGES)."""
    if not 0 < m <= SWAP_MAX_M:
        raise ValueError(f"the swapped product puts A's {m} rows on wgmma's n: at most {SWAP_MAX_M}")
    block_m, block_k = _ceildiv(m, 8) * 8, SWAPPED.block_k * 2 // itemsize
    stage = (SWAPPED.block_n + block_m) * block_k * itemsize
    stages = max(2, min(SWAP_MAX_STAGES, SWAP_BYTES_IN_FLIGHT // stage))
    return replace(SWAPPED, block_m=block_m, block_k=block_k, num_stages=stages)



def narrow_keeps_up(m: int, n: int, sm_count: int) -> bool:
    """Whether fewer than half the SMs' worth of NARROW blocks (but at least a third) finish as soon as HBM
    delivers the operands: each element of K costs a block NARROW_BLOCK_S_PER_K and brings (m + n) two-byte
    elements from HBM, whatever the number of blocks."""
    return 3 * tiles_of(m, n, NARROW) >= sm_count and (m + n) * 2 / HBM_BYTES_PER_S >= NARROW_BLOCK_S_PER_K


def idle(m: int, n: int, cfg: GemmConfig, sm_count: int) -> float:
    """The fraction of SM time the tiles leave idle in their last wave (one block per SM)."""
    tiles = tiles_of(m, n, cfg)
    return 1 - tiles / (_ceildiv(tiles, sm_count) * sm_count)


TUNE_LIMIT = 6  # candidates autotune times at most: each costs a build (nvcc, ~10-30 s) the first time


def tune_candidates(m: int, n: int, k: int, dtype: np.dtype | str, sm_count: int = HOPPER_SMS,
                    limit: int = TUNE_LIMIT) -> list[GemmConfig]:
    """The configurations `gemm(..., autotune=True)` times for an m x n x k product, the table's pick first (the one
    taken where nothing can be timed), then the ones the table weighs against it: for a skinny product the skinny
    estimate's candidates, best estimate first, after the swapped product's (unsplit and split in two) where A has
    at most SWAP_MAX_M rows; otherwise the default tiles, on a persistent grid or not, WIDE, the
    ping-pong PERSISTENT in row groups and in column groups, MID where its tiles make at most one wave, NARROW_K128
    and NARROW where theirs make at most two, and split_for's split.
    Element types other than fp16/bf16 keep the default tiles: one candidate, nothing to time."""
    pick = pick_config(m, n, k, dtype, sm_count)
    dt = np.dtype(dtype)
    if dt.itemsize != 2 or dt.kind not in "fV":
        return [pick]
    found = [pick]
    if m <= SWAP_MAX_M:  # the swapped product, unsplit and in two (not in the estimate: not timed yet)
        swapped = swapped_config(m, dt.itemsize)
        found += [replace(swapped, split_k=s) for s in splits_of(k, swapped)[:2]]
    if m <= SKINNY_M and 2 * tiles_of(m, n, DEFAULT) <= sm_count:
        ranked = sorted(skinny_options(k), key=lambda o: skinny_seconds(m, n, k, o[0], o[1], sm_count))
        found += [cfg if split == 1 else replace(cfg, split_k=split) for cfg, split in ranked]
    else:
        found += [DEFAULT, DEFAULT_PERSISTENT, WIDE, PERSISTENT, PERSISTENT_COLUMNS, PERSISTENT_BANDED]
        if tiles_of(m, n, MID) <= sm_count:
            found.append(MID)
        if tiles_of(m, n, NARROW) <= 2 * sm_count:
            found += [NARROW_K128, NARROW]
        if (split := split_for(m, n, k, DEFAULT, sm_count)) > 1:
            found.append(replace(DEFAULT, split_k=split))
    unique = list(dict.fromkeys(found))
    return unique[:limit]


# FP8 (examples/gemm_fp8.py, both tiles K-major). FP8_DEFAULT: the tiles measured at 8192^3 (1,227 TFLOP/s, 1.05x
# torch._scaled_mm, 1.70x our bf16: thirty-second session). The others, each with about 192 KiB of stages, are what
# fp8_pick takes where FP8_DEFAULT's tiles make less than a wave and what `gemm_fp8(..., autotune=True)` times
# (fp8_tune_candidates); FP8_NARROW, FP8_MID and the swapped product timed at 16 tokens (fp8_pick), FP8_TALL not
FP8_DEFAULT = GemmConfig(block_m=128, block_n=256, block_k=128, num_stages=4)
FP8_TALL = GemmConfig(block_m=256, block_n=128, block_k=128, num_stages=4)
FP8_NARROW = GemmConfig(block_m=64, block_n=128, block_k=256, num_stages=4, threads=128, group_m=2)
FP8_MID = GemmConfig(block_m=128, block_n=128, block_k=128, num_stages=6, threads=128, group_m=2)


def fp8_pick(m: int, n: int, k: int, sm_count: int = HOPPER_SMS) -> GemmConfig:
    """The configuration `gemm_fp8()` takes without tile arguments: FP8_DEFAULT where its tiles make a wave or more;
    with fewer, the swapped product up to FP8_SWAP_PICK_M rows of A where its blocks make at most a wave, else
    FP8_NARROW. H100, thirty-third session, loop / graph x torch._scaled_mm: 16 x 4096 x 4096 swapped 1.22 / 1.44,
    FP8_NARROW 1.01 / 1.14, FP8_DEFAULT 0.66 / 0.70; 16 x 14336 x 4096 (224 swapped blocks) FP8_NARROW 1.22 / 1.24,
    swapped 1.14 / 1.16, FP8_DEFAULT 1.11 / 1.08; 32-64 tokens: the comment at FP8_SWAP_PICK_M."""
    if tiles_of(m, n, FP8_DEFAULT) >= sm_count:
        return FP8_DEFAULT
    if m <= FP8_SWAP_PICK_M and tiles_of(m, n, swapped_config(m, itemsize=1)) <= sm_count:
        return swapped_config(m, itemsize=1)
    return FP8_NARROW


def fp8_tune_candidates(m: int, n: int, k: int, sm_count: int = HOPPER_SMS,
                        limit: int = TUNE_LIMIT) -> list[GemmConfig]:
    """The configurations `gemm_fp8(..., autotune=True)` times for an m x n x k FP8 product, fp8_pick's first, then
    FP8_DEFAULT and: with a wave of its tiles or more, FP8_TALL; with fewer, the swapped product (A's rows up to
    SWAP_MAX_M), FP8_NARROW and FP8_MID, whose smaller tiles put more blocks on the operands' bytes."""
    found = [fp8_pick(m, n, k, sm_count), FP8_DEFAULT]
    if tiles_of(m, n, FP8_DEFAULT) >= sm_count:
        found.append(FP8_TALL)
    else:
        found += ([swapped_config(m, itemsize=1)] if m <= SWAP_MAX_M else []) + [FP8_NARROW, FP8_MID]
    return list(dict.fromkeys(found))[:limit]
