"""Operand bytes a GEMM's tile order brings from HBM, by a model of the L2 (a CPU estimate, no GPU).

The blocks of a wave (`--sms` consecutive tiles of examples/gemm.py's grouped order, as a persistent grid or the
hardware's in-order dispatch runs them) walk their k-steps together; at each k-step the wave needs one k-slice of A
for each of its rows of tiles and one of B for each of its columns. The L2 is an LRU cache of `--l2` MiB holding
those slices; every miss is a slice read from HBM. An H100 or H200 has 50 MiB of L2 in two halves, and data a block
reads from the far half may be held in both, so its useful size lies between 25 and 50 MiB: the model is run at both.

    python tools/l2_order_model.py [--shapes 16384x8192x4096:160x128,3000x28672x8192:256x192] [--l2 25,50]

Prints, per shape, tile and L2 size, the GB the row-after-row order (group 1, what `group_of` gave before the
thirty-sixth session wherever group_m did not divide the rows of tiles) and the grouped order with a partial last
group read, against the operands' size. Findings: benchmarks/NOTES.md, thirty-sixth session.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
from collections import OrderedDict

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))
from gemm import grouped_tile  # noqa: E402

SHAPES = "16384x8192x1024:160x128,16384x8192x2048:160x128,16384x8192x4096:160x128,3000x28672x8192:256x192"


def hbm_bytes(m: int, n: int, k: int, bm: int, bn: int, group: int, l2_bytes: int, sms: int = 132,
              bk: int = 64, itemsize: int = 2) -> int:
    """Bytes of A and B the model reads from HBM for an m x n x k product in tiles of bm x bn, `group` rows of tiles a
    group of the grouped order."""
    tiles_m, tiles_n = -(-m // bm), -(-n // bn)
    order = [grouped_tile(p, tiles_m, tiles_n, group) for p in range(tiles_m * tiles_n)]
    cache: OrderedDict[tuple, int] = OrderedDict()
    held = missed = 0
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
                size = slice_bytes[operand]
                missed += size
                cache[key] = size
                held += size
                while held > l2_bytes:
                    held -= cache.popitem(last=False)[1]
    return missed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", default=SHAPES, help="MxNxK:BMxBN, comma-separated")
    ap.add_argument("--l2", default="25,50", help="L2 sizes in MiB, comma-separated")
    ap.add_argument("--group", type=int, default=8, help="group_m of the grouped order")
    ap.add_argument("--sms", type=int, default=132)
    args = ap.parse_args()
    print(f"{'shape':>18} {'tile':>8} {'L2 MiB':>6} {'group 1 GB':>10} {'grouped GB':>10} {'operands GB':>11}")
    for entry in args.shapes.split(","):
        shape, tile = entry.split(":")
        m, n, k = (int(x) for x in shape.split("x"))
        bm, bn = (int(x) for x in tile.split("x"))
        group = min(args.group, -(-m // bm))
        for mib in (int(x) for x in args.l2.split(",")):
            row_after_row = hbm_bytes(m, n, k, bm, bn, 1, mib << 20, args.sms)
            grouped = hbm_bytes(m, n, k, bm, bn, group, mib << 20, args.sms)
            print(f"{shape:>18} {tile:>8} {mib:>6} {row_after_row / 1e9:>10.2f} {grouped / 1e9:>10.2f} "
                  f"{2 * (m * k + k * n) / 1e9:>11.2f}")


if __name__ == "__main__":
    main()
