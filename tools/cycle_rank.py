"""Elapsed cycles of XLA's `jnp.dot` and of our GEMM kernels at one shape, under Nsight Compute: a ranking of
tile configurations finer than bench_gemm.py's timed runs can give.

Why: at 16384 x 8192 x 1024 the products run at the same clock (benchmarks/NOTES.md, eighteenth and forty-third
sessions: cycle-bound there) and the gap to XLA is 2-4% in elapsed cycles, while two timed runs of the same kernels
differ by 2-5%: a change worth 0.5-1% (an edge tile's narrower products, a tile order) cannot be seen in the timed
runs, but it can in the cycles a kernel takes, which ncu counts to ~0.1% from one launch to the next. The ranking
says which changes are worth a timed run; the timed run (bench_gemm.py, at the card's own clocks) decides.

Two modes, run by tools/cycle_rank.sh (`STEPS=cycle_rank` in tools/gpu_test.sh):

    ncu --csv ... python tools/cycle_rank.py run 16384x8192x1024 --configs table,128x192x64/4/g8/p/pp --rounds 5
    python tools/cycle_rank.py report ncu.csv --configs table,128x192x64/4/g8/p/pp --rounds 5

`run` builds XLA's product and each configuration's kernel (bench_gemm.py's --configs entries, their code
generator switches set while each is built), checks every one against a float32 product (but the diagnostics
that do not compute it, `/nostore` and `/fixk`: codegen/gemm_sm90_probe.py, named as such), then launches
`rounds` rounds of [XLA, config 1, config 2, ...], one product each, inside a profiler range
(cuProfilerStart/Stop: ncu's --profile-from-start off sees only those). `report` reads ncu's CSV (one row per
kernel and metric), gives each launch to its runner in that order and prints, per runner, the median elapsed
cycles (and their spread over the rounds), the ratio to XLA's, the ratio of the means and the count of slow rounds
(a kernel can have a fast mode and slow launches: the median ranks the first, a timed loop pays both), the clock and
the duration.
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import io
import pathlib
import statistics
import sys
from dataclasses import dataclass

ROOT = pathlib.Path(__file__).resolve().parents[1]
XLA = "XLA jnp.dot"
ELAPSED = "gpc__cycles_elapsed.max"  # Speed Of Light's "Elapsed Cycles"
DURATION = "gpu__time_duration.sum"  # ns
# the busiest SM's active cycles, and its tensor pipe's: the cycles left between them are the SM's own idling
SM_ACTIVE = "sm__cycles_active.max"
TENSOR = "sm__pipe_tensor_op_hmma_cycles_active.max"
METRICS = (ELAPSED, DURATION, SM_ACTIVE, TENSOR)
# A launch over its runner's fastest by more than this is a slow round: the medians hide them, a timed loop's mean
# pays them (the pick at 16384 x 8192 x 1024 had 562-621 k cycles in 11 of 30 launches where its fastest took 547 k:
# benchmarks/NOTES.md, forty-sixth session)
SLOW = 0.02


def runner_names(configs: list[str]) -> list[str]:
    """The runners of one round, in launch order: XLA's product, then each configuration."""
    if len(set(configs)) != len(configs):
        raise ValueError(f"--configs names an entry twice: {configs}")
    return [XLA, *configs]


@dataclass(frozen=True)
class Launch:
    kernel: str
    metrics: dict[str, float]


def read_ncu_csv(text: str) -> list[Launch]:
    """ncu's --csv details output (one row per kernel launch and metric; lines before the header, ncu's own ==PROF==
    notes and the workload's output, skipped) as launches in profiling order. Values printed with thousands
    separators (`534,921`) are read as numbers; a metric ncu could not collect (`n/a`) is left out."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        raise ValueError("no ncu CSV header (a line starting with \"ID\") in the file: did ncu profile anything?")
    launches: dict[str, Launch] = {}
    for row in csv.DictReader(io.StringIO("\n".join(lines[start:]))):
        if not row.get("ID", "").strip().isdigit():
            continue  # a trailing ==PROF== or workload line after the table
        launch = launches.setdefault(row["ID"], Launch(row["Kernel Name"], {}))
        value = row["Metric Value"].replace(",", "").strip()
        try:
            launch.metrics[row["Metric Name"]] = float(value)
        except ValueError:
            continue
    return [launches[i] for i in sorted(launches, key=int)]


def assign(launches: list[Launch], names: list[str], rounds: int) -> dict[str, list[Launch]]:
    """Each launch to its runner, in `run`'s order: rounds x names, one kernel a product. Refuses anything else (a
    runner that launched two kernels, a launch ncu missed) with the kernels' names, rather than guess."""
    want = rounds * len(names)
    if len(launches) != want:
        seen = "\n  ".join(f"{i}: {launch.kernel[:100]}" for i, launch in enumerate(launches))
        raise ValueError(f"{len(launches)} kernels profiled, {want} expected ({rounds} rounds of {len(names)} "
                         f"runners, one kernel each):\n  {seen}")
    by_runner: dict[str, list[Launch]] = {name: [] for name in names}
    for i, launch in enumerate(launches):
        by_runner[names[i % len(names)]].append(launch)
    for name, got in by_runner.items():
        kernels = {launch.kernel for launch in got}
        if len(kernels) != 1:
            raise ValueError(f"{name}'s launches ran different kernels: {sorted(kernels)}")
    return by_runner


def report_lines(by_runner: dict[str, list[Launch]]) -> list[str]:
    """The ranking: per runner, median elapsed cycles (min-max over the rounds), ours over XLA's (below 1: fewer
    cycles than XLA's kernel), the same ratio of the means (what a timed loop sees) and the slow rounds (over the
    runner's fastest by more than SLOW), median SM clock and duration, and where ncu gave them the busiest SM's
    tensor-pipe cycles, its active cycles less those (`act-tens`: the pipe idle while a block ran) and the elapsed
    cycles less its active ones (`el-act`: the kernel's start and end without a block there); fewest cycles first
    after XLA's row."""
    def med(launches: list[Launch], metric: str) -> float | None:
        values = [launch.metrics[metric] for launch in launches if metric in launch.metrics]
        return statistics.median(values) if values else None

    xla = med(by_runner[XLA], ELAPSED)
    if xla is None:
        raise ValueError(f"ncu gave no {ELAPSED} for XLA's kernel")
    xla_mean = statistics.mean(launch.metrics[ELAPSED] for launch in by_runner[XLA] if ELAPSED in launch.metrics)
    rows = []
    for name, launches in by_runner.items():
        cycles = [launch.metrics[ELAPSED] for launch in launches if ELAPSED in launch.metrics]
        if not cycles:
            raise ValueError(f"ncu gave no {ELAPSED} for {name}")
        mid, duration = statistics.median(cycles), med(launches, DURATION)
        active, tensor = med(launches, SM_ACTIVE), med(launches, TENSOR)
        fastest = min(cycles)
        slow = sum(c > fastest * (1 + SLOW) for c in cycles)
        rows.append((name != XLA, mid, name, fastest, max(cycles), statistics.mean(cycles) / xla_mean,
                     f"{slow}/{len(cycles)}", duration, active, tensor, launches[0].kernel))
    rows.sort()
    out = [f"{'runner':<44} {'cycles':>10} {'min-max':>19} {'x XLA':>6} {'mean':>6} {'slow':>5} {'GHz':>5} "
           f"{'us':>8} {'tensor':>9} {'act-tens':>8} {'el-act':>7}  kernel"]
    for _, mid, name, lo, hi, mean_ratio, slow, duration, active, tensor, kernel in rows:
        ghz = f"{mid / duration:.2f}" if duration else "-"
        us = f"{duration / 1e3:.1f}" if duration else "-"
        # the busiest SM: its tensor pipe's busy cycles (hmma counts per sub-partition: four a cycle when all four
        # issue), its active cycles the pipe was idle, and the kernel's cycles the SM had no block
        busy = f"{tensor / 4:,.0f}" if tensor else "-"
        idle = f"{active - tensor / 4:,.0f}" if active and tensor else "-"
        outside = f"{mid - active:,.0f}" if active else "-"
        out.append(f"{name:<44} {mid:>10,.0f} {f'{lo:,.0f}-{hi:,.0f}':>19} {mid / xla:>6.3f} {mean_ratio:>6.3f} "
                   f"{slow:>5} {ghz:>5} {us:>8} {busy:>9} {idle:>8} {outside:>7}  {kernel[:60]}")
    return out


def extra_lines(by_runner: dict[str, list[Launch]]) -> list[str]:
    """The medians of every other metric ncu gave (tools/gpu_test.sh's CYCLE_METRICS adds them), per runner."""
    names = sorted({m for launches in by_runner.values() for launch in launches for m in launch.metrics} -
                   set(METRICS))
    if not names:
        return []
    out = [f"{'runner':<44} " + " ".join(f"{m[:32]:>32}" for m in names)]
    for runner, launches in by_runner.items():
        cells = []
        for m in names:
            values = [launch.metrics[m] for launch in launches if m in launch.metrics]
            cells.append(f"{statistics.median(values):>32,.0f}" if values else f"{'-':>32}")
        out.append(f"{runner:<44} " + " ".join(cells))
    return out


def bench_module():
    """benchmarks/bench_gemm.py (its --configs parser and code generator settings: one definition)."""
    sys.path.insert(0, str(ROOT / "examples"))
    sys.path.insert(0, str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location("bench_gemm", ROOT / "benchmarks" / "bench_gemm.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(shape: str, configs: list[str], rounds: int) -> None:
    import jax
    import jax.numpy as jnp
    from profile_gemm import profiled_range

    bench = bench_module()
    from _gemm_configs import NOT_THE_PRODUCT
    from gemm import TOLERANCE, gemm

    m, n, k = map(int, shape.split("x"))
    entries = bench.shape_configs(",".join(configs), m, n, k)  # `table` -> the pick's entry, marked /table
    names = runner_names(configs)
    ka, kb = jax.random.split(jax.random.key(1))
    a = jax.random.normal(ka, (m, k), jnp.bfloat16)
    b = jax.random.normal(kb, (k, n), jnp.bfloat16)
    want = jnp.dot(a, b, preferred_element_type=jnp.float32)
    scale = float(jnp.max(jnp.abs(want)))
    runners = {XLA: jax.jit(lambda x, y: x @ y)}
    for name, entry in zip(configs, entries):
        cfg, switches = bench.parse_config(entry)
        runners[name] = bench.with_settings("auto", switches, jax.jit(gemm(m, n, k, jnp.bfloat16, **cfg)))
        print(f"{name}: {entry}", flush=True)
    for name in names:  # built (and XLA's autotuning done) before the range; every product checked
        for _ in range(3):
            got = runners[name](a, b).block_until_ready()
        probes = sorted(NOT_THE_PRODUCT & set(name.split("/")))
        if probes:
            print(f"{name}: a diagnostic ({', '.join(probes)}): its C is not the product, not checked", flush=True)
            continue
        err = float(jnp.max(jnp.abs(got.astype(jnp.float32) - want)))
        print(f"{name}: max |C - float32 product| = {err:.3g} (max |C| {scale:.3g})", flush=True)
        if not err <= TOLERANCE["bfloat16"] * scale:
            raise SystemExit(f"{name} differs from the float32 product beyond bf16's tolerance: not profiled")
    with profiled_range():
        for _ in range(rounds):
            for name in names:
                runners[name](a, b).block_until_ready()
    print(f"profiled {rounds} rounds of {len(names)} runners: {', '.join(names)}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=("run", "report", "metrics"), help="metrics: print the ncu --metrics list")
    ap.add_argument("what", nargs="?", help="run: the shape, MxNxK; report: ncu's CSV file")
    ap.add_argument("--configs", default="table", help="bench_gemm.py --configs entries, comma-separated (`table`)")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    if args.mode == "metrics":
        print(",".join(METRICS))
        return
    if args.what is None:
        ap.error(f"{args.mode} needs {'the shape' if args.mode == 'run' else 'the CSV file'}")
    configs = args.configs.split(",")
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    if args.mode == "run":
        sys.path.insert(0, str(ROOT / "tools"))
        run(args.what, configs, args.rounds)
        return
    try:
        by_runner = assign(read_ncu_csv(pathlib.Path(args.what).read_text()), runner_names(configs), args.rounds)
        print("\n".join(report_lines(by_runner)))
        extra = extra_lines(by_runner)
        if extra:
            print("\n".join(extra))
    except ValueError as err:
        raise SystemExit(f"cycle_rank report: {err}") from None


if __name__ == "__main__":
    main()
