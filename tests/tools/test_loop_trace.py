"""tools/loop_trace.py's line for the measured run, on events made here: the host's span against the GPU's, and the
product kernels the trace holds of the run's (a recorded graph's kernels can be missing from CUPTI's trace)."""

from __future__ import annotations

import numpy as np

from tests.conftest import load_tool


def test_the_run_line_counts_the_traced_products_and_the_gpu_span():
    loop_trace = load_tool("loop_trace")
    rng = np.random.default_rng()
    reps, seen = 64, int(rng.integers(10, 60))
    t, events = 200.0 + float(rng.uniform(0, 50)), []
    first = t
    for _ in range(seen):
        d = float(rng.uniform(30, 40))
        events.append({"name": "ts_gemm_kernel", "ts": t, "dur": d})
        events.append({"name": "loop_add_fusion", "ts": t + d, "dur": 1.0})
        t += d + 1.0
    end = t + 300.0
    line = loop_trace.span_line(events, (0.0, end), reps)
    busy = sum(e["dur"] for e in events)
    assert f"{seen} of {reps} product kernels traced" in line
    assert f"first kernel {first:7.1f} us after the dispatch" in line
    assert f"ends {end - t:7.1f} us before the wait returned" in line
    assert f"GPU busy {busy:9.1f} us of its span {t - first:9.1f}" in line
    assert "no annotated run" in loop_trace.span_line(events, None, reps)
