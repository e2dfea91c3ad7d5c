"""Examples run as scripts: each says what it needs and exits 2 when the devices cannot make it
(nothing checked, nothing claimed), reports what really ran, and exits 1 when its check fails."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from typing import Literal

import jax
import pytest

import jax_tilescale as ts
from tests.conftest import ROOT


def run_example(path: str, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("XLA_FLAGS", None)  # the example chooses its simulated devices
    return subprocess.run([sys.executable, str(ROOT / "examples" / path), *args], capture_output=True, text=True,
                          env=env, timeout=300, cwd=ROOT)


@pytest.mark.parametrize("path,args,needs", [
    ("allgather.py", ["--cpu-devices", "1"], "needs at least 2 devices; this run has 1"),
    ("summa.py", ["--cpu-devices", "1"], "needs a square number of devices, at least 4"),
    ("cannon.py", ["--cpu-devices", "1"], "needs a square number of devices, at least 4"),
    ("summa.py", ["--cpu-devices", "8"], r"needs a square number of devices, at least 4 .*; this run has 8"),
    ("primitives/sync.py", ["--mesh", "teams", "--cpu-devices", "2"], "needs a multiple of 2 devices, at least 4"),
])
def test_too_few_devices_is_an_exit_with_what_the_example_needs(path, args, needs):
    proc = run_example(path, *args)
    assert proc.returncode == ts.testing.EXIT_CANNOT_RUN, proc
    assert proc.stdout == "" and "Traceback" not in proc.stderr  # no check claimed, no raw error
    assert "cannot run" in proc.stderr and "--cpu-devices" in proc.stderr
    assert re.search(needs, proc.stderr), proc.stderr


def test_a_mesh_that_fits_runs_and_reports_it():
    proc = run_example("primitives/sync.py", "--mesh", "teams", "--cpu-devices", "6", "--m", "16", "--n", "16")
    assert proc.returncode == 0, proc
    assert "ran on 6 simulated CPU devices" in proc.stdout and "mesh {'x': 2, 'y': 3}" in proc.stdout
    assert "over axis 'y': fcollect, broadcast, barrier and sync outputs equal to jax.lax: True" in proc.stdout


def test_gemm_reports_the_one_device_it_ran_on():
    proc = run_example("gemm.py", "--m", "64", "--n", "64", "--k", "64", "--dtype", "float32")
    assert proc.returncode == 0, proc
    lines = proc.stdout.splitlines()
    assert lines[0] == "gemm: ran on 1 simulated CPU device, kernels run by the jax_tilescale interpreter (no GPU)"
    assert lines[1] == "gemm: m=64 n=64 k=64 dtype=float32 seed=0 autotune=False"
    assert lines[2].startswith("gemm: C close to the float64 product: True (1 shard, 4096 elements")


def test_gemm_autotune_without_a_gpu_runs_the_table_pick_and_says_so():
    proc = run_example("gemm.py", "--m", "96", "--n", "200", "--k", "130", "--autotune")
    assert proc.returncode == 0, proc
    lines = proc.stdout.splitlines()
    assert lines[1] == "gemm: m=96 n=200 k=130 dtype=bfloat16 seed=0 autotune=True"
    assert lines[2].startswith("gemm: C close to the float64 product: True")
    assert "autotune examples.gemm: no GPU (cpu) to time on: took the first candidate" in proc.stderr


def test_a_kernel_that_leaves_rows_unwritten_exits_non_zero_and_claims_nothing():
    """put_block with rows that are not a multiple of its 32-row blocks: the interpreter reports the
    unwritten rows before anything is compared."""
    proc = run_example("primitives/put_block.py", "--m", "48", "--n", "32", "--cpu-devices", "2")
    assert proc.returncode == 1 and "True" not in proc.stdout, proc
    assert "512 of 1536 elements were never written, the first at [32, 0]" in proc.stderr


# --- ts.testing.main in this process (8 simulated devices) --------------------------------------
def a_check(mesh: jax.sharding.Mesh, m: int = 3, dtype: str = "float32", how: Literal["a", "b"] = "a",
            flag: bool = False) -> ts.testing.Verdict:
    a_check.seen = dict(mesh=dict(mesh.shape), m=m, dtype=dtype, how=how, flag=flag)
    return ts.testing.Verdict("the numbers", m != 13, "detail")


def no_mesh_check(n: int, seed: int = 0) -> ts.testing.Verdict:
    no_mesh_check.seen = dict(n=n, seed=seed)
    return ts.testing.Verdict("ok", True)


def exit_status(capsys, *args, **kw) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as e:
        ts.testing.main(*args, **kw)
    out, err = capsys.readouterr()
    return e.value.code, out, err


def test_main_options_come_from_the_check_signature(capsys):
    code, out, _ = exit_status(capsys, a_check, mesh=ts.platform.line(2), argv=["--m", "5", "--how", "b", "--flag"])
    assert code == 0 and a_check.seen == dict(mesh={"x": 8}, m=5, dtype="float32", how="b", flag=True)
    assert out.splitlines() == [
        "test_entry_points: ran on 8 simulated CPU devices, kernels run by the jax_tilescale interpreter (no GPU), "
        "mesh {'x': 8}",
        "test_entry_points: m=5 dtype=float32 how=b flag=True",
        "test_entry_points: the numbers: True (detail)",
    ]
    code, out, _ = exit_status(capsys, a_check, mesh=ts.platform.line(2), argv=["--m", "13"])
    assert code == ts.testing.EXIT_CHECK_FAILED and out.splitlines()[-1].endswith("the numbers: False (detail)")
    with pytest.raises(SystemExit):
        ts.testing.main(a_check, mesh=ts.platform.line(2), argv=["--how", "c"])  # not a choice
    capsys.readouterr()


def test_main_mesh_choices_and_refusals(capsys):
    meshes = {"ring": ts.platform.line(2), "teams": ts.platform.rows(2)}
    code, _, _ = exit_status(capsys, a_check, mesh=meshes, argv=["--mesh", "teams"])
    assert code == 0 and a_check.seen["mesh"] == {"x": 2, "y": 4}
    code, out, err = exit_status(capsys, a_check, mesh=ts.platform.square(), argv=[])
    assert code == ts.testing.EXIT_CANNOT_RUN and out == ""
    assert "needs a square number of devices, at least 4 (a p x p mesh, p >= 2); this run has 8" in err
    code, out, _ = exit_status(capsys, a_check, mesh=ts.platform.square(), argv=["--help"])
    assert code == 0 and "Needs a square number of devices, at least 4" in out and "--cpu-devices" in out


def test_main_without_a_mesh_fills_defaults_for_the_platform(capsys):
    code, out, _ = exit_status(capsys, no_mesh_check, mesh=None, defaults={"n": 7}, gpu_defaults={"n": 4096}, argv=[])
    assert code == 0 and no_mesh_check.seen == {"n": 7, "seed": 0}  # no GPU: the CPU default
    assert out.startswith("test_entry_points: ran on 1 of 8 simulated CPU devices")
    code, _, err = exit_status(capsys, no_mesh_check, mesh=None, argv=[])
    assert code == ts.testing.EXIT_CANNOT_RUN and "no value for --n" in err
