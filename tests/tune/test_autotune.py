"""ts.tune.autotune (jax_tilescale/tune/search.py, store.py): which candidate it takes, what it leaves out and why,
what it keeps on disk and when it reads that back instead of timing. Timers here are scripted (the GPU's timings are
tests/gpu/test_autotune_gpu.py's), so every choice below is known before the run."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_tilescale as ts
from jax_tilescale.errors import KernelTraceError, TileScaleError
from jax_tilescale.tune import store


class ScriptedTimer:
    """Seconds per call from a table, one figure per round; records which runners it was given."""

    def __init__(self, seconds: dict[str, float], rounds: int = 3):
        self.seconds, self.rounds, self.given = seconds, rounds, []

    def __call__(self, runners, args):
        self.given.append(sorted(runners))
        for fn in runners.values():  # the runners are real: each must run on the arguments
            jax.block_until_ready(fn(*args))
        return {label: [self.seconds[label] * (1 + 0.01 * r) for r in range(self.rounds)] for label in runners}


class NoTimer:
    def __call__(self, runners, args):
        raise AssertionError("timed although the choice was on disk")


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TILESCALE_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def scale(factor: float):
    """A candidate: x * factor (a jittable function of one array)."""
    return lambda x: x * factor


ARGS = (jnp.asarray(np.random.default_rng(0).standard_normal((8, 16)), jnp.float32),)


def test_the_fastest_by_median_is_chosen_and_recorded(own_cache):
    timer = ScriptedTimer({"1.0": 3e-3, "2.0": 1e-3, "3.0": 2e-3})
    tuned = ts.tune.autotune("scale", [1.0, 2.0, 3.0], scale, ARGS, timer=timer, progress=None)
    assert (tuned.config, tuned.label, tuned.source) == (2.0, "2.0", "timed")
    assert tuned.seconds["2.0"] == pytest.approx(1.01e-3)  # the median of the three rounds
    assert timer.given == [["1.0", "2.0", "3.0"]]
    data = json.loads(tuned.path.read_text())
    assert data["choice"] == "2.0" and data["key"]["arguments"] == ["float32[8, 16]"]
    assert tuned.path.parent == own_cache / "tune"


def test_a_second_call_reads_the_choice_and_times_nothing():
    first = ts.tune.autotune("scale", [1.0, 2.0], scale, ARGS, timer=ScriptedTimer({"1.0": 2.0, "2.0": 1.0}),
                             progress=None)
    again = ts.tune.autotune("scale", [1.0, 2.0], scale, ARGS, timer=NoTimer(), progress=None)
    assert (again.config, again.source, again.path) == (2.0, "cache", first.path)
    assert again.seconds == first.seconds


def test_retune_times_again_and_overwrites_the_record():
    ts.tune.autotune("scale", [1.0, 2.0], scale, ARGS, timer=ScriptedTimer({"1.0": 2.0, "2.0": 1.0}), progress=None)
    tuned = ts.tune.autotune("scale", [1.0, 2.0], scale, ARGS, timer=ScriptedTimer({"1.0": 1.0, "2.0": 2.0}),
                             retune=True, progress=None)
    assert tuned.config == 1.0 and json.loads(tuned.path.read_text())["choice"] == "1.0"


@pytest.mark.parametrize("change", ["shape", "dtype", "candidates", "key", "name"])
def test_another_problem_is_tuned_on_its_own(change):
    base = dict(name="scale", candidates=[1.0, 2.0], args=ARGS, key={"m": 8})
    first = ts.tune.autotune(base["name"], base["candidates"], scale, base["args"], key=base["key"],
                             timer=ScriptedTimer({"1.0": 2.0, "2.0": 1.0, "3.0": 3.0}), progress=None)
    other = dict(base)
    if change == "shape":
        other["args"] = (jnp.ones((8, 32), jnp.float32),)
    elif change == "dtype":
        other["args"] = (jnp.ones((8, 16), jnp.bfloat16),)
    elif change == "candidates":
        other["candidates"] = [1.0, 2.0, 3.0]
    elif change == "key":
        other["key"] = {"m": 9}
    else:
        other["name"] = "scale2"
    timer = ScriptedTimer({"1.0": 1.0, "2.0": 2.0, "3.0": 3.0})
    second = ts.tune.autotune(other["name"], other["candidates"], scale, other["args"], key=other["key"],
                              timer=timer, progress=None)
    assert second.source == "timed" and second.config == 1.0 and second.path != first.path


def test_refused_candidates_are_left_out_with_their_reasons():
    def build(factor):
        if factor == 1.0:
            raise KernelTraceError("needs 253952 bytes of shared memory: take num_stages=3")
        if factor == 3.0:
            raise ValueError("split_k=3 does not divide the 8 k-steps")
        return scale(factor)

    lines = []
    timer = ScriptedTimer({"2.0": 1.0, "4.0": 0.5})
    tuned = ts.tune.autotune("refusals", [1.0, 2.0, 3.0, 4.0], build, ARGS, timer=timer, progress=lines.append)
    assert tuned.config == 4.0 and timer.given == [["2.0", "4.0"]]
    assert tuned.refused == {"1.0": "KernelTraceError: needs 253952 bytes of shared memory: take num_stages=3",
                             "3.0": "ValueError: split_k=3 does not divide the 8 k-steps"}
    assert any("[1/4] 1.0: refused (KernelTraceError" in line for line in lines)
    assert any("4.0" in line and "chosen" in line for line in lines)


def test_a_wrong_result_is_refused_never_chosen():
    want = np.asarray(ARGS[0]) * 2.0

    def check(out):
        err = float(np.abs(np.asarray(out) - want).max())
        return None if err < 1e-6 else f"max error {err:.3g}"

    timer = ScriptedTimer({"2.0": 1.0})
    tuned = ts.tune.autotune("checked", [3.0, 2.0], scale, ARGS, check=check, timer=timer, progress=None)
    assert tuned.config == 2.0 and tuned.refused["3.0"].startswith("wrong result: max error")
    assert timer.given == [["2.0"]]


def test_every_candidate_refused_raises_with_each_reason():
    def build(factor):
        raise KernelTraceError(f"tile {factor} refused")

    with pytest.raises(TileScaleError, match=r"every candidate was refused:\n  1.0: KernelTraceError: tile 1.0 "
                                             r"refused\n  2.0: KernelTraceError: tile 2.0 refused"):
        ts.tune.autotune("none", [1.0, 2.0], build, ARGS, timer=ScriptedTimer({}), progress=None)


def test_a_bug_in_the_build_function_is_not_taken_for_a_refusal():
    def build(factor):
        raise TypeError("a bug, not a configuration the code generator refused")

    with pytest.raises(TypeError, match="a bug"):
        ts.tune.autotune("bug", [1.0, 2.0], build, ARGS, timer=ScriptedTimer({}), progress=None)


def test_one_candidate_is_taken_without_building_or_timing():
    def build(factor):
        raise AssertionError("built")

    tuned = ts.tune.autotune("one", [5.0], build, ARGS, timer=NoTimer(), progress=None)
    assert (tuned.config, tuned.source, tuned.path) == (5.0, "only", None)


def test_without_a_gpu_or_a_timer_the_first_candidate_is_taken_untimed_and_nothing_recorded(own_cache):
    assert jax.default_backend() == "cpu"
    lines = []
    tuned = ts.tune.autotune("untimed", [7.0, 8.0], scale, ARGS, progress=lines.append)
    assert (tuned.config, tuned.source) == (7.0, "untimed")
    assert lines == ["autotune untimed: no GPU (cpu) to time on: took the first candidate, 7.0, untimed"]
    assert not (own_cache / "tune").exists()


@pytest.mark.parametrize("content", ["{not json", '{"choice": "9.0", "seconds": {"9.0": 1.0}}',
                                     '{"choice": "1.0", "seconds": {"2.0": 1.0}}', '["a list"]'])
def test_an_unusable_record_is_tuned_again_with_a_warning(content):
    first = ts.tune.autotune("bad", [1.0, 2.0], scale, ARGS, timer=ScriptedTimer({"1.0": 2.0, "2.0": 1.0}),
                             progress=None)
    first.path.write_text(content)
    with pytest.warns(RuntimeWarning, match="tuning again"):
        tuned = ts.tune.autotune("bad", [1.0, 2.0], scale, ARGS, timer=ScriptedTimer({"1.0": 1.0, "2.0": 2.0}),
                                 progress=None)
    assert (tuned.config, tuned.source) == (1.0, "timed")
    assert json.loads(first.path.read_text())["choice"] == "1.0"


def test_candidates_described_alike_or_none_are_refused():
    with pytest.raises(ValueError, match="no candidates"):
        ts.tune.autotune("empty", [], scale, ARGS, progress=None)
    with pytest.raises(ValueError, match=r"described differently, \['x'\] name several"):
        ts.tune.autotune("same", [1.0, 2.0], scale, ARGS, describe=lambda c: "x", progress=None)


def test_record_paths_are_readable_and_separate_problems():
    a = store.record_path("examples.gemm", {"m": 1})
    b = store.record_path("examples.gemm", {"m": 2})
    assert a.name.startswith("examples.gemm-") and a.suffix == ".json" and a != b
    assert store.record_path("a/b c", {}).name.startswith("a_b_c-")


def test_a_record_whose_choice_was_not_timed_cannot_be_made():
    with pytest.raises(ValueError, match="was not timed"):
        store.Record(choice="a", seconds={"b": 1.0})


def test_a_second_process_waits_for_the_first_and_takes_its_choice():
    """Two ranks on one host tuning one problem: the one that comes second waits on the record's lock, says so, and
    takes what the first recorded (the same kernel on every rank, timed once). The first is a thread here holding
    the lock (flock locks of two open files conflict within a process too)."""
    import threading
    import time

    first = ts.tune.autotune("wait", [1.0, 2.0], scale, ARGS, timer=ScriptedTimer({"1.0": 2.0, "2.0": 1.0}),
                             progress=None)
    record = first.path.read_text()
    first.path.unlink()
    holding = threading.Event()

    def other_rank():
        with store.tuning(first.path):
            holding.set()
            time.sleep(0.3)
            first.path.write_text(record)

    thread = threading.Thread(target=other_rank)
    thread.start()
    holding.wait()
    lines = []
    tuned = ts.tune.autotune("wait", [1.0, 2.0], scale, ARGS, timer=NoTimer(), progress=lines.append)
    thread.join()
    assert (tuned.config, tuned.source) == (2.0, "cache")
    assert lines and "another process is tuning this problem; waiting for its choice" in lines[0]


@pytest.mark.parametrize("first_s, chosen", [(1.015, 1.0), (1.05, 2.0)])
def test_the_earlier_candidate_is_kept_unless_another_is_faster_by_more_than_the_margin(first_s, chosen):
    timer = ScriptedTimer({"1.0": first_s, "2.0": 1.0, "3.0": 1.3})
    tuned = ts.tune.autotune("margin", [1.0, 2.0, 3.0], scale, ARGS, timer=timer, margin=0.02, progress=None)
    assert tuned.config == chosen


def test_a_margin_outside_zero_to_one_is_refused():
    with pytest.raises(ValueError, match="margin is a fraction"):
        ts.tune.autotune("m", [1.0, 2.0], scale, ARGS, margin=1.5, progress=None)


def test_a_candidate_s_performance_warning_becomes_its_progress_line_and_others_pass_through():
    import warnings

    def build(factor):
        def fn(x):
            slower = f"kernel k runs in a slower form on the GPU:\n  - tile {factor} spills"
            warnings.warn(ts.PerformanceWarning(slower), stacklevel=2)
            warnings.warn(f"user warning {factor}", UserWarning, stacklevel=2)
            return x * factor
        return fn

    lines = []
    with pytest.warns(UserWarning) as seen:
        ts.tune.autotune("warned", [1.0, 2.0], build, ARGS, timer=ScriptedTimer({"1.0": 1.0, "2.0": 2.0}),
                         progress=lines.append)
    assert "[1/2] 1.0: built and checked; slower form: tile 1.0 spills" in lines[1]
    assert [str(w.message) for w in seen if not issubclass(w.category, ts.PerformanceWarning)] == [
        "user warning 1.0", "user warning 2.0"]


def test_autotune_called_while_a_jit_traces_runs_the_candidates_now():
    """A layer that builds its kernel inside the function it jits: the candidates run on the example arguments
    (timed by the real LoopTimer here), not staged into the caller's program, and the caller's result is right."""
    from jax_tilescale.tune import LoopTimer

    x = jnp.asarray(np.random.default_rng(4).standard_normal((64, 64)), jnp.float32)

    def heavy(factor):
        def fn(a):
            for _ in range(int(factor)):
                a = jnp.tanh(a @ a) * 0.5
            return a
        return fn

    @jax.jit
    def layer(a):
        tuned = ts.tune.autotune("traced", [30.0, 1.0], heavy, (x,), timer=LoopTimer(rounds=1, heat_s=0.0),
                                 progress=None)
        assert tuned.source == "timed" and tuned.config == 1.0
        return heavy(tuned.config)(a)

    np.testing.assert_allclose(layer(x), np.tanh(np.asarray(x) @ np.asarray(x)) * 0.5, rtol=1e-4, atol=1e-5)
