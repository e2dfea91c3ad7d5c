"""benchmarks/bench_call_overhead.py's timing loop without a GPU: `paired` alternates ours and the baseline rep
by rep, reports medians and each side's lowest and highest rep, and leaves the garbage collector as it found it
(it keeps it off during the timed reps only)."""

from __future__ import annotations

import gc

import jax.numpy as jnp
import pytest

from tests.benchmarks import load_bench


@pytest.mark.parametrize("collecting", [True, False])
def test_paired_reports_the_spread_and_restores_the_collector(collecting, monkeypatch):
    bench = load_bench("bench_call_overhead")
    seen = []
    real_time = bench._time

    def timed(loop, x, iters):  # notes whether the collector ran during the timed reps
        seen.append(gc.isenabled())
        return real_time(loop, x, iters)

    monkeypatch.setattr(bench, "_time", timed)
    was = gc.isenabled()
    (gc.enable if collecting else gc.disable)()
    try:
        what, t_ours, t_base, handler, spread = bench.paired("row", lambda x: x * 2.0, lambda x: x + 1.0,
                                                              jnp.ones((8, 8)), iters=3, reps=5)
        assert gc.isenabled() is collecting
    finally:
        (gc.enable if was else gc.disable)()
    assert what == "row" and len(seen) == 10 and not any(seen)
    lo_ours, hi_ours, lo_base, hi_base = spread
    assert 0 < lo_ours <= t_ours <= hi_ours
    assert 0 < lo_base <= t_base <= hi_base
    assert handler is None or len(handler) == 3


def test_chain_rows_are_named_and_count_whole_programs():
    bench = load_bench("bench_call_overhead")
    what, t_ours, t_base, _, spread = bench.paired("row", lambda x: x * 2.0, lambda x: x + 1.0, jnp.ones((4,)),
                                                    iters=bench.CHAIN + 7, reps=3, loop="chain")
    assert what == "row [chain]"
    assert spread[0] <= t_ours <= spread[1] and spread[2] <= t_base <= spread[3]
