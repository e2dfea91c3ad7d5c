"""benchmarks/_gpu_power.py without a GPU: the sampler's medians from a stand-in NVML with random readings,
bench_gemm's rounds take one reading per runner and round while it runs, the power table's energy ratio, and
no driver gives None (the bench then refuses --power with a message)."""

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
    rows = [("64x64x64", "XLA jnp.dot", "loop", [power.Reading(1500.0, w_xla, 10)], t_xla),
            ("64x64x64", "ts 128x256x64/4/g8", "loop", [power.Reading(1450.0, w_ts, 10)], t_ts)]
    report.print_power(rows)
    line = capsys.readouterr().out.strip().splitlines()[-1].split()
    assert line[-3:-1] == [f"{w_ts:.1f}", f"{w_ts * t_ts * 1e3:.3f}"]
    assert float(line[-1]) == pytest.approx((w_xla * t_xla) / (w_ts * t_ts), abs=0.006)


def test_without_a_driver_there_is_no_nvml(monkeypatch):
    power = load_bench("_gpu_power")

    def no_library(name):
        raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.setattr(power.ctypes, "CDLL", no_library)
    assert power.open_nvml() is None
