"""benchmarks/_gpu_power.py without a GPU: the sampler's medians from a stand-in NVML with random readings, the
mean power from a stand-in energy counter that moves in steps, bench_gemm's rounds take one reading per runner and
round while it runs, the power table's energy ratios, and no driver gives None (the bench then refuses --power with
a message)."""

from __future__ import annotations

import statistics
import time

import numpy as np
import pytest

from tests.benchmarks import load_bench


class FakeNvml:
    """Random (MHz, W) readings, recorded so that the test knows what the sampler saw."""

    def __init__(self, rng):
        self.rng, self.seen = rng, []

    def sample(self):
        got = (float(self.rng.uniform(1400, 1980)), float(self.rng.uniform(300, 700)))
        self.seen.append(got)
        return got


class FakeCounter(FakeNvml):
    """FakeNvml with an energy counter: `watts` of mean power, the counter moving every `period_s` (as NVML's does,
    in steps, not continuously), from a random start."""

    counter = True

    def __init__(self, rng, watts: float, period_s: float):
        super().__init__(rng)
        self.watts, self.period_s = watts, period_s
        self.t0, self.start_mj = time.perf_counter(), int(rng.integers(1, 10**9))

    def energy_mj(self):
        steps = (time.perf_counter() - self.t0) // self.period_s
        return self.start_mj + int(steps * self.period_s * self.watts * 1e3)


def test_the_energy_counter_gives_the_windows_mean_power():
    power = load_bench("_gpu_power")
    rng = np.random.default_rng()
    watts, period_s = float(rng.uniform(300, 700)), float(rng.uniform(0.015, 0.03))
    sampler = power.Sampler(FakeCounter(rng, watts, period_s), period_s=0.0005)
    sampler.start()
    time.sleep(0.5)
    reading = sampler.stop()
    # each update is stamped within a sampling period (and a sleep's overshoot) of when it happened: a few ms of
    # ~0.45 s between the first and the last update seen
    assert reading.counter_watts == pytest.approx(watts, rel=0.08)
    assert reading.counter_period_s == pytest.approx(period_s, rel=0.2)
    assert reading.watts == statistics.median(s[1] for s in sampler.nvml.seen[-reading.samples:])


def test_a_window_with_too_few_counter_updates_gives_no_counter_power():
    power = load_bench("_gpu_power")
    rng = np.random.default_rng()
    sampler = power.Sampler(FakeCounter(rng, 500.0, 0.2), period_s=0.001)  # at most 2 updates in 0.25 s
    sampler.start()
    time.sleep(0.25)
    reading = sampler.stop()
    assert reading.samples >= 5 and reading.counter_watts is None and reading.counter_period_s is None


def test_the_sampler_gives_the_medians_of_what_it_sampled():
    power = load_bench("_gpu_power")
    nvml = FakeNvml(np.random.default_rng())
    sampler = power.Sampler(nvml, period_s=0.001)
    sampler.start()
    time.sleep(0.05)
    reading = sampler.stop()
    assert reading.samples == len(nvml.seen) >= 5
    assert reading.sm_mhz == statistics.median(s[0] for s in nvml.seen)
    assert reading.watts == statistics.median(s[1] for s in nvml.seen)
    sampler.start()  # a second window starts empty
    time.sleep(0.01)
    assert sampler.stop().samples == len(nvml.seen) - reading.samples


def test_rounds_take_one_reading_per_runner_and_round():
    import jax.numpy as jnp

    bench, power = load_bench("bench_gemm"), load_bench("_gpu_power")
    sampler = power.Sampler(FakeNvml(np.random.default_rng()), period_s=0.001)
    readings = {}
    x = jnp.ones((8, 8))
    bench.interleaved_times({"one": lambda a, b: a @ b, "two": lambda a, b: a + b}, x, x, reps=2, rounds=3,
                            heat_s=0.02, sampler=sampler, readings=readings)
    assert set(readings) == {"one", "two"} and all(len(v) == 3 and all(r.samples >= 1 for r in v)
                                                   for v in readings.values())


def test_the_power_table_gives_energy_per_product_and_its_ratio_to_xla(capsys):
    report, power = load_bench("_gemm_report"), load_bench("_gpu_power")
    rng = np.random.default_rng()
    w_xla, w_ts = rng.uniform(400, 700, 2)
    t_xla, t_ts = rng.uniform(1e-4, 1e-3, 2)
    c_xla, c_ts = rng.uniform(400, 700, 2)  # the energy counter's mean powers
    rows = [("64x64x64", "XLA jnp.dot", "loop", [power.Reading(1500.0, w_xla, 10, c_xla, 0.02)], t_xla),
            ("64x64x64", "ts 128x256x64/4/g8", "loop", [power.Reading(1450.0, w_ts, 10, c_ts, 0.02),
                                                          power.Reading(1450.0, w_ts, 10)], t_ts)]
    report.print_power(rows)
    line = capsys.readouterr().out.strip().splitlines()[-1].split()
    assert line[-7:-5] == [f"{w_ts:.1f}", f"{w_ts * t_ts * 1e3:.3f}"]
    assert float(line[-5]) == pytest.approx((w_xla * t_xla) / (w_ts * t_ts), abs=0.006)
    # the counter's figures: the round without one is left out of the median, not counted as zero
    assert line[-4:-2] == [f"{c_ts:.1f}", f"{c_ts * t_ts * 1e3:.3f}"] and line[-1] == "20.0"
    assert float(line[-2]) == pytest.approx((c_xla * t_xla) / (c_ts * t_ts), abs=0.006)


def test_the_power_table_marks_runners_without_counter_readings(capsys):
    report, power = load_bench("_gemm_report"), load_bench("_gpu_power")
    rows = [("64x64x64", "XLA jnp.dot", "loop", [power.Reading(1500.0, 600.0, 10)], 1e-4),
            ("64x64x64", "ts 128x256x64/4/g8", "loop", [power.Reading(1450.0, 650.0, 10, 640.0, 0.05)], 1e-4)]
    report.print_power(rows)
    xla, ours = capsys.readouterr().out.strip().splitlines()[-2:]
    assert xla.split()[-4:] == ["-", "-", "-", "-"]
    assert ours.split()[-4:] == ["640.0", "64.000", "-", "50.0"]  # no XLA counter figure: no ratio


def test_without_a_driver_there_is_no_nvml(monkeypatch):
    power = load_bench("_gpu_power")

    def no_library(name):
        raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.setattr(power.ctypes, "CDLL", no_library)
    assert power.open_nvml() is None
