"""Operand bytes a GEMM's tile order brings from HBM, by a model of the L2 (a CPU estimate, no GPU).

The blocks of a wave (`--sms` consecutive tiles of the order examples/gemm.py's kernel walks: persistent_tile for a
persistent grid, grouped_tile otherwise) walk their k-steps together; at each k-step the wave needs one k-slice of A
for each of its rows of tiles and one of B for each of its columns, and at its end its tiles of C pass through the
L2 too (`output`: the kernel's stores are write-back lines that take room as the operands do). The L2 is an LRU
cache of `--l2` MiB; every operand miss is a slice read from HBM. An H100 or H200 has 50 MiB of L2 in two halves,
and data a block reads from the far half may be held in both, so its useful size lies between 25 and 50 MiB.

Checked against Nsight Compute's `dram__bytes_read.sum` on an H100 at 16384 x 8192 x 1024 (benchmarks/NOTES.md,
forty-fifth session): column groups of 8, model 218 MB, card 218.2; in bands of 16 x 16, 117.6 and 119.6;
serpentine column groups, 157-194 and 187.1. The model does not say what the misses cost: the serpentine order
reads 14% less and ran no faster; the plain column groups of 16 read 35% less and ran 1.23x the cycles, each wave
wanting one of A's tile rows from 14.7 blocks at once (`wave_sharing`) against 7.6 for groups of 8.

    python tools/l2_order_model.py [--shapes 16384x8192x1024] [--configs table,128x192x64/4/g8/p/pp/gc/band16x16]
        [--l2 25,50] [--no-output]

Prints, per shape and configuration (bench_gemm.py's --configs entries; `table`: the tile table's pick), the MB of
A and B read from HBM at each L2 size, the operands' own size, and the mean over waves of the most blocks wanting
one of A's tile rows and one of B's tile columns at once.
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import sys
from collections import Counter, OrderedDict

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(ROOT / "benchmarks"))
from _gemm_configs import parse_config  # noqa: E402
from gemm import grouped_tile, persistent_grid, persistent_tile  # noqa: E402

from jax_tilescale.codegen.gemm_table import GemmConfig, pick_config  # noqa: E402

SHAPES = "16384x8192x1024"
CONFIGS = ("table,128x192x64/4/g8/p/pp,128x192x64/4/g8/p/pp/gc,128x192x64/4/g8/p/pp/gc/sn,128x192x64/4/g16/p/pp/gc,"
           "128x192x64/4/g8/p/pp/gc/band16x24")


def grouped_order(tiles_m: int, tiles_n: int, group: int) -> list[tuple[int, int]]:
    """(tile row, tile column) in grouped_tile's order (a grid of one block per tile dispatched in pid order)."""
    return [grouped_tile(p, tiles_m, tiles_n, group) for p in range(tiles_m * tiles_n)]


def config_order(m: int, n: int, cfg: GemmConfig, sms: int = 132) -> list[tuple[int, int]]:
    """The tiles of an m x n product in the order `cfg`'s kernel walks them: a persistent grid's tile t is its
    (t % blocks)-th block's (t // blocks)-th, and all blocks walk together, so the order is t's."""
    if not cfg.persistent:
        return grouped_order(-(-m // cfg.block_m), -(-n // cfg.block_n), min(cfg.group_m, -(-m // cfg.block_m)))
    tiles_m, tiles_n, tiles, _, group = persistent_grid(m, n, cfg, sms)
    return [persistent_tile(t, tiles_m, tiles_n, group, cfg, edge=n % cfg.block_n != 0) for t in range(tiles)]


def hbm_bytes(order: list[tuple[int, int]], k: int, bm: int, bn: int, l2_bytes: int, sms: int = 132, bk: int = 64,
              itemsize: int = 2, output: bool = True) -> int:
    """Bytes of A and B the model reads from HBM for tiles of bm x bn walked in `order`, waves of `sms` tiles."""
    cache: OrderedDict[tuple, int] = OrderedDict()
    held = missed = 0

    def take(key: tuple, size: int) -> None:
        nonlocal held
        cache[key] = size
        held += size
        while held > l2_bytes:
            held -= cache.popitem(last=False)[1]

    slice_bytes = {"a": bm * bk * itemsize, "b": bk * bn * itemsize}
    for start in range(0, len(order), sms):
        wave = order[start:start + sms]
        wanted = [("a", r) for r in sorted({r for r, _ in wave})] + [("b", c) for c in sorted({c for _, c in wave})]
        for step in range(-(-k // bk)):
            for operand, index in wanted:
                key = (operand, index, step)
                if key in cache:
                    cache.move_to_end(key)
                    continue
                missed += slice_bytes[operand]
                take(key, slice_bytes[operand])
        if output:
            for tile in wave:
                take(("c", tile), bm * bn * itemsize)
    return missed


def wave_sharing(order: list[tuple[int, int]], sms: int = 132) -> tuple[float, float]:
    """Mean over waves of the most tiles of one wave on one of A's tile rows, and on one of B's tile columns."""
    waves = [order[s:s + sms] for s in range(0, len(order), sms)]
    rows = statistics.mean(max(Counter(r for r, _ in w).values()) for w in waves)
    cols = statistics.mean(max(Counter(c for _, c in w).values()) for w in waves)
    return rows, cols


def bench_config(entry: str, m: int, n: int, k: int) -> GemmConfig:
    """A bench_gemm.py --configs entry as a GemmConfig (`table`: the table's pick at the shape)."""
    if entry == "table":
        return pick_config(m, n, k, "bfloat16")
    kwargs, _ = parse_config(entry)
    return GemmConfig(**{key: v for key, v in kwargs.items() if key in GemmConfig.__dataclass_fields__})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", default=SHAPES, help="MxNxK, comma-separated")
    ap.add_argument("--configs", default=CONFIGS, help="bench_gemm.py --configs entries, comma-separated (`table`)")
    ap.add_argument("--l2", default="25,50", help="L2 sizes in MiB, comma-separated")
    ap.add_argument("--sms", type=int, default=132)
    ap.add_argument("--no-output", action="store_true", help="leave C's tiles out of the L2")
    args = ap.parse_args()
    sizes = [int(x) for x in args.l2.split(",")]
    print(f"{'shape':>18} {'config':>40} " + " ".join(f"{f'MB @{s}':>9}" for s in sizes)
          + f" {'operands':>9} {'A rows':>6} {'B cols':>6}")
    for shape in args.shapes.split(","):
        m, n, k = (int(x) for x in shape.split("x"))
        for entry in args.configs.split(","):
            cfg = bench_config(entry, m, n, k)
            order = config_order(m, n, cfg, args.sms)
            read = [hbm_bytes(order, k, cfg.block_m, cfg.block_n, s << 20, args.sms, cfg.block_k,
                              output=not args.no_output) for s in sizes]
            a_share, b_share = wave_sharing(order, args.sms)
            print(f"{shape:>18} {cfg.describe():>40} " + " ".join(f"{r / 1e6:>9.1f}" for r in read)
                  + f" {2 * (m * k + k * n) / 1e6:>9.1f} {a_share:>6.1f} {b_share:>6.1f}")


if __name__ == "__main__":
    main()
