"""The GPU diagnostics of issue 14 where no GPU is: tools/proto/trip_latency.cu builds with nvcc (it runs only
on the GPU machine, `STEPS=trip_latency bash tools/gpu_test.sh`), and tools/profile_call.py runs its loops on
simulated CPU devices, the ring shifts checked against the host's roll before anything is profiled."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from jax_tilescale.compiler.toolchain import find_nvcc
from jax_tilescale.errors import CompileError
from tests.conftest import missing_tool

ROOT = Path(__file__).resolve().parents[2]


def test_trip_latency_builds(tmp_path):
    try:
        nvcc = find_nvcc()
    except CompileError as e:
        missing_tool(f"nvcc is needed to build tools/proto/trip_latency.cu: {e}")
    binary = tmp_path / "trip"
    done = subprocess.run([str(nvcc.path), "-O3", "-arch=sm_90", "-o", str(binary),
                           str(ROOT / "tools/proto/trip_latency.cu")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert binary.stat().st_size > 0


@pytest.mark.parametrize("loop", ["fori", "chain"])
def test_profile_call_runs_its_loops(loop):
    done = subprocess.run([sys.executable, str(ROOT / "tools/profile_call.py"), "--loop", loop, "--iters", "2"],
                          capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"profiled: {loop} loops of 2 calls" in done.stdout


def test_hbm_floor_checks_the_pick_and_prints_every_reference():
    """tools/hbm_floor.py on the CPU at a small shape: the pick's product checked against jnp.dot, then one row per
    reference (no GPU kernels to time here: each says so)."""
    done = subprocess.run([sys.executable, str(ROOT / "tools/hbm_floor.py"), "--shape", "64x128x256", "--reps", "2",
                           "--heat", "0"], capture_output=True, text=True, cwd=ROOT, timeout=600,
                          env={**os.environ, "JAX_PLATFORMS": "cpu", "OUT": "/tmp"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert "the pick against jnp.dot in float32: max error" in done.stdout
    for name in ("xla dot", "pick", "colsum B", "rowsum B", "colsum 4B", "rowsum 4B"):
        assert f"{name:>10}  " in done.stdout
