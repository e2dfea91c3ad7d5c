"""Where a jitted loop of GEMM products spends its time on the GPU: each kernel's duration and the idle gap
before it, for XLA's `jnp.dot` and for our kernel (`examples/gemm.py`'s `gemm()`, the table's pick unless
`--config` names one), in the loop `benchmarks/bench_gemm.py` times (a `fori_loop` of products, each reduced
to one element). Traced with `jax.profiler` (CUPTI; no other tool needed on the GPU machine), after warm-up.

    python tools/loop_trace.py 128x8192x8192 [--config 128x64x64/8/g8/t128] [--reps 20] [--out DIR]

Prints, per loop, the median duration of each kernel and of the gap before it, the loop's time per product
on the GPU (first kernel start to last kernel end, over the products), and the first iterations' kernels in
order. Each loop first runs untraced for `--heat` seconds (the GPU at its power cap, as in the bench).
The raw trace stays in DIR (default $OUT or /tmp) for a closer look.
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
import os
import pathlib
import statistics
import sys
import time

import jax
import jax.numpy as jnp

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
from profile_gemm import bench_config, gemm  # noqa: E402


def gpu_kernels(trace_dir: pathlib.Path) -> list[dict]:
    """The GPU's kernels, copies and memsets in the newest trace of `trace_dir` (name, ts, dur: us), by start."""
    runs = sorted((trace_dir / "plugins" / "profile").iterdir(), key=os.path.getmtime)
    (path,) = runs[-1].glob("perfetto_trace.json.gz")
    events = json.load(gzip.open(path))["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"}
    gpu = {pid for pid, name in names.items() if "GPU" in name or "gpu" in name}
    # a stream's kernels, copies and memsets (XLA names its device threads "Stream #N(...)"; the per-op
    # summary lines of other threads are left out)
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
               if e.get("ph") == "M" and e.get("name") == "thread_name" and e["pid"] in gpu}
    streams = {key for key, name in threads.items() if name.startswith("Stream")}
    if not streams:  # another naming: every device thread, and say which
        streams = set(threads)
        print(f"  (no thread named Stream*: taking {sorted(set(threads.values()))[:8]})")
    out = [e for e in events if e.get("ph") == "X" and (e["pid"], e.get("tid")) in streams]
    return sorted(out, key=lambda e: e["ts"])


def summarize(label: str, kernels: list[dict], products: int) -> None:
    if not kernels:
        print(f"{label}: no GPU kernels in the trace")
        return
    durs: dict[str, list[float]] = {}
    gaps: dict[str, list[float]] = {}
    end = None
    for e in kernels:
        durs.setdefault(e["name"], []).append(e["dur"])
        if end is not None:
            gaps.setdefault(e["name"], []).append(e["ts"] - end)
        end = e["ts"] + e["dur"]
    span = kernels[-1]["ts"] + kernels[-1]["dur"] - kernels[0]["ts"]
    busy = sum(e["dur"] for e in kernels)
    print(f"{label}: {len(kernels)} kernels, {span / products:.2f} us per product on the GPU, "
          f"{busy / products:.2f} us of it in kernels")
    for name, d in durs.items():
        g = gaps.get(name, [])
        gap = f"{statistics.median(g):7.2f}" if g else "      -"
        print(f"  {len(d):4d} x {statistics.median(d):8.2f} us, gap before {gap} us  {name[:90]}")
    main = max(durs, key=lambda name: sum(durs[name]))  # the product's kernel: most of the GPU time
    starts = [e["ts"] for e in kernels if e["name"] == main]
    steps = [b - a for a, b in itertools.pairwise(starts)]
    if steps:
        tail = steps[len(steps) // 2:]
        print(f"  {main[:60]}: start to start, median {statistics.median(steps):.2f} us, over the second half "
              f"{statistics.median(tail):.2f} us (min {min(tail):.2f}, max {max(tail):.2f})")
    print("  first kernels (start us from the first, duration, gap):")
    t0, end = kernels[0]["ts"], None
    for e in kernels[:12]:
        gap = "" if end is None else f"{e['ts'] - end:6.2f}"
        print(f"    {e['ts'] - t0:9.2f} {e['dur']:8.2f} {gap:>6}  {e['name'][:80]}")
        end = e["ts"] + e["dur"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("shape", help="MxNxK")
    ap.add_argument("--config", default="", help="a bench_gemm.py --configs entry (default: the table's pick)")
    ap.add_argument("--reps", type=int, default=20, help="products per loop")
    ap.add_argument("--heat", type=float, default=1.0, help="seconds each loop runs untraced before its trace")
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp"), help="where the traces are written")
    args = ap.parse_args()
    m, n, k = map(int, args.shape.split("x"))
    ka, kb = jax.random.split(jax.random.key(0))
    a = jax.random.normal(ka, (m, k), jnp.bfloat16)
    b = jax.random.normal(kb, (k, n), jnp.bfloat16)
    ours = gemm(m, n, k, jnp.bfloat16, **(bench_config(args.config) if args.config else {}))
    products = {"XLA jnp.dot": lambda x, y: x @ y, "ours": ours}
    for label, product in products.items():
        loop = jax.jit(lambda x, y, product=product: jax.lax.fori_loop(
            0, args.reps, lambda i, acc: acc + product(x, y)[0, 0].astype(jnp.float32), jnp.float32(0)))
        for _ in range(3):  # compiled, autotuned
            loop(a, b).block_until_ready()
        # then the same loop for `--heat` seconds: the H200 reaches its 700 W cap within half a second of GEMM,
        # so without this the first runner traced runs at boost clocks and the second at the cap
        # (bench_gemm.py's --heat, the same reason)
        t_end = time.perf_counter() + args.heat
        while time.perf_counter() < t_end:
            loop(a, b).block_until_ready()
        trace_dir = pathlib.Path(args.out) / f"loop_trace_{label.split()[0].lower()}"
        with jax.profiler.trace(str(trace_dir), create_perfetto_trace=True):
            loop(a, b).block_until_ready()
        summarize(f"{args.shape} {label}", gpu_kernels(trace_dir), args.reps)


if __name__ == "__main__":
    main()
