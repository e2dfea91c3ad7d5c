"""The launcher on CPU: ranks rendezvous through jax.distributed, output is prefixed, failures stop all."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import pytest


def launch(tmp_path, body: str, *args: str, n: int = 2, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(body))
    return subprocess.run(
        [sys.executable, "-m", "jax_tilescale.launch", "-n", str(n), str(script), *args],
        capture_output=True, text=True, timeout=timeout,
        env={**__import__("os").environ, "TILESCALE_PLATFORM": "cpu", "JAX_PLATFORMS": "cpu"},
    )


def test_ranks_rendezvous_and_output_is_prefixed(tmp_path):
    r = launch(tmp_path, """
        import sys, jax
        print("hello from", jax.process_index(), "of", jax.process_count(), "args", sys.argv[1:])
    """, "a", "--b")
    assert r.returncode == 0, r.stdout + r.stderr
    for rank in (0, 1):
        assert f"[rank {rank}] hello from {rank} of 2 args ['a', '--b']" in r.stdout, r.stdout


def test_one_rank_failing_stops_the_others(tmp_path):
    t0 = time.monotonic()
    r = launch(tmp_path, """
        import os, time
        if os.environ["RANK"] == "1":
            raise SystemExit(3)
        time.sleep(600)  # would hang without the launcher stopping it
    """)
    assert time.monotonic() - t0 < 60
    assert r.returncode == 3, r.stdout + r.stderr
    assert "[launch] rank 1 (node 0) exited with status 3" in r.stdout, r.stdout


def test_exception_in_a_rank_is_shown_with_its_prefix(tmp_path):
    r = launch(tmp_path, """
        import os
        if os.environ["RANK"] == "0":
            raise ValueError("boom on rank zero")
    """)
    assert r.returncode != 0
    assert any(line.startswith("[rank 0] ") and "boom on rank zero" in line for line in r.stdout.splitlines())


def test_module_mode_and_timeout_names_the_ranks_still_running(tmp_path):
    (tmp_path / "sleeper.py").write_text(
        "import os, time\nprint('step 1 on rank', os.environ['RANK'])\nif os.environ['RANK'] == '1':\n"
        "    print('waiting for the others')\ntime.sleep(600)\n")
    t0 = time.monotonic()
    r = subprocess.run(
        [sys.executable, "-m", "jax_tilescale.launch", "-n", "2", "--timeout", "8", "-m", "sleeper"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
        env={**__import__("os").environ, "TILESCALE_PLATFORM": "cpu", "JAX_PLATFORMS": "cpu"},
    )
    assert r.returncode == 124, r.stdout + r.stderr
    assert time.monotonic() - t0 < 60
    report = r.stdout[r.stdout.index("[launch] timeout after 8 s (--timeout); stopped the ranks still running: 0, 1"):]
    assert report.splitlines()[1:] == [
        "[launch] rank 0 (node 0) was still running; its last 1 lines:",
        "[launch]   | step 1 on rank 0",
        "[launch] rank 1 (node 0) was still running; its last 2 lines:",
        "[launch]   | step 1 on rank 1",
        "[launch]   | waiting for the others",
    ], r.stdout


@pytest.mark.parametrize("argv,msg", [
    (["-n", "0", "x.py"], "-n 0: must be an integer of at least 1"),
    (["--nodes", "2", "x.py"], "MASTER_PORT"),
])
def test_bad_arguments(argv, msg):
    r = subprocess.run([sys.executable, "-m", "jax_tilescale.launch", *argv], capture_output=True, text=True,
                       env={k: v for k, v in __import__("os").environ.items() if k != "MASTER_PORT"})
    assert r.returncode == 2 and msg in r.stderr
