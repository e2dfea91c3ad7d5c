"""Where the consumers of a Hopper GEMM wait for their operands, per tile (a GPU diagnostic).

    python tools/stage_trace.py 16384x8192x1024 128x192x64/4/g8/p/pp [--heat 3] [--launches 8]

Builds `examples/gemm.py`'s kernel for that shape and `bench_gemm.py`-style config with
`gemm_sm90.STAGE_TRACE` on (jax_tilescale/codegen/gemm_sm90_trace.py: each consumer warpgroup writes,
per tile, its stage-wait cycles, the loop's cycles, its start, its SM and, in ping-pong, the cycles it waited for its
turn over the product), runs it
--heat seconds (the power cap's steady state), decodes the last product and prints where the waits go;
`--launches N` decodes the heat's last N products too, each on one time axis (launch_timeline: where a launch's time
goes between its SMs and between launches).
Findings: benchmarks/NOTES.md, nineteenth session.
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import time

import numpy as np

from jax_tilescale.codegen.gemm_sm90_trace import FIELDS, SLOTS, decode_slab, slot_position

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))


def decode(c: np.ndarray, m: int, n: int, bm: int, bn: int, slab_rows: list[int]) -> list[dict]:
    """One record per tile and consumer warpgroup (slab_rows: each warpgroup's first row in the
    tile); tiles whose trace the output's edge clipped are left out."""
    rows, cols = (max(slot_position(r)[i] for r in range(SLOTS)) + 1 for i in (0, 1))
    out = []
    for tm in range(-(-m // bm)):
        for tn in range(-(-n // bn)):
            if tm * bm + max(slab_rows) + rows > m or tn * bn + cols > n:
                continue
            for wg, r0 in enumerate(slab_rows):
                rec = decode_slab(lambda i, j, r0=r0, tm=tm, tn=tn: c[tm * bm + r0 + i, tn * bn + j])
                out.append({"tm": tm, "tn": tn, "wg": wg, **rec})
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("shape")
    ap.add_argument("config")
    ap.add_argument("--heat", type=float, default=2.0)
    ap.add_argument("--launches", type=int, default=0,
                    help="after the heat, this many products back to back, each decoded: a per-launch timeline")

    args = ap.parse_args()
    import jax
    import jax.numpy as jnp

    if jax.default_backend() != "gpu":  # elsewhere the interpreter computes the product: nothing to decode
        sys.exit(f"stage_trace: the trace is written by the Hopper kernel on a GPU; JAX's backend here is "
                 f"{jax.default_backend()!r}")
    from bench_gemm import parse_config
    from gemm import device_sm_count, gemm, persistent_grid, persistent_tile

    from jax_tilescale.codegen import gemm_sm90
    from jax_tilescale.codegen.gemm_table import GemmConfig

    gemm_sm90.STAGE_TRACE = True  # the product is overwritten: this build is for the trace only

    m, n, k = map(int, args.shape.split("x"))
    kw, flags = parse_config(args.config)
    for (module, name), value in flags.items():  # the config's code generator switches (/mc, /direct, ...)
        setattr(module, name, value)
    f = jax.jit(gemm(m, n, k, jnp.bfloat16, **kw))
    ka, kb = jax.random.split(jax.random.key(0))
    a = jax.random.normal(ka, (m, k), jnp.float32).astype(jnp.bfloat16)
    b = jax.random.normal(kb, (k, n), jnp.float32).astype(jnp.bfloat16)
    f(a, b).block_until_ready()
    # Batches of products queued back to back; what is decoded comes from the last batch, so it ran at the power
    # cap's steady state behind the products before it (products launched after the host's second of decoding, as
    # the first --launches run took them, ran on a cooled GPU at a higher clock: 362 us of loops a launch against
    # 448 at the cap on an H100, benchmarks/NOTES.md, forty-ninth session).
    t0, calls = time.perf_counter(), 0
    while True:  # at least one batch
        batch = [f(a, b) for _ in range(max(20, args.launches))]
        batch[-1].block_until_ready()
        calls += len(batch)
        if time.perf_counter() - t0 >= args.heat:
            break
    per = (time.perf_counter() - t0) / calls * 1e3
    print(f"{args.shape} {args.config}: {calls} products, {per:.3f} ms each ({2 * m * n * k / per / 1e9:.0f} TFLOP/s,"
          " traced build)")
    bm, bn, bk = kw["block_m"], kw["block_n"], kw["block_k"]
    persistent = kw.get("persistent", False)
    cfg = GemmConfig(**{key: v for key, v in kw.items() if key in GemmConfig.__dataclass_fields__})
    tiles_m, tiles_n, tiles, blocks, group = persistent_grid(m, n, cfg, device_sm_count())  # as gemm() builds it
    order = {persistent_tile(t, tiles_m, tiles_n, group, cfg, edge=n % bn != 0): t for t in range(tiles)}

    def records(product) -> list[dict]:
        """One product's trace records, each with its tile's wave in the static order (-1 without a persistent
        grid)."""
        recs = traced_tiles(np.asarray(product.astype(jnp.float32)), m, n, cfg)
        for r in recs:
            r["wave"] = order[(r["tm"], r["tn"])] // blocks if persistent else -1
        return recs

    recs = records(batch[-1])
    # a stage of the tile at the SM's dense 16-bit rate, 2048 multiply-adds a cycle (in the cooperative
    # form both warpgroups' halves share the tensor pipe: the loop of either takes the whole tile's time)
    ideal = bm * bn * bk // 2048
    print("\n".join(summarize(recs, -(-k // bk), ideal, persistent)))
    out = os.path.join(os.environ.get("OUT", "/tmp"), f"stage_trace_{args.shape}_{args.config.replace('/', '_')}.npy")
    if args.launches:  # the batch's last products, back to back on the GPU
        launches = [records(o) for o in batch[-args.launches:]]
        print("\n".join(launch_timeline(launches)))
        np.save(out.replace(".npy", "_launches.npy"),
                np.array([[i, *(r[f] for f in COLUMNS)] for i, recs in enumerate(launches) for r in recs], np.int64))
    np.save(out, np.array([[r[f] for f in COLUMNS] for r in recs], np.int64))
    print(f"records ({', '.join(COLUMNS)}): {out}")


def traced_tiles(c: np.ndarray, m: int, n: int, cfg) -> list[dict]:
    """decode's records of a kernel's output, keyed by the tile's place in C (tm along M, tn along N). A swapped
    product (cfg.swap) computes each tile transposed, C^T = B^T A^T, and stores it back the right way round, so its
    records lie in C's transpose: block_n rows of it a tile, shared out among the consumer warpgroups."""
    if not cfg.swap:
        return decode(c, m, n, cfg.block_m, cfg.block_n, slab_rows(cfg.block_m, cfg.threads, cfg.pingpong))
    recs = decode(c.T, n, m, cfg.block_n, cfg.block_m, slab_rows(cfg.block_n, cfg.threads, cfg.pingpong))
    return [{**r, "tm": r["tn"], "tn": r["tm"]} for r in recs]


def slab_rows(block_m: int, threads: int, pingpong: bool) -> list[int]:
    """Each consumer warpgroup's first row in its tile: the tile's rows shared out among the `threads` // 128
    warpgroups, or, in ping-pong, where each takes whole tiles of its own, row 0 alone."""
    groups = 1 if pingpong else threads // 128
    return [g * block_m // groups for g in range(groups)]


COLUMNS = ("tm", "tn", "wg", "wave", *(f.name for f in FIELDS))  # the tile's place, then the trace's fields
HOST_BOUND_GAP_US = 30  # more between launches than a kernel's exit and start (~5-7 us measured): the host lagged


def between_loops(recs: list[dict]) -> list[str]:
    """Per SM, the loops in the order they started (warpgroup 0's where two share each tile): the
    SM's clock (clock64 over %globaltimer from its first loop's start to its last's) and the cycles
    from each loop's end to the next one's start (negative where they overlap: in ping-pong the next
    warpgroup starts while the last products of the other are in the tensor pipe)."""
    clocks, gaps, busy = [], [], []
    for sm in sorted({r["sm"] for r in recs}):
        own = sorted((r for r in recs if r["sm"] == sm and r["wg"] == 0),
                     key=lambda r: (r["start"] - recs[0]["start"]) % (1 << 32))  # %globaltimer: one for all SMs
        if len(own) < 2:
            continue
        c0 = own[0]["clock"]
        start = [(r["clock"] - c0) % (1 << 32) for r in own]
        ns = (own[-1]["start"] - own[0]["start"]) % (1 << 32)
        if ns > 0:
            clocks.append(start[-1] / ns)
        gaps += [start[j + 1] - (start[j] + own[j]["cycles"]) for j in range(len(own) - 1)]
        span = start[-1] + own[-1]["cycles"]
        busy.append(sum(r["cycles"] for r in own) / span)
    if not gaps:
        return ["between loops: fewer than two loops on every SM"]
    g = np.array(gaps, float)
    return [f"SM clock (clock64 / globaltimer): median {np.median(clocks):.3f} GHz (min {min(clocks):.3f}, max "
            f"{max(clocks):.3f})",
            f"cycles from a loop's end to the next's start on its SM: median {np.median(g):.0f}, p10 "
            f"{np.percentile(g, 10):.0f}, p90 {np.percentile(g, 90):.0f}, max {g.max():.0f} ({len(g)} gaps)",
            f"loops' cycles over the SM's span from its first loop's start to its last's end: median "
            f"{np.median(busy):.3f}, min {min(busy):.3f} (above 1 where loops overlap)"]


def launch_timeline(launches: list[list[dict]]) -> list[str]:
    """Consecutive launches' loops on one time axis (%globaltimer, us from the first launch's first loop): per launch,
    the span from its first loop's start to its last loop's end, the time since the launch before ended its loops
    (the kernel's tail, the launch gap and the next kernel's set-up together), how far apart the SMs' first loops
    start and their last loops end (a late SM holds the launch), and the tiles per SM (a dynamic deal changes them
    from launch to launch). Warpgroup 0's records only: in the cooperative form both share each tile."""
    ref = min(r["start"] for r in launches[0])
    lines, prev_end, spans, gaps = [], None, [], []
    for i, recs in enumerate(launches):
        own = [r for r in recs if r["wg"] == 0]
        start = np.array([(r["start"] - ref) % (1 << 32) for r in own], float) / 1e3
        end = start + np.array([r["ns"] for r in own], float) / 1e3
        sms = np.array([r["sm"] for r in own])
        ids = np.unique(sms)
        firsts = np.array([start[sms == s].min() for s in ids])
        lasts = np.array([end[sms == s].max() for s in ids])
        tiles = np.array([(sms == s).sum() for s in ids])
        span = end.max() - start.min()
        gap = ""
        if prev_end is not None:
            gaps.append(start.min() - prev_end)
            gap = f", {gaps[-1]:.2f} us after the last launch's loops"
        spans.append(span)
        late = int(ids[lasts.argmax()])
        cyc = np.array([r["cycles"] for r in own], float)
        ns = np.array([max(r["ns"], 1) for r in own], float)
        loops = (f"; loops median {np.median(cyc):.0f} cycles, {np.median(ns) / 1e3:.2f} us at "
                 f"{np.median(cyc / ns):.3f} GHz, stage waits {np.mean([r['wait'] for r in own]):.0f}, turn waits "
                 f"{np.median([r['turn'] for r in own]):.0f}")
        lines.append(f"launch {i}: loops {start.min():.2f}-{end.max():.2f} us ({span:.2f}{gap}); SMs' first loops "
                     f"start within {np.median(firsts) - firsts.min():.2f} (median) / {firsts.max() - firsts.min():.2f}"
                     f" (last) us; last loops end {end.max() - np.median(lasts):.2f} us after the median SM's (SM "
                     f"{late}, {tiles[lasts.argmax()]} tiles); tiles per SM {tiles.min()}-{tiles.max()} "
                     f"({len(tiles)} SMs){loops}")
        prev_end = end.max()
    if len(launches) > 1:
        gap_median = np.median(gaps)
        lines.append(f"launches: loops' span median {np.median(spans):.2f} us, between launches median "
                     f"{gap_median:.2f} us (min {min(gaps):.2f}, max {max(gaps):.2f})")
        if gap_median > HOST_BOUND_GAP_US:  # the fiftieth session's first trace: 128-262 us, at 1.38 GHz
            lines.append(f"WARNING: the launches were not back to back (median {gap_median:.0f} us between "
                         f"them, over {HOST_BOUND_GAP_US} us): the host did not keep the GPU busy, so these "
                         "launches ran off the power cap's steady state; their times and clocks do not compare "
                         "with back-to-back ones (their cycles do)")
    return lines


def summarize(recs: list[dict], ksteps: int, ideal: int, persistent: bool) -> list[str]:
    """The trace's findings, one line each: loop cycles against `ideal` cycles a k-step, waits by
    k-step, wave, time and SM."""
    col = {name: np.array([r[name] for r in recs], float) for name in COLUMNS if name != "wave"}
    wait, cyc = col["wait"], col["cycles"]
    lines = [f"runs of the loop: {len(recs)} of {ksteps} k-steps; loop cycles median {np.median(cyc):.0f} "
             f"(p10 {np.percentile(cyc, 10):.0f}, p90 {np.percentile(cyc, 90):.0f}); the tensor pipe's share "
             f"{ksteps * ideal} ({ideal} a k-step): median x{np.median(cyc) / (ksteps * ideal):.3f}",
             f"stage-wait cycles a run: mean {wait.mean():.0f}, p90 {np.percentile(wait, 90):.0f}, max "
             f"{wait.max():.0f} ({wait.sum() / cyc.sum():.1%} of loop cycles; a wait under the products in flight "
             "costs nothing)",
             f"wait at k-step 0 (the fill): mean {col['first'].mean():.0f}; k-steps that waited > 64 cycles: mean "
             f"{col['waited'].mean():.2f}; longest wait median {np.median(col['longest']):.0f}"]
    hist = [sum((int(r["mask"]) >> j) & 1 for r in recs) for j in range(min(32, ksteps))]
    lines.append("runs that waited > 64 cycles at k-step j % 32: " + " ".join(f"{j}:{h}" for j, h in enumerate(hist)))
    if persistent:
        waves = sorted({r["wave"] for r in recs})
        lines.append("by wave (mean wait / mean loop cycles): " + " ".join(
            f"{w}:{np.mean([r['wait'] for r in recs if r['wave'] == w]):.0f}/"
            f"{np.mean([r['cycles'] for r in recs if r['wave'] == w]):.0f}" for w in waves))
    t = (col["start"].astype(np.int64) - int(col["start"].min())) % (1 << 32) / 1e3
    edges = np.linspace(0, t.max() + 1e-9, 11)
    parts = []
    for lo, hi in itertools.pairwise(edges):
        sel = (t >= lo) & (t < hi)
        parts.append(f"{lo:.0f}:{int(sel.sum())}/{wait[sel].mean() if sel.any() else 0:.0f}")
    lines.append("by start (us from the first: runs / mean wait): " + " ".join(parts))
    ns = col["ns"]
    if (ns > 0).all():
        us = ns / 1e3
        lines.append(f"loop time (%globaltimer): median {np.median(us):.2f} us (p10 {np.percentile(us, 10):.2f}, "
                     f"p90 {np.percentile(us, 90):.2f}); SM clock over the loops (cycles / ns): median "
                     f"{np.median(cyc / ns):.3f} GHz; loops end {(t + us).max():.2f} us after the first starts")
    turn = col["turn"]
    if turn.any():  # ping-pong: each warpgroup's loop waits first for its turn (the other's last stage waited for)
        lines.append(f"turn waits before a loop (ping-pong): mean {turn.mean():.0f} cycles, median "
                     f"{np.median(turn):.0f}, p90 {np.percentile(turn, 90):.0f}, max {turn.max():.0f} "
                     f"({turn.sum() / cyc.sum():.1%} of loop cycles; 0 before a warpgroup's first tile)")
    lines += between_loops(recs)
    per_sm = np.array([wait[col["sm"] == s].sum() for s in np.unique(col["sm"])])
    lines.append(f"wait per SM: min {per_sm.min():.0f}, median {np.median(per_sm):.0f}, max {per_sm.max():.0f} "
                 f"({len(per_sm)} SMs)")
    return lines


if __name__ == "__main__":
    main()
