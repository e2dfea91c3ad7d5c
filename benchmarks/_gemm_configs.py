"""What benchmarks/bench_gemm.py times: its shape sets (`--shapes`), the tile configurations it times at a shape
(`--configs`: table, auto, skinny or a list of entries) and how an entry parses into gemm()'s keyword arguments and
the code generator's switches. The entry format: block_m x block_n x block_k / stages / group_m [/ suffixes], the
suffixes as bench_gemm.py's docstring lists them."""

from __future__ import annotations

import re
from dataclasses import replace

import jax.numpy as jnp
from gemm import device_sm_count

from jax_tilescale.codegen import cuda as codegen_cuda
from jax_tilescale.codegen import (
    gemm_sm90,
    gemm_sm90_edge,
    gemm_sm90_load,
    gemm_sm90_pingpong,
    gemm_sm90_probe,
    gemm_sm90_store,
)
from jax_tilescale.codegen.gemm_table import (
    FLAG_SUFFIXES,
    SWAP_MAX_M,
    GemmConfig,
    pick_config,
    skinny_options,
    skinny_seconds,
    swapped_config,
    tiles_of,
)

SHAPES = ((2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192), (8192, 28672, 8192),
          (16384, 8192, 1024), (128, 8192, 8192))  # issue 16's bf16 sweep
# `--shapes decoder`: a decoder's projections (N x K of a 4096-wide model with a 14336-wide MLP, and a 6144-wide
# fused QKV) at token counts from a few to a prefill chunk: where the skinny and narrow picks of the table live
DECODER_SHAPES = tuple((m, n, k) for m in (16, 128, 256, 512, 1024)
                       for n, k in ((4096, 4096), (6144, 4096), (14336, 4096), (4096, 14336)))
SHAPE_SETS = {"issue": SHAPES, "decoder": DECODER_SHAPES}
FP8_SHAPES = "8192x8192x8192"
# block_m x block_n x block_k / stages / group_m [/ suffixes]; "auto": the table's pick for the shape
# (codegen/gemm_table.py) + CANDIDATES + split-K 2 and 4 where the shape has fewer tiles than SMs
CONFIGS = "auto"
CANDIDATES = "128x256x64/4/g8,256x192x64/4/g8/p,128x256x64/3/g8/p,128x192x64/4/g8/p/pp,128x128x64/3/g8/t128/b2"
# config suffix -> (module, switch, value) of the code generator
SWITCHES = {"mc": (gemm_sm90, "MULTICAST", True), "direct": (gemm_sm90, "TMA_STORE", False),
            "ring": (gemm_sm90, "BORROW_RING", True), "noring": (gemm_sm90, "BORROW_RING", False),
            "earlyturn": (gemm_sm90_pingpong, "EARLY_TURN", True),
            "sw64": (gemm_sm90_load, "WIDEST_SWIZZLE", 64), "sw32": (gemm_sm90_load, "WIDEST_SWIZZLE", 32),
            "nodep": (codegen_cuda, "DEPENDENT_LAUNCH", False),
            "late": (codegen_cuda, "DEPENDENT_WAIT_AFTER_SETUP", True),
            "trig": (codegen_cuda, "DEPENDENT_TRIGGER_EARLY", True),
            "smemx1": (gemm_sm90_probe, "EXTRA_SMEM_READS", 1), "smemx2": (gemm_sm90_probe, "EXTRA_SMEM_READS", 2),
            "edge": (gemm_sm90_edge, "EDGE_LOOP", True),
            "cfirst": (gemm_sm90_store, "OUTPUT_EVICT_FIRST", True),
            "oplast": (gemm_sm90_load, "OPERANDS_EVICT_LAST", True),
            "alast": (gemm_sm90_load, "OPERANDS_EVICT_LAST", "a"),
            **{f"pfa{d}": (gemm_sm90_load, "A_PREFETCH_AHEAD", d) for d in (1, 2, 4)},
            "nostore": (gemm_sm90_probe, "NO_OUTPUT_STORES", True),
            "fixk": (gemm_sm90_probe, "FIRST_K_STEP_ONLY", True),
            "fixka": (gemm_sm90_probe, "FIRST_K_STEP_ONLY", "a"), "fixkb": (gemm_sm90_probe, "FIRST_K_STEP_ONLY", "b")}
# the suffixes whose kernels do not compute the product (diagnostics of what a part of the kernel costs)
NOT_THE_PRODUCT = frozenset(suffix for suffix, (module, name, _) in SWITCHES.items()
                            if module is gemm_sm90_probe and name in gemm_sm90_probe.NOT_THE_PRODUCT)


def shape_list(text: str) -> list[str]:
    """`--shapes`: MxNxK entries, and set names (SHAPE_SETS) expanded in place."""
    shapes = []
    for entry in text.split(","):
        if entry in SHAPE_SETS:
            shapes += ["x".join(map(str, s)) for s in SHAPE_SETS[entry]]
        elif re.fullmatch(r"\d+x\d+x\d+", entry):
            shapes.append(entry)
        else:
            raise ValueError(f"--shapes: {entry!r} is neither MxNxK nor one of {', '.join(SHAPE_SETS)}")
    return shapes


def skinny_estimates(m: int, n: int, k: int) -> dict[str, float]:
    """Every candidate the table's skinny estimate weighs (gemm_table.skinny_options), described as a --configs entry,
    with its estimated seconds at this shape."""
    sms = device_sm_count()
    return {replace(cfg, split_k=split).describe(): skinny_seconds(m, n, k, cfg, split, sms)
            for cfg, split in skinny_options(k)}


def shape_configs(text: str, m: int, n: int, k: int) -> list[str]:
    """The --configs entries to time at one shape, the table's pick first ("table" marks it);
    `--configs table`: the pick alone (what `gemm()` without tile arguments runs); `table` in a list of entries
    stands for the pick there (and `tuned` for gemm(autotune=True), `swapped` for the swapped product's tiles at the
    shape: per_shape_entry); `--configs skinny`: the pick, then every
    candidate of the skinny estimate (skinny_estimates), so that one run measures what the estimate weighs, after the
    swapped product (unsplit and split in two) where A has at most SWAP_MAX_M rows."""
    pick = pick_config(m, n, k, jnp.bfloat16, device_sm_count())
    if text == "skinny":
        swapped = [replace(swapped_config(m), split_k=s).describe() for s in (1, 2)] if m <= SWAP_MAX_M else []
        return [pick.describe() + "/table", *swapped, *(e for e in skinny_estimates(m, n, k) if e != pick.describe())]
    if text not in ("auto", "table"):
        entries = (pick.describe() + "/table" if entry == "table" else per_shape_entry(entry, m)
                   for entry in text.split(","))
        return [entry for entry in entries if entry is not None]
    out = [pick.describe() + "/table"]
    if text == "table":
        return out
    out += [c for c in CANDIDATES.split(",") if c != pick.describe()]
    base = GemmConfig()
    if 2 * tiles_of(m, n, base) <= device_sm_count():
        out += [f"{base.describe()}/s{s}" for s in (2, 4) if f"{base.describe()}/s{s}" != pick.describe()]
        out.append(f"{base.describe()}/s4/kernel")  # the partials summed inside the kernel by each tile's last split
    return out


def per_shape_entry(entry: str, m: int, itemsize: int = 2) -> str | None:
    """`swapped` and `swapped/sN`: gemm_table.swapped_config at this shape's M (its tiles follow M), unsplit or split
    along K in N, described as an entry; None where A has more rows than SWAP_MAX_M (the swapped product is not built
    for those). Any other entry is returned as given."""
    if entry.split("/")[0] != "swapped":
        return entry
    found = re.fullmatch(r"swapped(?:/s([1-9]\d*))?", entry)
    if found is None:
        raise ValueError(f"config {entry!r}: `swapped` takes one split suffix at most (`swapped/s2`)")
    if m > SWAP_MAX_M:
        return None
    return replace(swapped_config(m, itemsize), split_k=int(found.group(1) or 1)).describe()


def parse_config(text: str) -> tuple[dict, dict[tuple, object]]:
    """(gemm() keyword arguments, code generator switches: (module, name) -> value) of one --configs entry; `tuned`:
    gemm(autotune=True), the fastest of gemm_table.tune_candidates timed at the shape's first call and kept on disk."""
    if text == "tuned":
        return {"autotune": True}, {}
    tiles, stages, group, *rest = text.split("/")
    bm, bn, bk = map(int, tiles.split("x"))
    cfg = dict(block_m=bm, block_n=bn, block_k=bk, num_stages=int(stages), group_m=int(group.lstrip("g")))
    switches: dict[tuple, object] = {}
    for suffix in rest:
        if suffix == "table":  # gemm() without tile arguments: the table's pick (described by the entry)
            cfg = {}
        elif suffix in FLAG_SUFFIXES:
            cfg[FLAG_SUFFIXES[suffix]] = True
        elif suffix.startswith("s") and suffix[1:].isdigit():
            cfg["split_k"] = int(suffix[1:])
        elif suffix in SWITCHES:
            module, name, value = SWITCHES[suffix]
            switches[(module, name)] = value
        elif suffix.startswith("t") and suffix[1:].isdigit():
            cfg["threads"] = int(suffix[1:])
        elif suffix.startswith("b") and suffix[1:].isdigit():
            cfg["blocks_per_sm"] = int(suffix[1:])
        elif re.fullmatch(r"band\d+x\d+", suffix):  # group_columns in bands: band{columns}x{rows}
            cfg["band_columns"], cfg["band_rows"] = map(int, suffix[4:].split("x"))
        elif re.fullmatch(r"qt\d+", suffix):  # with tq: the last N waves drawn, the rounds before dealt statically
            cfg["queue_tail"] = int(suffix[2:])
        elif suffix in ("xla", "kernel", "cluster"):
            cfg["split_reduce"] = suffix
        else:
            known = (f"tN, sN, bN, bandCxR, qtN, xla, kernel, cluster, {', '.join(FLAG_SUFFIXES)}, table, "
                     f"{', '.join(SWITCHES)}")
            raise ValueError(f"config {text!r}: unknown suffix {suffix!r} ({known})")
    return cfg, switches


def parse_entry(text: str) -> tuple[dict, dict[tuple, object]]:
    """parse_config, and also `table` with switch suffixes only (`table/nodep`): gemm()'s table pick at each shape,
    lowered under those switches (the tools that time one config at a time: tools/run_constant.py, chain_time.py)."""
    head, *suffixes = text.split("/")
    if head != "table":
        return parse_config(text)
    unknown = [s for s in suffixes if s not in SWITCHES]
    if unknown:
        raise ValueError(f"variant {text!r}: unknown switch {unknown[0]!r} (known: {', '.join(SWITCHES)})")
    return {}, {(SWITCHES[s][0], SWITCHES[s][1]): SWITCHES[s][2] for s in suffixes}
