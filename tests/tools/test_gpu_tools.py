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
        order = model.grouped_order(8, 16, group)
        assert model.hbm_bytes(order, 256, 64, 64, 64 << 20, sms=16, output=False) == once
    n, k = 28672, 8192  # 3000 x 28672 x 8192: 12 rows of 256x192 tiles, 470 MB of B
    row_after_row = model.hbm_bytes(model.grouped_order(12, 150, 1), k, 256, 192, 50 << 20, output=False)
    grouped = model.hbm_bytes(model.grouped_order(12, 150, 8), k, 256, 192, 50 << 20, output=False)
    b_bytes = 2 * k * n
    assert row_after_row >= 10 * b_bytes and grouped <= 4 * b_bytes


def test_l2_order_model_follows_the_kernels_orders_and_the_cards_bytes():
    """The model walks the order the kernel walks (persistent_tile of the configuration) and, with C's tiles through
    the L2, gives the bytes ncu read from HBM on an H100 at 16384 x 8192 x 1024 within 3% (benchmarks/NOTES.md,
    forty-fifth session: column groups of 8 218.2 MB, in bands of 16 x 16 119.6 MB); the plain column groups of 16
    want each of A's tile rows from the most blocks at once, the bands from about as few as groups of 8."""
    import dataclasses

    from jax_tilescale.codegen.gemm_table import PERSISTENT_BANDED, PERSISTENT_COLUMNS
    from tests.conftest import load_tool

    model = load_tool("l2_order_model")
    m, n, k = 16384, 8192, 1024
    # the bands as the card's bytes were measured (column groups of 8 in them; the table now takes groups of 4)
    banded_g8 = dataclasses.replace(PERSISTENT_BANDED, group_m=8)
    columns, banded = (model.config_order(m, n, cfg) for cfg in (PERSISTENT_COLUMNS, banded_g8))
    assert sorted(columns) == sorted(banded) == [(r, c) for r in range(128) for c in range(43)]
    for order, card in ((columns, 218.2e6), (banded, 119.6e6)):
        for mib in (25, 50):
            assert abs(model.hbm_bytes(order, k, 128, 192, mib << 20) / card - 1) < 0.03
    wide = model.config_order(m, n, dataclasses.replace(PERSISTENT_COLUMNS, group_m=16))
    shares = [model.wave_sharing(order)[0] for order in (columns, banded, wide)]
    assert shares[0] < shares[1] < 11 < 14 < shares[2]
    assert model.bench_config("table", m, n, k) == PERSISTENT_BANDED
    assert model.bench_config("128x192x64/4/g8/p/pp/gc", m, n, k) == PERSISTENT_COLUMNS
