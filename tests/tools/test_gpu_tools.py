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


def test_two_pe_suite_halves_cover_every_multi_pe_file_once():
    """tools/gpu_test.sh runs the two-PE suite in two halves (TWO_PE_A, TWO_PE_B) so that each fits a device call:
    every GPU test file with a multi_pe test must be in exactly one of them, or its tests would silently not run."""
    script = (ROOT / "tools/gpu_test.sh").read_text()
    halves = {}
    for name in ("TWO_PE_A", "TWO_PE_B"):
        lines = [ln for ln in script.splitlines() if ln.startswith(f'{name}="')]
        assert len(lines) == 1, f"{name} is not set once in tools/gpu_test.sh"
        halves[name] = lines[0].split('"')[1].split()
    listed = halves["TWO_PE_A"] + halves["TWO_PE_B"]
    assert len(listed) == len(set(listed)), f"a file is in both halves: {sorted(listed)}"
    done = subprocess.run([sys.executable, "-m", "pytest", "tests/gpu", "-m", "multi_pe", "--collect-only", "-q",
                           "-o", "addopts=", "-p", "no:cacheprovider"], capture_output=True, text=True, cwd=ROOT,
                          timeout=600)
    multi = sorted({line.split("::")[0] for line in done.stdout.splitlines() if "::" in line})
    assert multi, f"no multi_pe tests collected: {done.stdout[-2000:]}{done.stderr[-2000:]}"
    assert sorted(listed) == multi
    for name in ("gpu_tests_2pe_a", "gpu_tests_2pe_b"):
        assert f"step {name} shared_two_pes" in script


def test_the_ab_patches_apply_to_the_tree():
    """ab/*.patch are the variants tools/ab_gpu.sh times against the tree in one device call: one that no longer
    applies would cost that call. Delete a patch once its A/B is done."""
    patches = sorted((ROOT / "ab").glob("*.patch"))
    if not patches:
        pytest.skip("no A/B patches in ab/")
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: git apply --check needs one")
    for patch in patches:
        done = subprocess.run(["git", "apply", "--check", str(patch)], capture_output=True, text=True, cwd=ROOT)
        assert done.returncode == 0, f"{patch.name} no longer applies: {done.stderr[-1000:]}"


def test_l2_order_model_reads_each_operand_once_where_it_fits_and_favours_groups_where_not():
    """tools/l2_order_model.py: with an L2 that holds both operands every order reads them once; where B does not fit,
    the row-after-row order reads it once per row of tiles and the grouped order (a partial last group) far less."""
    from tests.conftest import load_tool

    model = load_tool("l2_order_model")
    once = 2 * (512 * 256 + 256 * 1024)
    for group in (1, 3, 8):
        assert model.hbm_bytes(512, 1024, 256, 64, 64, group, 64 << 20, sms=16) == once
    m, n, k = 3000, 28672, 8192  # 12 rows of 256x192 tiles: 470 MB of B
    row_after_row = model.hbm_bytes(m, n, k, 256, 192, 1, 50 << 20)
    grouped = model.hbm_bytes(m, n, k, 256, 192, 8, 50 << 20)
    b_bytes = 2 * k * n
    assert row_after_row >= 10 * b_bytes and grouped <= 4 * b_bytes
