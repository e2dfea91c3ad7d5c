"""Kernel durations of issue 14's one-PE rows under Nsight Compute: the 4 KiB ring shift (plain and signalled)
and the copy kernel, each repeated in one loop form, inside a profiler range after warm-up. On one PE a
communicating kernel cost ~2 us more than the copy kernel per iteration of a loop XLA records as a graph, and
~0.4 us more in a chain of calls, before the fourteenth session's fix (benchmarks/NOTES.md, issue 14): the
kernels' own durations in each form say whether such a difference is inside the kernel or between the nodes.

    XLA_FLAGS="--xla_gpu_enable_command_buffer=+WHILE,+CONDITIONAL --xla_gpu_graph_min_graph_size=1" \\
      ncu --profile-from-start off --cache-control none --clock-control none --metrics gpu__time_duration.sum \\
      --csv python3 tools/profile_call.py --loop fori
    STEPS=profile_call bash tools/gpu_test.sh       # the three loop forms, a table of medians per kernel
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import jax

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_call_overhead as bench
from profile_gemm import profiled_range

import jax_tilescale as ts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--loop", default="fori", choices=("fori", "chain"))
    ap.add_argument("--iters", type=int, default=50, help="calls in the profiled range, per kernel")
    a = ap.parse_args()
    platform = ts.platform.setup()
    mesh = jax.make_mesh((platform.num_devices,), ("x",))
    loops = []
    for signalled in (False, True):
        shift, copy, x = bench.shift_and_copy(mesh, 64, 16, 64, signalled)
        loops += [(bench._loop(shift, a.iters, a.loop), x)]
        if not signalled:
            loops += [(bench._loop(copy, a.iters, a.loop), x)]
    for loop, x in loops:  # compiled and warm, XLA's command buffers recorded
        for _ in range(3):
            jax.block_until_ready(loop(x))
    print(f"profiled: {a.loop} loops of {a.iters} calls; XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}", flush=True)
    with profiled_range():
        for loop, x in loops:
            jax.block_until_ready(loop(x))


if __name__ == "__main__":
    main()
