"""Two accumulator chains for a consumer warpgroup that owns a single m64 slab of its tile.

wgmma instructions that accumulate into the same registers form a dependency chain: each waits for the one
before it to have added its product. A warpgroup with two or more m64 slabs (128x128 tiles with one consumer
warpgroup, every cooperative 128xN tile) alternates between independent chains, one per slab; a warpgroup with one
slab (the skinny products' 64x128 tiles, gemm_table.NARROW) has a single chain, and its blocks measured at about half
the SM's tensor rate where two slabs reached ~88% (benchmarks/NOTES.md, twenty-second and twenty-ninth sessions).
So such a warpgroup accumulates its stage's odd instructions (k16 steps 1, 3, ...) into a second register array and
adds it to the fragment once, after the loop: fp32 sums in another order, the same for every run.

Only where the second array fits beside the first (`MAX_CHAIN_ACCUMULATORS` registers per thread in all, as a
128x128 tile's two slabs take) and a stage holds at least two instructions.
"""

from __future__ import annotations

SPLIT_CHAINS = True  # False: one chain per slab (bench_gemm.py's "/1c" configs)
MAX_CHAIN_ACCUMULATORS = 128  # fp32 registers per thread for both chains together (n = 128 at one slab)


def chains_of(slabs: int, n: int, instructions: int) -> int:
    """Accumulator chains of a loop whose warpgroup holds `slabs` m64 slabs of width `n`, `instructions` wgmma
    instructions per slab and stage: 2 where one slab would make a single chain and the second array fits."""
    fits = 2 * slabs * n // 2 <= MAX_CHAIN_ACCUMULATORS
    return 2 if SPLIT_CHAINS and slabs == 1 and instructions >= 2 and fits else 1


def odd_chain(acc: str) -> str:
    """The register array of the odd instructions' chain of accumulator `acc`."""
    return f"{acc}_odd"


def chain_declaration(acc: str, slabs: int, n: int) -> str:
    return f"float {odd_chain(acc)}[{slabs}][{n // 2}];  // the odd wgmma instructions' chain (gemm_sm90_chains)"


def chain_target(acc: str, kk: int, chains: int) -> str:
    """The register array the stage's `kk`-th instruction accumulates into."""
    return odd_chain(acc) if chains == 2 and kk % 2 else acc


def odd_scale(kk: int, index: str, clear_each_stage: bool) -> str | None:
    """wgmma's scale-d for the odd chain's first instruction of a stage (None: not its first). The chain starts from
    zero in every run of the loop: its first instruction of the first stage overwrites; a gemm that clears its
    accumulator at every stage overwrites at every stage."""
    if kk != 1:
        return None
    return "0" if clear_each_stage else f"({index} > 0)"


def chain_sum_lines(acc: str, slabs: int, n: int) -> list[str]:
    """After the loop's last products are done: the odd chain added into the fragment."""
    return [
        "#pragma unroll",
        f"for (int ts_m = 0; ts_m < {slabs}; ++ts_m) {{",
        "#pragma unroll",
        f"  for (int ts_r = 0; ts_r < {n // 2}; ++ts_r) {acc}[ts_m][ts_r] += {odd_chain(acc)}[ts_m][ts_r];",
        "}",
    ]
