"""benchmarks/_gpu_trace.py on traces written here in the layout `jax.profiler` writes (perfetto JSON under
plugins/profile/<run>/): only a GPU's streams count, the product kernel is the one with the most GPU time,
and its medians (duration, start-to-start interval, idle gap before it) come out of fresh random timings."""

from __future__ import annotations

import gzip
import json
import os
import statistics
import time

import numpy as np

from tests.benchmarks import load_bench


def _write(tmp_path, events, run="2026_12_03_00_00_00"):
    folder = tmp_path / "plugins" / "profile" / run
    folder.mkdir(parents=True)
    with gzip.open(folder / "perfetto_trace.json.gz", "wt") as f:
        json.dump({"traceEvents": events}, f)
    return tmp_path


def _meta(pid, tid, process, thread):
    return [{"ph": "M", "pid": pid, "name": "process_name", "args": {"name": process}},
            {"ph": "M", "pid": pid, "tid": tid, "name": "thread_name", "args": {"name": thread}}]


def test_the_product_kernel_and_its_medians_come_from_the_gpu_streams_only(tmp_path):
    trace = load_bench("_gpu_trace")
    rng = np.random.default_rng()
    n = int(rng.integers(20, 40))
    durs = rng.uniform(30.0, 45.0, n)  # the product kernel
    gaps = rng.uniform(0.5, 3.0, n)  # idle before it
    gaps[rng.integers(1, n)] = rng.uniform(60.0, 90.0)  # one host stall: in the mean and the maximum, not the medians
    events = [*_meta(1, 10, "/host:CPU", "python"), *_meta(2, 20, "/device:GPU:0", "Stream #14(Compute)"),
              {"ph": "M", "pid": 2, "tid": 21, "name": "thread_name", "args": {"name": "XLA Ops"}}]
    t = 100.0
    starts = []
    for d, g in zip(durs, gaps):
        t += g
        starts.append(t)
        events.append({"ph": "X", "pid": 2, "tid": 20, "ts": t, "dur": float(d), "name": "ts_gemm_kernel"})
        events.append({"ph": "X", "pid": 2, "tid": 21, "ts": t, "dur": 5 * float(d), "name": "op summary"})
        t += d
        events.append({"ph": "X", "pid": 2, "tid": 20, "ts": t, "dur": 1.0, "name": "loop_add_fusion"})
        t += 1.0
    events.append({"ph": "X", "pid": 1, "tid": 10, "ts": 0.0, "dur": 1e6, "name": "PjitFunction(loop)"})
    rng.shuffle(events)  # the reader sorts by start
    got = trace.gpu_events(_write(tmp_path, events))
    assert [e["ts"] for e in got] == sorted(e["ts"] for e in got) and len(got) == 2 * n  # streams only
    step = trace.product_step(got)
    assert step.kernel == "ts_gemm_kernel"
    assert np.isclose(step.duration_us, statistics.median(durs))
    assert np.isclose(step.interval_us, statistics.median(np.diff(starts)))
    assert np.isclose(step.gap_us, statistics.median(gaps[1:]))  # the first has nothing before it
    assert np.isclose(step.mean_interval_us, (starts[-1] - starts[0]) / (n - 1))
    assert np.isclose(step.max_gap_us, max(gaps[1:]))
    assert step.count == n  # every product kernel of the loop


def test_a_trace_without_a_gpu_has_no_step(tmp_path):
    trace = load_bench("_gpu_trace")
    events = [*_meta(1, 10, "/host:CPU", "python"),
              {"ph": "X", "pid": 1, "tid": 10, "ts": 0.0, "dur": 5.0, "name": "PjitFunction(loop)"}]
    got = trace.gpu_events(_write(tmp_path, events))
    assert got == [] and trace.product_step(got) is None


def test_the_newest_run_is_read(tmp_path):
    trace = load_bench("_gpu_trace")
    old = [*_meta(2, 20, "/device:GPU:0", "Stream #1"),
           {"ph": "X", "pid": 2, "tid": 20, "ts": 0.0, "dur": 9.0, "name": "old_kernel"}]
    _write(tmp_path, old, run="a_old")
    os.utime(tmp_path / "plugins" / "profile" / "a_old", (time.time() - 100, time.time() - 100))
    new = [*_meta(2, 20, "/device:GPU:0", "Stream #1"),
           {"ph": "X", "pid": 2, "tid": 20, "ts": 0.0, "dur": 4.0, "name": "new_kernel"}]
    _write(tmp_path, new, run="b_new")
    assert [e["name"] for e in trace.gpu_events(tmp_path)] == ["new_kernel"]


def test_only_the_last_loop_is_read_after_the_heat_in_the_same_trace():
    """`traced` runs the loop for a while and then once more inside one trace: the heat's products (random
    durations of their own, several loops of them) must not enter the figures of the last loop."""
    trace = load_bench("_gpu_trace")
    rng = np.random.default_rng()
    reps, heat_loops = int(rng.integers(5, 15)), int(rng.integers(2, 6))
    t, events, last = 0.0, [], []
    for loop in range(heat_loops + 1):
        for _ in range(reps):
            dur = float(rng.uniform(20.0, 30.0) if loop < heat_loops else rng.uniform(40.0, 50.0))
            t += float(rng.uniform(0.5, 2.0))
            events.append({"ts": t, "dur": dur, "name": "ts_gemm_kernel"})
            if loop == heat_loops:
                last.append((t, dur))
            t += dur
            events.append({"ts": t, "dur": 1.0, "name": "loop_add_fusion"})
            t += 1.0
        t += float(rng.uniform(50.0, 100.0))  # the host between loops
    got = trace.last_run(events, reps)
    assert got[0]["ts"] == last[0][0] and len(got) == 2 * reps
    step = trace.product_step(got)
    assert np.isclose(step.duration_us, statistics.median(d for _, d in last))
    assert np.isclose(step.mean_interval_us, (last[-1][0] - last[0][0]) / (reps - 1))
    assert trace.last_run(events[: 2 * reps], reps) == events[: 2 * reps]  # no heat: everything


def test_the_measured_run_starts_at_its_host_annotation(tmp_path):
    """GPU events from the LAST_RUN annotation's start on are the measured run's, however many product kernels
    the earlier runs left in the trace or the measured run lacks."""
    trace = load_bench("_gpu_trace")
    rng = np.random.default_rng()
    events = [*_meta(1, 10, "/host:CPU", "python"), *_meta(2, 20, "/device:GPU:0", "Stream #14(Compute)")]
    t, runs = 0.0, []
    for _ in range(int(rng.integers(2, 5))):  # heat runs, then the measured one
        kernels = int(rng.integers(3, 9))
        start = t
        for _ in range(kernels):
            t += float(rng.uniform(1.0, 3.0))
            events.append({"ph": "X", "pid": 2, "tid": 20, "ts": t, "dur": 30.0, "name": "ts_gemm_kernel"})
            t += 30.0
        runs.append((start, kernels))
        t += 50.0  # the host's wait and next dispatch between runs
    last_start, last_kernels = runs[-1]
    events.append({"ph": "X", "pid": 1, "tid": 10, "ts": last_start - 5.0, "dur": t - last_start,
                   "name": trace.LAST_RUN})
    folder = _write(tmp_path, events)
    span = trace.measured_run_span(folder)
    start = span[0]
    assert start == last_start - 5.0
    assert np.allclose(span, (last_start - 5.0, last_start - 5.0 + (t - last_start)))
    got = trace.gpu_events(folder, after=start)
    assert len(got) == last_kernels and min(e["ts"] for e in got) > last_start
    assert len(trace.gpu_events(folder)) == sum(k for _, k in runs)


def test_a_trace_without_the_annotation_has_no_measured_start(tmp_path):
    trace = load_bench("_gpu_trace")
    events = [*_meta(2, 20, "/device:GPU:0", "Stream #1"),
              {"ph": "X", "pid": 2, "tid": 20, "ts": 0.0, "dur": 4.0, "name": "k"}]
    folder = _write(tmp_path, events)
    assert trace.measured_run_span(folder) is None


def test_the_traced_table_says_how_many_product_kernels_it_read(capsys):
    trace, report = load_bench("_gpu_trace"), load_bench("_gemm_report")
    rng = np.random.default_rng()
    counts = [int(c) for c in rng.integers(2, 500, 2)]
    rows = [("128x8192x8192", "loop", name, trace.Step("k", 40.0, 41.0, 1.0, 41.5, 3.0, c))
            for name, c in zip(("XLA jnp.dot", "ts pick"), counts)]
    report.print_traced(rows)
    lines = capsys.readouterr().out.splitlines()
    assert lines[-2].split()[-2] == str(counts[0]) and lines[-1].split()[-2] == str(counts[1])


def test_the_traced_table_compares_each_form_with_xlas_in_that_form(capsys):
    """A graph row's ratio is to XLA's graph traces, a loop row's to XLA's loop traces (not to a mean of both)."""
    trace, report = load_bench("_gpu_trace"), load_bench("_gemm_report")
    rng = np.random.default_rng()
    xla_loop, xla_graph, ours = (float(v) for v in rng.uniform(20.0, 60.0, 3))

    def step(interval):
        return trace.Step("k", interval - 1.0, interval, 1.0, interval, 3.0, 16)

    rows = [("128x8192x8192", "loop", "XLA jnp.dot", step(xla_loop)),
            ("128x8192x8192", "graph", "XLA jnp.dot graph", step(xla_graph)),
            ("128x8192x8192", "loop", "ts pick", step(ours)),
            ("128x8192x8192", "graph", "ts pick graph", step(ours))]
    report.print_traced(rows)
    lines = capsys.readouterr().out.splitlines()
    ratios = {line[23:57].strip(): float(line[57:].split()[2]) for line in lines[-4:]}  # what -> xXLA
    assert abs(ratios["ts pick"] - xla_loop / ours) <= 0.006
    assert abs(ratios["ts pick graph"] - xla_graph / ours) <= 0.006
