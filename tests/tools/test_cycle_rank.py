"""tools/cycle_rank.py: ncu's CSV read into launches, each launch given to its runner in the workload's order, the
ranking's ratios; and its workload run through the interpreter (every runner checked against the float32 product
before anything is profiled)."""

from __future__ import annotations

import csv
import io
import random
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import load_tool

rank = load_tool("cycle_rank")
ROOT = Path(__file__).resolve().parents[2]
HEADER = ["ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream", "Block Size",
          "Grid Size", "Device", "CC", "Section Name", "Metric Name", "Metric Unit", "Metric Value"]


def ncu_csv(launches: list[tuple[str, dict[str, str]]], before: str = "") -> str:
    """ncu's --csv details output for these launches (kernel name, metric -> printed value), after `before`."""
    out = io.StringIO()
    writer = csv.writer(out, quoting=csv.QUOTE_ALL, lineterminator="\n")
    writer.writerow(HEADER)
    for i, (kernel, metrics) in enumerate(launches):
        for name, value in metrics.items():
            writer.writerow([i, 4242, "python3", "127.0.0.1", kernel, 1, 7, "(384, 1, 1)", "(132, 1, 1)", 0, "9.0",
                             "Command line profiler metrics", name, "cycle", value])
    return before + out.getvalue()


def launches_of(cycles: dict[str, list[float]], rounds: int) -> list[tuple[str, dict[str, str]]]:
    """Launches in the workload's order (rounds of XLA then each config), elapsed cycles printed with separators."""
    names = list(cycles)
    return [(f"kernel_{name.replace(' ', '_')}", {rank.ELAPSED: f"{cycles[name][r]:,.0f}",
                                                  rank.DURATION: f"{cycles[name][r] / 1.5:.0f}"})
            for r in range(rounds) for name in names]


def test_the_csv_is_read_after_the_workload_lines_with_separators_and_gaps():
    text = ncu_csv([("nvjet_x", {rank.ELAPSED: "534,921", rank.DURATION: "336500", rank.TENSOR: "n/a"}),
                    ("ts_gemm", {rank.ELAPSED: "544,216"})],
                   before='==PROF== Connected to process 4242\ntable: 128x192x64/4/g8/p/pp/gc/table\n')
    got = rank.read_ncu_csv(text)
    assert [launch.kernel for launch in got] == ["nvjet_x", "ts_gemm"]
    assert got[0].metrics == {rank.ELAPSED: 534921.0, rank.DURATION: 336500.0}  # n/a left out
    assert got[1].metrics == {rank.ELAPSED: 544216.0}
    with pytest.raises(ValueError, match="no ncu CSV header"):
        rank.read_ncu_csv("==PROF== Connected\n==ERROR== the application returned an error\n")


def test_launches_go_to_their_runners_and_the_ratio_is_to_xlas_median():
    rng = random.Random(3)
    rounds = 5
    names = rank.runner_names(["table", "128x192x64/4/g8/p/pp"])
    base = {rank.XLA: 535_000, "table": 556_000, "128x192x64/4/g8/p/pp": 531_000}
    cycles = {name: [base[name] * (1 + rng.uniform(-0.002, 0.002)) for _ in range(rounds)] for name in names}
    by_runner = rank.assign(rank.read_ncu_csv(ncu_csv(launches_of(cycles, rounds))), names, rounds)
    for name in names:
        assert [launch.metrics[rank.ELAPSED] for launch in by_runner[name]] == [round(c) for c in cycles[name]]
    lines = rank.report_lines(by_runner)
    assert lines[1].startswith(rank.XLA)  # XLA's row first, then fewest cycles first
    assert lines[2].startswith("128x192x64/4/g8/p/pp") and lines[3].startswith("table")
    median = {name: sorted(round(c) for c in cycles[name])[rounds // 2] for name in names}
    ratio = float(lines[3].split()[3])
    assert ratio == pytest.approx(median["table"] / median[rank.XLA], abs=6e-4)
    assert f"{median['table']:,}" in lines[3]
    assert " 1.50 " in lines[3]  # the clock: cycles over the duration in ns


def test_slow_rounds_are_counted_and_the_means_ratio_pays_them():
    """A runner whose median is XLA's x1.02 but two of its five rounds 1.15x: the median ranks it as the fast mode,
    the mean's ratio and the slow count show the tail a timed loop pays."""
    cycles = {rank.XLA: [536_000, 535_000, 537_000, 536_500, 535_500],
              "table": [547_000, 629_000, 548_000, 620_000, 546_500],
              "steady": [550_000, 551_000, 549_500, 550_500, 551_200]}
    names = rank.runner_names(["table", "steady"])
    by_runner = rank.assign(rank.read_ncu_csv(ncu_csv(launches_of(cycles, 5))), names, 5)
    # each row's cells after its runner's name: cycles, min-max, x XLA, mean, slow, ...
    rows = {name: line[len(name):].split() for line in rank.report_lines(by_runner)[1:] for name in names
            if line.startswith(name)}
    xla_mean = sum(cycles[rank.XLA]) / 5
    assert float(rows["table"][2]) == pytest.approx(548_000 / 536_000, abs=6e-4)  # the median: the fast mode
    assert float(rows["table"][3]) == pytest.approx(sum(cycles["table"]) / 5 / xla_mean, abs=6e-4)
    assert rows["table"][4] == "2/5" and rows["steady"][4] == "0/5" and rows[rank.XLA][4] == "0/5"
    assert float(rows["steady"][3]) < float(rows["table"][3])


def test_the_busiest_sms_idle_cycles_are_split_into_inside_and_outside_its_block():
    metrics = {rank.ELAPSED: "560,000", rank.DURATION: "350000", rank.SM_ACTIVE: "550,000", rank.TENSOR: "2,064,384"}
    xla = {rank.ELAPSED: "536,000", rank.DURATION: "340000", rank.SM_ACTIVE: "530,500", rank.TENSOR: "2,048,000"}
    by_runner = rank.assign(rank.read_ncu_csv(ncu_csv([("nvjet", xla), ("ts_gemm", metrics)])),
                            rank.runner_names(["table"]), 1)
    xla_row, ours = rank.report_lines(by_runner)[1:]
    assert xla_row.split()[-4:-1] == ["512,000", "18,500", "5,500"]
    assert ours.split()[-4:-1] == ["516,096", "33,904", "10,000"]  # tensor / 4, active - that, elapsed - active


def test_a_count_that_does_not_fit_the_rounds_is_refused_with_the_kernels_named():
    names = rank.runner_names(["table"])
    launches = rank.read_ncu_csv(ncu_csv(launches_of({rank.XLA: [1.0] * 3, "table": [2.0] * 3}, 3)[:-1]))
    with pytest.raises(ValueError, match=r"(?s)5 kernels profiled, 6 expected.*4: kernel_XLA_jnp\.dot"):
        rank.assign(launches, names, 3)
    mixed = launches_of({rank.XLA: [1.0] * 2, "table": [2.0] * 2}, 2)
    mixed[3] = ("another_kernel", mixed[3][1])
    with pytest.raises(ValueError, match="table's launches ran different kernels"):
        rank.assign(rank.read_ncu_csv(ncu_csv(mixed)), names, 2)
    with pytest.raises(ValueError, match="names an entry twice"):
        rank.runner_names(["table", "table"])


def test_the_report_command_fails_loudly_on_a_broken_profile(tmp_path):
    bad = tmp_path / "ncu.csv"
    bad.write_text("==PROF== Connected to process 1\nSegmentation fault\n")
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "cycle_rank.py"), "report", str(bad),
                           "--configs", "table"], capture_output=True, text=True)
    assert done.returncode != 0 and "no ncu CSV header" in done.stderr


def test_the_workload_checks_and_launches_every_runner_on_the_cpu():
    """The run mode through the interpreter (no GPU: no profiler range, the same builds and checks)."""
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "cycle_rank.py"), "run", "192x200x96", "--configs",
                           "table,128x192x64/4/g8/p/pp/gc/el/edge,128x192x64/4/g8/p/pp/gc/nostore", "--rounds", "1"],
                          capture_output=True, text=True, env={"JAX_PLATFORMS": "cpu", "PATH": "/usr/bin:/bin"},
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "profiled 1 rounds of 4 runners" in done.stdout
    assert done.stdout.count("max |C - float32 product|") == 3  # the diagnostic is named, not checked
    assert "128x192x64/4/g8/p/pp/gc/nostore: a diagnostic (nostore): its C is not the product, not checked" in \
        done.stdout


def test_other_metrics_are_reported_by_their_medians():
    launches = [("nvjet", {rank.ELAPSED: "536,000", "dram__bytes_read.sum": "149,000,000"}),
                ("ts_gemm", {rank.ELAPSED: "560,000", "dram__bytes_read.sum": "218,000,000"}),
                ("nvjet", {rank.ELAPSED: "537,000", "dram__bytes_read.sum": "151,000,000"}),
                ("ts_gemm", {rank.ELAPSED: "561,000", "dram__bytes_read.sum": "216,000,000"})]
    by_runner = rank.assign(rank.read_ncu_csv(ncu_csv(launches)), rank.runner_names(["table"]), 2)
    header, xla, ours = rank.extra_lines(by_runner)
    assert "dram__bytes_read.sum" in header
    assert xla.split()[-1] == "150,000,000" and ours.split()[-1] == "217,000,000"
    assert rank.extra_lines(rank.assign(rank.read_ncu_csv(ncu_csv(launches_of(
        {rank.XLA: [1.0], "table": [2.0]}, 1))), rank.runner_names(["table"]), 1)) == []
