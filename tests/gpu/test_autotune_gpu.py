"""Autotuning on the GPU (jax_tilescale/tune, examples/gemm.py's `gemm(..., autotune=True)`): LoopTimer's figures
rank products by their size, the GEMM's candidates are timed, the one kept (the earliest within ts.tune.MARGIN of
the fastest) is right and on disk, and a later call reads it back without timing."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_tilescale as ts
from tests.conftest import load_example

gemm_example = load_example("gemm")
QUICK = ts.tune.LoopTimer(rounds=2, heat_s=0.05, min_run_s=0.005)


def assert_kept_by_the_rule(tuned: ts.tune.Tuned) -> None:
    """Timed here, and the choice is autotune's rule: the earliest candidate (in the order given, which `seconds`
    keeps) within ts.tune.MARGIN of the fastest median, so a candidate put after the table's pick that is faster by
    less than the margin does not take its place."""
    assert tuned.source == "timed", tuned.source
    fastest = min(tuned.seconds.values())
    within = [label for label, s in tuned.seconds.items() if s <= fastest * (1 + ts.tune.MARGIN)]
    assert tuned.label == within[0], (tuned.label, tuned.seconds)


@pytest.fixture(autouse=True)
def own_records(tmp_path, monkeypatch):
    """Tuning records in a directory of this test's own (the kernels' cubins are rebuilt there too)."""
    monkeypatch.setenv("TILESCALE_CACHE_DIR", str(tmp_path / "cache"))


def test_loop_timer_on_the_gpu_ranks_products_by_their_work():
    rng = np.random.default_rng(3)
    small = jnp.asarray(rng.standard_normal((1024, 1024)), jnp.bfloat16)
    big = jnp.asarray(rng.standard_normal((8192, 8192)), jnp.bfloat16)
    times = QUICK({"small": lambda a, b: a @ a, "big": lambda a, b: b @ b}, (small, big))
    # 512x the multiply-adds (~4 us against ~1.6 ms on an H200): well over 8x the time whatever the clocks and the
    # loop's own cost per iteration do
    assert np.median(times["big"]) > 8 * np.median(times["small"]) > 0


@pytest.mark.parametrize("m,n,k", [(128, 4096, 4096), (2048, 2048, 1024)])
def test_gemm_autotune_times_its_candidates_and_keeps_the_earliest_within_the_margin(m, n, k):
    lines = []
    tuned = gemm_example.tuned_config(m, n, k, jnp.bfloat16, gemm_example.device_sm_count(), timer=QUICK,
                                      progress=lines.append)
    assert_kept_by_the_rule(tuned)
    assert len(tuned.seconds) + len(tuned.refused) == len(gemm_example.tune_candidates(m, n, k, jnp.bfloat16,
                                                                                       gemm_example.device_sm_count()))
    assert all(0 < s < 1e-2 for s in tuned.seconds.values()), tuned.seconds
    assert json.loads(tuned.path.read_text())["choice"] == tuned.label
    print("\n".join(lines))

    rng = np.random.default_rng(m + n)
    a = jnp.asarray(rng.standard_normal((m, k)), jnp.bfloat16)
    b = jnp.asarray(rng.standard_normal((k, n)), jnp.bfloat16)
    got = jax.jit(gemm_example.gemm(m, n, k, jnp.bfloat16, autotune=True))(a, b)  # reads the record
    want = jnp.dot(a, b, preferred_element_type=jnp.float32)
    assert float(jnp.max(jnp.abs(got.astype(jnp.float32) - want))) <= 2e-2 * float(jnp.max(jnp.abs(want)))

    class NoTimer:
        def __call__(self, runners, args):
            raise AssertionError("timed again although the choice was on disk")

    again = gemm_example.tuned_config(m, n, k, jnp.bfloat16, gemm_example.device_sm_count(), timer=NoTimer(),
                                      progress=None)
    assert (again.label, again.source) == (tuned.label, "cache")


fp8_example = load_example("gemm_fp8")


@pytest.mark.parametrize("m,n,k", [(16, 4096, 4096), (2048, 2048, 1024)])
def test_fp8_autotune_times_its_candidates_and_the_choice_is_right(m, n, k):
    """gemm_fp8(autotune=True): at 16 tokens the swapped product and the smaller tiles against the default, at 2048
    the taller tiles; every candidate checked against the dequantised product before it is timed, the earliest
    within the margin of the fastest kept."""
    fp8 = np.dtype(jnp.float8_e4m3fn)
    lines = []
    tuned = fp8_example.tuned_config(m, n, k, fp8, timer=QUICK, progress=lines.append)
    print("\n".join(lines))
    assert not tuned.refused, tuned.refused
    assert_kept_by_the_rule(tuned)
    assert len(tuned.seconds) == len(fp8_example.fp8_tune_candidates(m, n, k, gemm_example.device_sm_count()))
    verdict = fp8_example.check(m, n, k, seed=m + k, autotune=True)  # reads the record
    assert verdict.ok, verdict
