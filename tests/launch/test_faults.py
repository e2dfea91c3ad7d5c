"""Faults on CPU: a rank that raises, exits or is killed makes every other rank end soon, with a message
naming it -- under the launcher (one node or several) and in plain jax.distributed launches."""

from __future__ import annotations

import os
import re
import signal
import sys
import time

import pytest

from jax_tilescale.launch import PEER_FAILED_STATUS

from .procs import cpu_env, finish, free_port, start, start_launcher, write_script


def launch_one_node(tmp_path, body: str, n: int = 2):
    script = write_script(tmp_path, body)
    (code,), (out,), seconds = finish([start_launcher(script, cpu_env(), "-n", str(n))], timeout=120)
    return code, out, seconds


def test_failed_rank_is_named_with_its_last_lines(tmp_path):
    code, out, seconds = launch_one_node(tmp_path, """
        import os, time
        if os.environ["RANK"] == "1":
            print("about to fail")
            raise ValueError("boom on rank one")
        time.sleep(600)
    """)
    assert code == 1 and seconds < 60, out
    report = out[out.index("[launch] rank 1 (node 0) exited with status 1; its last"):]
    assert "[launch]   | about to fail" in report and "[launch]   | ValueError: boom on rank one" in report
    assert "_worker.py" not in out  # the traceback starts at the user's script


def test_rank_killed_by_a_signal_is_reported_as_such(tmp_path):
    code, out, seconds = launch_one_node(tmp_path, """
        import os, signal, time
        if os.environ["RANK"] == "0":
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(600)
    """)
    assert code == 128 + 9 and seconds < 60, out
    assert "[launch] rank 0 (node 0) was killed by signal SIGKILL (9)" in out
    # Rank 1 ends one of two ways, both right: the launcher stops it, or JAX's coordination service
    # aborts it first (rank 0's connection is gone), which the launcher reports as a knock-on. Seen in
    # CI, 2026-12-01: the second, in about 1 run of 100; 2026-12-03: rank 1 still in initialize's key-value
    # wait, failing with "UNAVAILABLE: Socket closed" (now a knock-on too, launch_report._KNOCK_ON).
    stopped = "[launch] stopped the rank still running: 1" in out
    knock_on = re.search(r"\[launch\] rank 1 \(node 0\) also failed after it: .*a knock-on", out) is not None
    assert stopped or knock_on, out


def test_failure_on_one_node_stops_the_other_node(tmp_path):
    """Node 1's rank raises; node 0's rank, blocked in a key-value wait, is stopped by the watchdog in ~1 s."""
    script = write_script(tmp_path, """
        import os, jax
        from jax_tilescale._jax_compat import distributed_client
        if os.environ["RANK"] == "1":
            raise RuntimeError("rank one gives up")
        distributed_client().blocking_key_value_get("never/set", 600_000)
    """)
    env = dict(NODES="2", GPUS="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
               TILESCALE_HEARTBEAT_TIMEOUT="60")  # so that only the watchdog can stop node 0 this soon
    procs = [start_launcher(script, cpu_env(**env, NODE_RANK=str(node))) for node in (0, 1)]
    codes, outs, seconds = finish(procs, timeout=120)
    assert codes == [PEER_FAILED_STATUS, 1], outs
    assert seconds < 30, outs
    assert "[rank 0] [jax_tilescale] rank 1 failed: RuntimeError: rank one gives up" in outs[0]
    assert "[launch] rank 0 (node 0) stopped (status 79) because another rank failed" in outs[0]


def _plain_pair(tmp_path, body: str, timeout: float = 120):
    port = free_port()
    script = write_script(tmp_path, f"import sys\nrank = int(sys.argv[1])\nPORT = {port}\n" + body)
    procs = [start([sys.executable, str(script), str(r)], cpu_env()) for r in (0, 1)]
    return finish(procs, timeout)


def test_plain_launch_rank_that_dies_silently_is_caught_by_the_heartbeat(tmp_path):
    """os._exit leaves no message: JAX's heartbeat, bounded by runtime.initialize, stops the survivor."""
    codes, outs, seconds = _plain_pair(tmp_path, """
import os, time
from jax_tilescale.runtime import initialize
from jax_tilescale._jax_compat import distributed_client
initialize(f"127.0.0.1:{PORT}", 2, rank, heartbeat_timeout=2)
if rank == 1:
    time.sleep(0.5)
    os._exit(1)
distributed_client().blocking_key_value_get("never/set", 600_000)
""")
    assert codes[1] == 1
    assert codes[0] not in (0, None), outs[0]  # JAX aborts it (SIGABRT)
    assert seconds < 30, outs
    assert re.search(r"stopped sending heartbeats\):\s*\S*\b1\b", outs[0]), outs[0]  # names task (= rank) 1


def test_plain_launch_rank_that_raises_stops_its_peer_at_once(tmp_path):
    """A plain jax.distributed.initialize plus watchdog.install(): the failing rank does not sit in JAX's
    shutdown barrier, and its peer learns who failed and why within about a second."""
    codes, outs, seconds = _plain_pair(tmp_path, """
import jax
from jax_tilescale._jax_compat import distributed_client
jax.distributed.initialize(f"127.0.0.1:{PORT}", 2, rank, heartbeat_timeout_seconds=60)
from jax_tilescale.runtime import watchdog
watchdog.install()
if rank == 1:
    raise ValueError("bad input on rank one")
distributed_client().blocking_key_value_get("never/set", 600_000)
""")
    assert codes == [PEER_FAILED_STATUS, 1], outs
    assert seconds < 20, outs
    assert "ValueError: bad input on rank one" in outs[1]  # its own traceback
    assert "[jax_tilescale] rank 1 failed: ValueError: bad input on rank one" in outs[0]
    assert "stopping rank 0 (exit status 79) because rank 1 failed" in outs[0]


def test_a_terminated_launcher_stops_its_ranks_first(tmp_path):
    """SIGTERM to the launcher (a batch system, `timeout`): its ranks, in sessions of their own, must not outlive
    it. They end at once: JAX's preemption service, which would swallow SIGTERM, is off in the launcher's ranks."""
    pids = tmp_path / "pids"
    pids.mkdir()
    script = write_script(tmp_path, f"""
        import os, time
        open(os.path.join({str(pids)!r}, str(os.getpid())), "w").close()
        time.sleep(600)
    """)
    launcher = start_launcher(script, cpu_env(), "-n", "2")
    deadline = time.monotonic() + 60
    while len(list(pids.iterdir())) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    t0 = time.monotonic()
    launcher.send_signal(signal.SIGTERM)
    (code,), (out,), _ = finish([launcher], timeout=60)
    assert code == 128 + signal.SIGTERM and "received SIGTERM; stopping every rank" in out, out
    assert time.monotonic() - t0 < 4  # no 5 s grace spent waiting for a rank that ignores SIGTERM
    for pid in (int(p.name) for p in pids.iterdir()):
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
