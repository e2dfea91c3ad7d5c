"""A kernel on CPU runs in one process that simulates every device: spread over processes (the launcher on a
machine without GPUs), it must fail at once with the command to use, not wait out the interpreter's timeout."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from jax_tilescale.errors import LaunchError
from jax_tilescale.launch_env import check_interpreter_launch, processes_of_launch_groups

from .procs import cpu_env, finish, start, write_script

ROOT = Path(__file__).resolve().parents[2]
ALLGATHER = ROOT / "examples" / "allgather.py"


def _mesh(processes: list[list[int]], names=("node", "x")) -> SimpleNamespace:
    devices = np.array([[SimpleNamespace(process_index=p) for p in row] for row in processes], dtype=object)
    return SimpleNamespace(devices=devices, axis_names=names, size=devices.size)


def test_launch_groups_and_the_processes_that_hold_them():
    mesh = _mesh([[0, 0], [1, 1]])  # two processes of two devices each
    assert processes_of_launch_groups(mesh, ["x"]) == [{0}, {1}]  # a team per process along "x"
    assert processes_of_launch_groups(mesh, ["node"]) == [{0, 1}, {0, 1}]
    assert processes_of_launch_groups(mesh, ["node", "x"]) == [{0, 1}]
    assert processes_of_launch_groups(mesh, []) == [{0}, {0}, {1}, {1}]  # one PE per device
    assert processes_of_launch_groups(None, ["x"]) == []


def test_only_a_launch_spread_over_processes_is_refused(monkeypatch):
    monkeypatch.setenv("TILESCALE_LAUNCH_COMMAND", "examples/allgather.py --m 64")
    check_interpreter_launch("k", _mesh([[0, 0], [1, 1]]), ["x"])  # each launch within one process
    check_interpreter_launch("k", _mesh([[0, 0], [0, 0]]), ["node", "x"])  # one process
    check_interpreter_launch("k", None, [])  # outside shard_map
    with pytest.raises(LaunchError) as info:
        check_interpreter_launch("ring", _mesh([[0, 0], [1, 1]]), ["node", "x"])
    msg = str(info.value)
    assert "kernel `ring` would run in the CPU interpreter with its 4 PEs spread over 2 processes (processes 0, 1 " in (
        msg)
    assert "run the program as one process with simulated devices: `python examples/allgather.py --m 64`" in msg
    assert "XLA_FLAGS=--xla_force_host_platform_device_count=N" in msg


def _no_gpu_env(**extra: str) -> dict[str, str]:
    env = cpu_env(CUDA_VISIBLE_DEVICES="", **extra)  # no GPU visible, whatever this machine has
    env.pop("TILESCALE_PLATFORM")  # as a user would run it
    return env


def test_launcher_without_gpus_says_at_once_that_cpu_runs_use_one_process(tmp_path):
    script = write_script(tmp_path, "print('ran')\n")
    launcher = start([sys.executable, "-m", "jax_tilescale.launch", "-n", "2", str(script), "--x", "1"], _no_gpu_env())
    first = launcher.stdout.readline()  # before any rank starts
    (code,), (out,), _ = finish([launcher], timeout=120)
    assert first.startswith("[launch] no GPU on this node: the 2 ranks run on CPU"), first
    assert f"run the program as one process: `python {script} --x 1`" in first
    assert code == 0 and out.count("] ran") == 2, first + out  # a note, not a refusal: the job runs


def _launch_allgather(argv: list[str]) -> tuple[int, str, float]:
    launcher = start([sys.executable, "-m", "jax_tilescale.launch", "-n", "2", *argv], _no_gpu_env())
    (code,), (out,), seconds = finish([launcher], timeout=150)
    return code, out, seconds


def _assert_refused_at_once(code: int, out: str, seconds: float, command: str) -> None:
    assert code == 1, out
    assert "LaunchError: kernel `ring_allgather` would run in the CPU interpreter with its 8 PEs spread over 2 " in out
    assert f"run the program as one process with simulated devices: `python {command}`" in out, out
    assert "timed out" not in out  # not the interpreter's 60 s timeout
    assert seconds < 45, out  # the ranks' start and one trace; the interpreter would wait 60 s


def test_the_example_on_cpu_processes_fails_at_once_with_the_command_to_use():
    code, out, seconds = _launch_allgather([str(ALLGATHER), "--m", "64", "--n", "32"])
    _assert_refused_at_once(code, out, seconds, f"{ALLGATHER} --m 64 --n 32")
