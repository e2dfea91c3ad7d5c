"""The tables `bench_gemm.py` prints: one row per runner with its time, TFLOP/s and ratios to XLA and to cuBLAS in
each timing form, and the `--power` and `--trace` tables."""

from __future__ import annotations

import statistics

XLA = "XLA jnp.dot"  # the baseline runner's name in every table
FORMS = ("loop", "graph", "calls")  # how each runner is timed (bench_gemm's docstring); cuBLAS's loop is its graph
HOST_BOUND = 0.9  # a calls run whose dispatch loop took this share of its time is marked host-bound (`h`)


def row(shape, what, t, name, ref, cub, res, ok, spread, spread_graph):
    """One table row; `t` holds median times per (name, how) and, where measured, the calls runs' median
    host share at ("host", name, "calls")."""
    times = {how: t[name, how] for how in FORMS}
    to_xla = {how: ref[how] / times[how] for how in FORMS}
    to_cublas = {how: (cub[how] / times[how] if cub[how] else None) for how in FORMS}
    host_bound = t.get(("host", name, "calls"), 0.0) >= HOST_BOUND
    return (shape, what, times, to_xla, {"loop": spread[name], "graph": spread_graph[name]}, to_cublas, res, ok,
            host_bound)


def print_table(rows) -> None:
    """One table: for bf16 rows xXLA is the ratio to jnp.dot, for fp8 rows to our fastest bf16 config
    on the same values; xcuBLAS to torch (matmul / _scaled_mm, its graph in both the loop and the graph
    columns), '-' without torch."""
    width = max(21, *(len(what) for _, what, *_ in rows))
    print(f"\n{'shape':>22} {'what':>{width}} {'loop ms':>8} {'TF/s':>6} {'xXLA':>5} {'rounds':>9} {'xcuBL':>5} "
          f"{'graph ms':>8} {'TF/s':>6} {'xXLA':>5} {'rounds':>9} {'xcuBL':>5} "
          f"{'calls ms':>8} {'TF/s':>6} {'xXLA':>5} {'xcuBL':>5}  ok  code")
    fmt = (lambda r: f"{r:5.2f}" if r is not None else "    -")
    for shape, what, times, to_xla, spreads, to_cublas, res, ok, host_bound in rows:
        m, n, k = map(int, shape.split()[0].split("x"))
        f = 2 * m * n * k / 1e12
        cols = []
        for how in ("loop", "graph"):
            lo, hi = spreads[how]
            cols.append(f"{times[how] * 1e3:8.3f} {f / times[how]:6.1f} {to_xla[how]:5.2f} {lo:4.2f}-{hi:4.2f} "
                        f"{fmt(to_cublas[how])}")
        tc = times["calls"]
        print(f"{shape:>22} {what:>{width}} {' '.join(cols)} "
              f"{tc * 1e3:7.3f}{'h' if host_bound else ' '} {f / tc:6.1f} {to_xla['calls']:5.2f} "
              f"{fmt(to_cublas['calls'])}  {'yes' if ok else 'NO'}  {res}")
    if any(row[-1] for row in rows):
        print(f"h: host-bound calls (the loop of dispatches took at least {HOST_BOUND:.0%} of the timed run: the GPU "
              "waited on the host's per-call cost; compare kernels in the loop and graph columns)")


def print_power(rows) -> None:
    """`--power`: each runner's SM clock and power (medians over its rounds) and energy per product, the
    latter's ratio to XLA's in the same form (loop or calls; above 1.0: less energy than XLA's); both from the
    instantaneous power's samples (W, mJ) and from the energy counter's mean power (W(E), mJ(E); `-` where the
    GPU has no counter or it moved too seldom in the window), with the counter's median update period."""
    print("\nSM clock and power while each runner ran (NVML, medians over the rounds) and the energy per product "
          "(power x time per product); W: instantaneous samples, W(E): the energy counter's mean over the window "
          "(upd: its update period); xXLA: XLA's energy / this one's")
    print(f"{'shape':>22} {'what':>34} {'how':>5} {'SM MHz':>7} {'W':>6} {'mJ':>8} {'xXLA':>5} {'W(E)':>6} "
          f"{'mJ(E)':>8} {'xXLA':>5} {'upd ms':>6}")
    def median_of(values) -> float | None:  # over the rounds that have a figure; None where none has
        known = [v for v in values if v is not None]
        return statistics.median(known) if known else None

    def cell(value: float | None, form: str, width: int) -> str:
        return f"{'-':>{width}}" if value is None else f"{value:{width}{form}}"

    watts = {(shape, name, how): median_of(r.watts for r in got) for shape, name, how, got, _ in rows}
    counter_watts = {(shape, name, how): median_of(r.counter_watts for r in got) for shape, name, how, got, _ in rows}
    period = {(shape, name, how): median_of(r.counter_period_s for r in got) for shape, name, how, got, _ in rows}

    def energy_of(power: dict) -> dict:  # mJ per product
        return {(shape, name, how): None if power[shape, name, how] is None else power[shape, name, how] * t * 1e3
                for shape, name, how, _, t in rows}

    def energy_cells(energy: dict, key: tuple) -> str:
        ref, mine = energy.get((key[0], XLA, key[2])), energy[key]
        ratio = None if mine is None or ref is None else ref / mine
        return f"{cell(mine, '.3f', 8)} {cell(ratio, '.2f', 5)}"

    sampled, counted = energy_of(watts), energy_of(counter_watts)
    for shape, name, how, got, _ in rows:
        key = (shape, name, how)
        upd = None if period[key] is None else period[key] * 1e3
        print(f"{shape:>22} {name:>34} {how:>5} {statistics.median(r.sm_mhz for r in got):7.0f} "
              f"{watts[key]:6.1f} {energy_cells(sampled, key)} {cell(counter_watts[key], '.1f', 6)} "
              f"{energy_cells(counted, key)} {cell(upd, '.1f', 6)}")


def print_traced(rows) -> None:
    """`--trace`: the GPU's time per product in each loop (no host in it), ratio to XLA's at the same shape in the
    same form. `rows`: (shape, form, what, step)."""
    print("\nGPU time per product in the loop (jax.profiler trace, medians): the product kernel's duration, its "
          "start-to-start interval (gaps included) and the idle gap before it, the mean interval (a wall clock's view: "
          "host stalls included) and the longest gap; xXLA: to the mean of XLA's two traces in the same form "
          "(first and last); n: the product kernels the trace holds of the run's (CUPTI can miss a recorded graph's)")
    print(f"{'shape':>22} {'what':>34} {'kernel us':>10} {'interval us':>12} {'xXLA':>5} {'gap us':>7} "
          f"{'mean us':>8} {'max gap':>8} {'n':>5}  kernel")
    xla: dict[tuple[str, str], list[float]] = {}
    for shape, form, what, step in rows:
        if what.startswith(XLA) and step is not None:
            xla.setdefault((shape, form), []).append(step.interval_us)
    for shape, form, what, step in rows:
        if step is None:
            print(f"{shape:>22} {what:>34}  no GPU kernels traced")
            continue
        ref = statistics.fmean(xla[shape, form]) if (shape, form) in xla else None
        ratio = f"{ref / step.interval_us:5.2f}" if ref is not None else "    -"
        print(f"{shape:>22} {what:>34} {step.duration_us:10.2f} {step.interval_us:12.2f} {ratio} {step.gap_us:7.2f}"
              f" {step.mean_interval_us:8.2f} {step.max_gap_us:8.2f} {step.count:5d}  {step.kernel[:60]}")
