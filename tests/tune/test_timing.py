"""jax_tilescale/tune/timing.py: the loop each candidate is timed in, and LoopTimer's figures, on the CPU (its
ranking of two computations whose costs differ ~100x; the GPU's own timings: tests/gpu/test_autotune_gpu.py)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jax_tilescale.tune import LoopTimer, looped


@pytest.mark.parametrize("unroll", [1, 3])
def test_the_loop_runs_the_call_reps_times_unroll_and_keeps_the_whole_last_results(unroll):
    calls = []

    def fn(x):
        jax.debug.callback(lambda: calls.append(1))
        return x * 2.0, x[:2] + 1.0

    x = jnp.asarray(np.random.default_rng(1).standard_normal((4, 3)), jnp.float32)
    total, kept = looped(fn, unroll)(jnp.int32(5), x)
    jax.block_until_ready(total)
    assert len(calls) == 5 * unroll and len(kept) == unroll
    for doubled, head in kept:
        np.testing.assert_allclose(doubled, np.asarray(x) * 2.0)
        np.testing.assert_allclose(head, np.asarray(x)[:2] + 1.0)
    assert float(total) == pytest.approx(5 * unroll * (float(x[0, 0]) * 2.0 + float(x[0, 0]) + 1.0), rel=1e-5)


def test_an_iteration_keeps_every_one_of_its_calls():
    """The same arrays through distinct parameters: XLA cannot merge an iteration's identical products (a pure
    function of the same parameter would be computed once)."""
    a, b = (jnp.asarray(np.random.default_rng(s).standard_normal((32, 32)), jnp.float32) for s in (5, 6))
    loop = looped(lambda x, y: x @ y, unroll=4)
    text = loop.jitted.lower(jnp.int32(2), *(a, b) * 4).compile().as_text()
    products = [line for line in text.splitlines() if "= f32[32,32]" in line and " dot(" in line]
    assert len(products) == 4, products
    with pytest.raises(ValueError, match="unroll must be at least 1"):
        looped(lambda x: x, unroll=0)


def test_loop_timer_ranks_a_heavy_computation_behind_a_light_one():
    x = jnp.asarray(np.random.default_rng(2).standard_normal((256, 256)), jnp.float32)

    def heavy(a):
        for _ in range(40):
            a = jnp.tanh(a @ a) * 0.5
        return a

    timer = LoopTimer(rounds=2, heat_s=0.0, min_run_s=0.02)
    times = timer({"light": lambda a: a + 1.0, "heavy": heavy}, (x,))
    assert sorted(times) == ["heavy", "light"] and all(len(v) == 2 for v in times.values())
    assert min(times["heavy"]) > 5 * max(times["light"]) > 0


@pytest.mark.parametrize("bad", [dict(rounds=0), dict(max_reps=0), dict(heat_s=-1.0), dict(min_run_s=0.0),
                                 dict(unroll=0)])
def test_loop_timer_refuses_settings_that_time_nothing(bad):
    with pytest.raises(ValueError, match="LoopTimer needs"):
        LoopTimer(**bad)


def test_an_empty_output_is_carried_and_adds_nothing():
    x = jnp.arange(6, dtype=jnp.float32).reshape(2, 3)
    total, ((empty, same),) = looped(lambda a: (a[:0], a), 1)(jnp.int32(3), x)
    assert empty.shape == (0, 3) and float(total) == 0.0
    np.testing.assert_array_equal(same, x)
