"""GEMM on one GPU, written the TileLang way: C = A @ B with T.Pipelined + T.gemm.

Each block computes a block_m x block_n tile of C: it clears a float32 fragment, walks K in
block_k steps copying a tile of A and of B into shared memory and multiplying them into the
fragment, then stores the fragment (rounded to the output dtype). M, N and K need not be multiples
of the tiles: the grid and the K loop round up (T.ceildiv) and the copies clip at the edges (a tile
loaded past the end of A or B is zero-filled, C is written only inside). On an H100/H200 the code
generator turns the loop into a TMA producer warpgroup and wgmma consumer warpgroups and the final
copy into TMA stores (jax_tilescale/codegen/gemm_sm90.py; there `block_m=256, block_n=192` on a
persistent grid, whose epilogue stages through the ring's last stages, is the fastest measured at large
shapes: benchmarks/NOTES.md); on other GPUs since Ampere into cp.async + mma.sync
(gemm_sm80.py); the CPU interpreter runs the kernel as written. Blocks are visited in groups of
`group_m` rows of tiles so that neighbouring blocks share tiles of B in L2. For a decoder's few
tokens (`swap=True`) each block computes its tile transposed, C^T = B^T A^T, so that the tokens sit
on the tensor cores' narrow side instead of filling 64 rows mostly with zeros (`swapped_kernel`).

`python examples/gemm.py` runs the kernel on one device (a GPU, else one simulated CPU device
through the interpreter, at a smaller default size) and checks A @ B against a float64 product
on the host, on random data.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import jax_tilescale as ts
from jax_tilescale import language as T
from jax_tilescale.codegen.gemm_table import (
    DEFAULT,
    HOPPER_SMS,
    PERSISTENT,
    SWAP_MAX_M,
    GemmConfig,
    pick_config,
    swapped_config,
    tune_candidates,
)
from jax_tilescale.codegen.layout import shared_budget

# the tile orders of the grids below (grouped, in column groups, bands, pairs; persistent_tile picks one)
ORDERS = ts.testing.sibling(__file__, "gemm_orders")
check_order, grouped_tile, edge_last_tile, banded_tile, row_paired_tile = (
    ORDERS.check_order, ORDERS.grouped_tile, ORDERS.edge_last_tile, ORDERS.banded_tile, ORDERS.row_paired_tile)
group_rows, group_of, persistent_grid, persistent_tile = (
    ORDERS.group_rows, ORDERS.group_of, ORDERS.persistent_grid, ORDERS.persistent_tile)

TOLERANCE = {"float32": 1e-4, "float16": 5e-3, "bfloat16": 2e-2}  # relative to max |C|
# SplitK's cluster form pads its partner tile's rows by 8 floats: a warp's pair stores of wgmma's accumulator
# layout (8 rows x 4 column pairs) then meet each bank at most twice, the least for 8-byte accesses (rows of
# 128 or 256 floats alone put all 8 rows on the same banks).
PARTNER_PAD = 8


# --- config + kernels -------------------------------------------------------------------------
def gemm(m: int, n: int, k: int, dtype: jnp.dtype = jnp.bfloat16, block_m: int | None = None,
         block_n: int | None = None, block_k: int | None = None, num_stages: int | None = None,
         threads: int | None = None, group_m: int | None = None, split_k: int | None = None,
         persistent: bool | None = None, num_sms: int | None = None,
         blocks_per_sm: int | None = None, pingpong: bool | None = None, swap: bool | None = None,
         edge_last: bool | None = None, group_columns: bool | None = None, pair_rows: bool | None = None,
         serpentine: bool | None = None, band_columns: int | None = None, band_rows: int | None = None,
         tile_queue: bool | None = None, queue_tail: int | None = None, split_reduce: str = "xla",
         autotune: bool = False) -> Callable[..., jax.Array]:
    """A [m, k] @ B [k, n] -> C [m, n] in `dtype` (fp32 accumulation). Arguments left None come from
    the table of jax_tilescale/codegen/gemm_table.py for this shape, dtype and `num_sms` (the
    GPU's SM count, else 132); the ones given win. `split_k` > 1 returns a `SplitK` (the kernel
    writes float32 partials that XLA sums afterwards in split order; `split_reduce="kernel"`: the
    tile's last split sums them inside the kernel, measured slower on the H200, benchmarks/NOTES.md);
    otherwise the kernel itself, `persistent` or not.
    `blocks_per_sm=2` builds it to run two blocks per SM (ts.kernel's argument; gemm_table.PAIRED,
    which the table no longer picks: benchmarks/NOTES.md). `pingpong=True` with `persistent`: the two
    consumer warpgroups take alternate tiles (ts.kernel's argument; tiles up to 128 x 192). `swap=True`: each
    block computes its tile transposed (`swapped_kernel`: a decoder's few tokens on the tensor cores' narrow side;
    with `persistent`, `persistent_swapped_kernel`: block_m any multiple of 8 at 128-byte swizzle);
    without tile arguments gemm_table.swapped_config's tiles, for m up to gemm_table.SWAP_MAX_M.
    `edge_last=True` with `persistent`: the column of tiles that passes N's end walked last (`edge_last_tile`; in
    either grouped order).
    `group_columns=True` with `persistent`: the grouped order turned round, `group_m` columns of tiles walking the
    rows together (`persistent_tile`); `pair_rows=True` with it: the rows two at a time, so that each pair of blocks
    takes one tile column at every wave (B's tile shared by the pair where gemm_sm90.MULTICAST is on).
    `serpentine=True` with `persistent`: every other group of the grouped order walks the other way (`grouped_tile`).
    `band_columns` and `band_rows` with `group_columns`: the column groups in bands (`banded_tile`).
    `tile_queue=True` with `persistent`: each block takes its next tile in that order from a tile queue
    (`T.tile_queue`) as it finishes the last, instead of every blocks-th tile from its own; `queue_tail=N` with it:
    only the last N waves drawn, the rounds before dealt statically (`T.tile_queue`'s static_rounds).
    `autotune=True` (no configuration arguments then): the table's pick and the others gemm_table.tune_candidates
    names are built, checked against jnp.dot and timed on the GPU the first time this problem is seen, and the
    fastest (the earliest given within ts.tune.MARGIN of it: the table's pick unless another is clearly faster) is
    kept on disk for every later call and process (jax_tilescale/tune; `tuned_config`); without a GPU the table's
    pick, untimed."""
    sms = num_sms or device_sm_count()
    given = given_arguments("gemm", autotune, block_m=block_m, block_n=block_n, block_k=block_k,
                            num_stages=num_stages, threads=threads, group_m=group_m, split_k=split_k,
                            persistent=persistent, blocks_per_sm=blocks_per_sm, pingpong=pingpong, swap=swap,
                            edge_last=edge_last, group_columns=group_columns, pair_rows=pair_rows,
                            serpentine=serpentine, band_columns=band_columns, band_rows=band_rows,
                            tile_queue=tile_queue, queue_tail=queue_tail)
    if autotune:
        return build(m, n, k, dtype, tuned_config(m, n, k, dtype, sms, split_reduce).config, sms, split_reduce)
    tiles_given = any(f in given for f in ("block_m", "block_n", "block_k"))
    if swap and not tiles_given:
        base = swapped_base("gemm", m, jnp.dtype(dtype).itemsize)
    else:
        base = DEFAULT if tiles_given else pick_config(m, n, k, dtype, sms)  # the caller chose the tiles
    if persistent and not base.persistent and num_stages is None:
        base = dataclasses.replace(base, num_stages=PERSISTENT.num_stages)
    return build(m, n, k, dtype, dataclasses.replace(base, **given), sms, split_reduce)


def given_arguments(caller: str, autotune: bool, **arguments: Any) -> dict[str, Any]:
    """The configuration arguments a call gave (those not None); none may be given with `autotune=True`, which
    chooses the configuration itself."""
    given = {name: value for name, value in arguments.items() if value is not None}
    if autotune and given:
        raise ValueError(f"{caller}(autotune=True) chooses the configuration itself: leave out {', '.join(given)}, "
                         f"or give them with autotune=False")
    return given


def swapped_base(caller: str, m: int, itemsize: int) -> GemmConfig:
    """gemm_table.swapped_config for a call that asks for the swapped product without naming its tiles."""
    if m > SWAP_MAX_M:
        raise ValueError(f"{caller}(swap=True) chooses its tiles for up to {SWAP_MAX_M} rows of A, not {m}: take "
                         f"block_m (A's rows a tile, wgmma's n: a multiple of 8 up to 256) and block_n")
    return swapped_config(m, itemsize)


def build(m: int, n: int, k: int, dtype: jnp.dtype, cfg: GemmConfig, sms: int,
          split_reduce: str = "xla") -> Callable[..., jax.Array]:
    """The kernel of one configuration: a SplitK where it splits K, else a persistent or one-block-per-tile one."""
    if cfg.swap:
        check_swapped(cfg, split_reduce)
    check_order(cfg)
    if cfg.split_k > 1:
        return SplitK(m, n, k, dtype, cfg, split_reduce)
    if cfg.persistent:
        return (persistent_swapped_kernel if cfg.swap else persistent_kernel)(m, n, k, dtype, cfg, sms)
    if cfg.swap:
        return swapped_kernel(m, n, k, dtype, cfg)
    return tile_kernel(m, n, k, dtype, cfg)


def tuned_config(m: int, n: int, k: int, dtype: jnp.dtype, sms: int, split_reduce: str = "xla",
                 **tune: Any) -> ts.tune.Tuned[GemmConfig]:
    """The fastest of gemm_table.tune_candidates for this problem (ts.tune.autotune: timed on the GPU the first time,
    then read from disk), each candidate's C first checked against jnp.dot in float32 on random operands (a wrong one
    is refused, never chosen). `tune`: autotune's keyword arguments (timer, retune, progress)."""
    dtype = jnp.dtype(dtype)
    rng = np.random.default_rng(0)
    with jax.ensure_compile_time_eval():  # computed now, also where gemm() is called while a jit traces
        a = jnp.asarray(ts.testing.random_array(rng, (m, k), dtype))
        b = jnp.asarray(ts.testing.random_array(rng, (k, n), dtype))
        want = np.asarray(jnp.dot(a, b, preferred_element_type=jnp.float32))
    limit = TOLERANCE.get(dtype.name, TOLERANCE["bfloat16"]) * max(float(np.abs(want).max()), 1e-30)

    def check(c: jax.Array) -> str | None:
        err = float(np.abs(np.asarray(c, np.float32) - want).max())
        return None if err <= limit else f"max |C - jnp.dot| = {err:.3g}, over the tolerance {limit:.3g}"

    candidates = tune_candidates(m, n, k, dtype, sms)
    return ts.tune.autotune("examples.gemm", candidates, lambda cfg: build(m, n, k, dtype, cfg, sms, split_reduce),
                            (a, b), describe=GemmConfig.describe, key=dict(sms=sms, split_reduce=split_reduce),
                            check=check, **tune)


def device_sm_count() -> int:
    """SMs of the default device when it is a GPU, else the H100/H200's 132 (the table's key)."""
    return getattr(jax.devices()[0], "core_count", None) or HOPPER_SMS


def tile_kernel(m: int, n: int, k: int, dtype, cfg: GemmConfig) -> ts.TileKernel:
    """One block per output tile, blocks in grouped order."""
    bm, bn, bk = cfg.block_m, cfg.block_n, cfg.block_k
    tiles_m, tiles_n = T.ceildiv(m, bm), T.ceildiv(n, bn)
    group = group_of(tiles_m, cfg)

    @ts.kernel(out_shape=jax.ShapeDtypeStruct((m, n), dtype), grid=(tiles_n, tiles_m), threads=cfg.threads,
               blocks_per_sm=cfg.blocks_per_sm, pingpong=cfg.pingpong)
    def gemm_kernel(A, B, C):
        tm, tn = grouped_tile(T.program_id(1) * tiles_n + T.program_id(0), tiles_m, tiles_n, group)
        A_s = T.alloc_shared((bm, bk), dtype)
        B_s = T.alloc_shared((bk, bn), dtype)
        C_f = T.alloc_fragment((bm, bn), jnp.float32)
        T.clear(C_f)
        for ko in T.Pipelined(T.ceildiv(k, bk), num_stages=cfg.num_stages):
            # ragged edges: rows of A past m and columns past k arrive as zeros (and add nothing)
            T.copy(A[T.ds(tm * bm, bm), T.ds(ko * bk, bk)], A_s)
            T.copy(B[T.ds(ko * bk, bk), T.ds(tn * bn, bn)], B_s)
            T.gemm(A_s, B_s, C_f)
        T.copy(C_f, C[T.ds(tm * bm, bm), T.ds(tn * bn, bn)])  # only the part inside C

    return gemm_kernel


def check_swapped(cfg: GemmConfig, split_reduce: str) -> None:
    """The forms the swapped product takes: one block per tile, a persistent grid, or split-K partials summed by XLA;
    block_n on the tensor cores' 64-row side (m64 slabs, shared among the consumer warpgroups), block_m on their n."""
    warpgroups = max(1, cfg.threads // 128)
    if cfg.threads % 128 or cfg.block_n % (64 * warpgroups):
        raise ValueError(f"swap=True puts block_n on wgmma's 64-row slabs, {warpgroups} consumer warpgroup(s) at "
                         f"threads={cfg.threads}: block_n={cfg.block_n} is not a multiple of {64 * warpgroups}: take "
                         f"threads=128 and block_n a multiple of 64")
    if cfg.block_m % 8 or cfg.block_m > 256:
        raise ValueError(f"swap=True puts block_m on wgmma's n: take block_m a multiple of 8 up to 256, not "
                         f"{cfg.block_m}")
    if cfg.blocks_per_sm > 1:
        raise ValueError(f"swap=True takes one block an SM ({cfg.describe()}): take it without blocks_per_sm")
    if cfg.persistent and cfg.split_k > 1:
        raise ValueError(f"swap=True with split_k computes one tile a block ({cfg.describe()}): take it without "
                         f"persistent")
    if cfg.split_k > 1 and split_reduce != "xla":
        raise ValueError(f"swap=True with split_k sums the partials in XLA, not {split_reduce!r}: take "
                         f"split_reduce='xla'")


def swapped_product(A, B, Ct, tm, tn, k_steps, first_step, cfg: GemmConfig, dtype) -> None:
    """Ct (block_n x block_m, float32) = the transpose of A's tile row tm times B's tile column tn over `k_steps`
    k-steps from `first_step`: C^T = B^T A^T, so that B's block_n columns take the tensor cores' 64-row side and
    A's few rows their narrow one. B's tile as stored (K x N) is the product's left operand read MN-major
    (`transpose_A`), A's (M x K) its right one read K-major (`transpose_B`)."""
    bm, bn, bk = cfg.block_m, cfg.block_n, cfg.block_k
    A_s = T.alloc_shared((bm, bk), dtype)
    B_s = T.alloc_shared((bk, bn), dtype)
    T.clear(Ct)
    for ko in T.Pipelined(k_steps, num_stages=cfg.num_stages):
        T.copy(A[T.ds(tm * bm, bm), T.ds((first_step + ko) * bk, bk)], A_s)
        T.copy(B[T.ds((first_step + ko) * bk, bk), T.ds(tn * bn, bn)], B_s)
        T.gemm(B_s, A_s, Ct, transpose_A=True, transpose_B=True)


def store_transposed(Ct, dst, row0, col0) -> None:
    """Ct (block_n x block_m) into dst[row0 : row0 + block_m, col0 : col0 + block_n] transposed, the part inside dst:
    one whole copy, which the Hopper lowering writes transposed into its swizzled staging tile and stores with TMA
    (and ping-pong's warpgroups each through a staging tile of their own)."""
    bn, bm = Ct.shape
    T.copy(Ct, dst[T.ds(row0, bm), T.ds(col0, bn)], transpose=True)


def swapped_kernel(m: int, n: int, k: int, dtype, cfg: GemmConfig) -> ts.TileKernel:
    """One block per output tile, computed transposed (swapped_product) and stored back the right way round."""
    bm, bn = cfg.block_m, cfg.block_n

    @ts.kernel(out_shape=jax.ShapeDtypeStruct((m, n), dtype), grid=(T.ceildiv(n, bn), T.ceildiv(m, bm)),
               threads=cfg.threads)
    def gemm_swapped(A, B, C):
        tn, tm = T.program_id(0), T.program_id(1)
        Ct = T.alloc_fragment((bn, bm), jnp.float32)
        swapped_product(A, B, Ct, tm, tn, T.ceildiv(k, cfg.block_k), 0, cfg, dtype)
        store_transposed(Ct, C, tm * bm, tn * bn)

    return gemm_swapped


def persistent_kernel(m: int, n: int, k: int, dtype, cfg: GemmConfig, num_sms: int) -> ts.TileKernel:
    """One block per SM (at most one per tile); block b computes tiles b, b + blocks, ... in
    grouped order, or with cfg.tile_queue whichever tiles it draws from the queue. On the Hopper plan
    the producer loads the next tile's stages while the consumers store the last one
    (jax_tilescale/codegen/gemm_sm90_nest.py)."""
    bm, bn, bk = cfg.block_m, cfg.block_n, cfg.block_k
    tiles_m, tiles_n, tiles, blocks, group = persistent_grid(m, n, cfg, num_sms)

    @ts.kernel(out_shape=jax.ShapeDtypeStruct((m, n), dtype), grid=(blocks,), threads=cfg.threads,
               blocks_per_sm=cfg.blocks_per_sm, pingpong=cfg.pingpong)
    def gemm_persistent(A, B, C):
        A_s = T.alloc_shared((bm, bk), dtype)
        B_s = T.alloc_shared((bk, bn), dtype)
        C_f = T.alloc_fragment((bm, bn), jnp.float32)

        def one_tile(tile):
            tm, tn = persistent_tile(tile, tiles_m, tiles_n, group, cfg, edge=n % bn != 0)
            T.clear(C_f)
            for ko in T.Pipelined(T.ceildiv(k, bk), num_stages=cfg.num_stages):
                T.copy(A[T.ds(tm * bm, bm), T.ds(ko * bk, bk)], A_s)
                T.copy(B[T.ds(ko * bk, bk), T.ds(tn * bn, bn)], B_s)
                T.gemm(A_s, B_s, C_f)
            T.copy(C_f, C[T.ds(tm * bm, bm), T.ds(tn * bn, bn)])

        each_tile(tiles, blocks, cfg, one_tile)

    return gemm_persistent


def each_tile(tiles: int, blocks: int, cfg: GemmConfig, one_tile: Callable[[Any], None]) -> None:
    """A persistent grid's tile loop around `one_tile(tile)`: the static deal (block b takes tiles b, b + blocks,
    ...) or, with cfg.tile_queue, a tile queue (each block draws its next tile as it finishes the last; with
    cfg.queue_tail only in the last queue_tail waves, the full waves before them dealt statically)."""
    if cfg.tile_queue:
        static = max(0, tiles // blocks - cfg.queue_tail) if cfg.queue_tail else 0
        for tile in T.tile_queue(tiles, static_rounds=static):
            one_tile(tile)
        return
    for w in T.serial(T.ceildiv(tiles, blocks)):
        tile = w * blocks + T.program_id(0)
        with T.If(tile < tiles):  # the last wave has fewer tiles than blocks
            one_tile(tile)


def persistent_swapped_kernel(m: int, n: int, k: int, dtype, cfg: GemmConfig, num_sms: int) -> ts.TileKernel:
    """persistent_kernel's grid and tile order, each tile computed transposed (swapped_product: block_n of B's
    columns on wgmma's m64 slabs, block_m of A's rows on its n, any multiple of 8 at 128-byte swizzle) and stored
    back the right way round as one transposed copy (store_transposed). On the Hopper plan the producer loads the
    next tile's stages while the consumers store the last one; with `pingpong` the two consumer warpgroups take
    alternate tiles, each storing its own while the other's products run."""
    bm, bn = cfg.block_m, cfg.block_n
    tiles_m, tiles_n, tiles, blocks, group = persistent_grid(m, n, cfg, num_sms)

    @ts.kernel(out_shape=jax.ShapeDtypeStruct((m, n), dtype), grid=(blocks,), threads=cfg.threads,
               pingpong=cfg.pingpong)
    def gemm_persistent_swapped(A, B, C):
        Ct = T.alloc_fragment((bn, bm), jnp.float32)

        def one_tile(tile):
            tm, tn = persistent_tile(tile, tiles_m, tiles_n, group, cfg)
            swapped_product(A, B, Ct, tm, tn, T.ceildiv(k, cfg.block_k), 0, cfg, dtype)
            store_transposed(Ct, C, tm * bm, tn * bn)

        each_tile(tiles, blocks, cfg, one_tile)

    return gemm_persistent_swapped


class SplitK:
    """C = A @ B with K split over `cfg.split_k` blocks per output tile, in one kernel. Each split
    writes its float32 partial tile into its own block_m x block_n slab of a workspace W (the
    kernel's second output; slab (split, tile) at rows (split * tiles + tile) * block_m, an index
    the code generator proves in bounds, so no check stands between the wgmma instructions), then
    takes a ticket from its tile's counter (`T.atomic_fetch_add`: it orders memory, so the split
    drawing a ticket has seen every slab written before the earlier tickets); the split that draws
    the last ticket adds the slabs in split order (slab 0 + slab 1 + ...: the same additions every
    run, so the result is deterministic, whichever split finishes last; with two splits it adds the
    other's slab to its own partial, still in its registers: the same bits) and stores its tile of C
    once, rounded to `dtype`. No second pass (CUTLASS's "serial split-K" idea). That split also takes
    the tile's count back to zero, so the counters are left as the next launch needs them
    (`left_zero=True`) and the kernel ends without the pass that would zero them.

    `reduce="xla"` (gemm()'s default: measured faster, 0.063 vs 0.097 ms at 128 x 8192 x 8192 on the
    H200, benchmarks/NOTES.md): the kernel writes the slabs only and XLA sums them afterwards in the
    same order (a second pass over 2 x split_k x 4 bytes per element of C).

    `reduce="cluster"` (Hopper): a tile's splits are one thread-block cluster (`ts.kernel(cluster=)`)
    and add in shared memory, no slab or counter in global memory: in each round the odd-numbered
    half of the remaining splits stores its partial sum into the shared tile of its partner
    `step` ranks below (`T.cluster_tile`), the cluster meets (`T.cluster_sync`), and the partner adds
    it to its registers; split 0 stores C. A pairwise tree in a fixed order: deterministic. Splits: a
    power of two up to 8 (a cluster's limit)."""

    def __init__(self, m: int, n: int, k: int, dtype, cfg: GemmConfig, reduce: str = "xla"):
        if reduce not in ("kernel", "xla", "cluster"):
            raise ValueError(f"split_reduce must be 'kernel', 'xla' or 'cluster', not {reduce!r}")
        self.m, self.n, self.dtype, self.cfg, self.reduce = m, n, jnp.dtype(dtype), cfg, reduce
        bm, bn, bk = cfg.block_m, cfg.block_n, cfg.block_k
        tiles_m, tiles_n = T.ceildiv(m, bm), T.ceildiv(n, bn)
        k_steps = T.ceildiv(k, bk)
        if k_steps % cfg.split_k:  # a k-step's window must start inside K, so every split has as many
            divisors = [d for d in range(1, k_steps + 1) if k_steps % d == 0]
            raise ValueError(f"split_k={cfg.split_k} does not divide the {k_steps} k-steps of K={k} at "
                             f"block_k={bk}: use one of {divisors[:12]}")
        self.splits = splits = cfg.split_k
        if reduce == "cluster" and (splits & (splits - 1) or splits > 8):
            raise ValueError(f"split_reduce='cluster' adds the splits of a tile in one cluster of at most 8 blocks, "
                             f"pairwise: split_k must be 2, 4 or 8, not {splits}")
        per = k_steps // splits
        stages = cfg.num_stages
        if reduce == "cluster":  # the pipeline's stages that fit beside the partner tile (2 KiB: alignment, barriers)
            room = shared_budget("sm_90", cfg.blocks_per_sm) - bm * (bn + PARTNER_PAD) * 4 - 2048
            stages = max(2, min(stages, room // ((bm * bk + bk * bn) * self.dtype.itemsize)))
        self.rows = rows = tiles_m * bm  # the "xla" form's slabs: every tile row of one split
        tiles = tiles_m * tiles_n
        group = group_of(tiles_m, cfg)
        if reduce == "kernel":
            slabs = jax.ShapeDtypeStruct((splits * tiles * bm, bn), jnp.float32)
            out_shape = (jax.ShapeDtypeStruct((m, n), dtype), slabs)
        elif reduce == "cluster":
            out_shape = jax.ShapeDtypeStruct((m, n), dtype)
        else:
            out_shape = jax.ShapeDtypeStruct((splits * rows, n), jnp.float32)

        def partial(A, B, C_f, tm, tn, split):
            """This split's k-steps into C_f (its transpose where the configuration swaps the product)."""
            if cfg.swap:
                swapped_product(A, B, C_f, tm, tn, per, split * per, cfg, dtype)
                return
            A_s = T.alloc_shared((bm, bk), dtype)
            B_s = T.alloc_shared((bk, bn), dtype)
            T.clear(C_f)
            for ko in T.Pipelined(per, num_stages=stages):
                # the last k-step of the last split may pass K: its columns/rows past K read zeros
                T.copy(A[T.ds(tm * bm, bm), T.ds((split * per + ko) * bk, bk)], A_s)
                T.copy(B[T.ds((split * per + ko) * bk, bk), T.ds(tn * bn, bn)], B_s)
                T.gemm(A_s, B_s, C_f)

        def tile():
            """(tile row, tile column, split, the tile's number in launch order)"""
            pid = T.program_id(1) * tiles_n + T.program_id(0)
            return (*grouped_tile(pid, tiles_m, tiles_n, group), T.program_id(2), pid)

        launch = dict(out_shape=out_shape, grid=(tiles_n, tiles_m, splits), threads=cfg.threads,
                      blocks_per_sm=cfg.blocks_per_sm)

        @ts.kernel(**launch)
        def gemm_split_k_partials(A, B, W):
            tm, tn, split, _ = tile()
            C_f = T.alloc_fragment((bn, bm) if cfg.swap else (bm, bn), jnp.float32)
            partial(A, B, C_f, tm, tn, split)
            if cfg.swap:
                store_transposed(C_f, W, split * rows + tm * bm, tn * bn)
            else:
                T.copy(C_f, W[T.ds(split * rows + tm * bm, bm), T.ds(tn * bn, bn)])

        @ts.kernel(**launch)
        def gemm_split_k(A, B, C, W):
            tm, tn, split, pid = tile()
            C_f = T.alloc_fragment((bm, bn), jnp.float32)
            # zero when the kernel starts, and when it ends: each tile's last split takes its count back
            arrived = T.alloc((tiles,), jnp.int32, level="global", left_zero=True)
            ticket = T.alloc_shared((2,), jnp.int32)
            partial(A, B, C_f, tm, tn, split)
            T.copy(C_f, W[T.ds((split * tiles + pid) * bm, bm), :])
            T.atomic_fetch_add(arrived[pid], 1, ticket[0])
            if ticket[0] == splits - 1:  # the last split of this tile: every slab is written
                T.atomic_fetch_add(arrived[pid], -splits, ticket[1])  # every split has counted: back to zero
                if splits == 2:  # its own slab is still in C_f: add the other's (a + b == b + a, the same bits)
                    for i, j in T.Parallel(bm, bn):
                        C_f[i, j] = C_f[i, j] + W[((1 - split) * tiles + pid) * bm + i, j]
                else:
                    T.clear(C_f)
                    for s in T.serial(splits):
                        for i, j in T.Parallel(bm, bn):
                            C_f[i, j] = C_f[i, j] + W[(s * tiles + pid) * bm + i, j]
                T.copy(C_f, C[T.ds(tm * bm, bm), T.ds(tn * bn, bn)])  # only the part inside C

        @ts.kernel(**launch, cluster=(1, 1, splits))
        def gemm_split_k_cluster(A, B, C):
            tm, tn, _, _ = tile()
            rank = T.cluster_rank()  # the split: the cluster is the tile's splits along grid z
            C_f = T.alloc_fragment((bm, bn), jnp.float32)
            partner = T.alloc_shared((bm, bn + PARTNER_PAD), jnp.float32)  # a partner's partial sum, added here
            partial(A, B, C_f, tm, tn, rank)
            step = 1
            while step < splits:  # traced: the rounds are top-level statements, as cluster_sync needs
                if rank % (2 * step) == step:
                    T.copy(C_f, T.cluster_tile(partner[:, :bn], rank - step))
                T.cluster_sync()  # the stores into `partner` are done
                if rank % (2 * step) == 0:
                    for i, j in T.Parallel(bm, bn):
                        C_f[i, j] = C_f[i, j] + partner[i, j]
                step *= 2
                if step < splits:
                    T.cluster_sync()  # `partner` is read: the next round may store into it
            if rank == 0:
                T.copy(C_f, C[T.ds(tm * bm, bm), T.ds(tn * bn, bn)])  # only the part inside C

        self.kernel = {"kernel": gemm_split_k, "cluster": gemm_split_k_cluster, "xla": gemm_split_k_partials}[reduce]

    def trace(self, a, b):
        """The kernel's IR (what the code generator and bench_gemm.py's resources read)."""
        return self.kernel.trace(a, b)

    def __call__(self, a: jax.Array, b: jax.Array) -> jax.Array:
        if self.reduce == "kernel":
            return self.kernel(a, b)[0]
        if self.reduce == "cluster":
            return self.kernel(a, b)
        slabs = self.kernel(a, b).reshape(self.splits, self.rows, self.n)
        total = slabs[0]
        for s in range(1, self.splits):  # a fixed order: deterministic, unlike atomics
            total = total + slabs[s]
        return total[: self.m].astype(self.dtype)


# --- check + entry point ----------------------------------------------------------------------
def check(m: int, n: int, k: int, dtype: str = "bfloat16", seed: int = 0, autotune: bool = False,
          **config: int) -> ts.testing.Verdict:
    """The kernel's C on one device vs a float64 product on the host (tolerance per dtype, relative
    to max |C|), every element. `--autotune`: gemm(autotune=True)'s choice (timed on a GPU the first time)."""
    rng = np.random.default_rng(seed)
    a = ts.testing.random_array(rng, (m, k), dtype)
    b = ts.testing.random_array(rng, (k, n), dtype)
    got = jax.jit(gemm(m, n, k, jnp.dtype(dtype), autotune=autotune, **config))(a, b)
    want = a.astype(np.float64) @ b.astype(np.float64)
    return ts.testing.compare(got, want, "C close to the float64 product", atol_of_max=TOLERANCE[dtype])


if __name__ == "__main__":
    ts.testing.main(check, mesh=None, defaults=dict(m=256, n=512, k=256), gpu_defaults=dict(m=4096, n=4096, k=4096))
