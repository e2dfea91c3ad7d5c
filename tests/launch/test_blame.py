"""The launcher names the rank that failed first, not a peer that failed because of it a moment later.

Rank 1 dies (os._exit, SIGKILL, an exception) while rank 0 waits for it in a collective; rank 0's collective
fails within milliseconds, often before the launcher has looked at rank 1. The fast test plays the race many
times with plain-Python ranks (no jax: a TCP connection stands for the collective, and rank 0 fails with the
words of Gloo's error); the jax tests below play it with real jax.distributed ranks and Gloo collectives.
"""

from __future__ import annotations

import io
import sys

import pytest

from jax_tilescale import launch
from jax_tilescale.launch_options import LaunchConfig

from .procs import cpu_env, finish, free_port, start, write_script

GLOO_ERROR = ("ValueError: UNKNOWN: Gloo all-reduce failed: [external/gloo/gloo/transport/tcp/pair.cc:547] "
              "Connection closed by peer [127.0.0.1]:{port}")

# Rank 1 connects to rank 0; both say they are ready (rank 0 first, then it tells rank 1, so that a loaded
# machine cannot let rank 1 die before rank 0 has said so: CI failed once so, 2026-12-01); rank 1 then dies
# (argv[2] says how) while rank 0 blocks on the connection, as it would in a collective, and fails as soon
# as the connection closes.
RACE_RANK = """
import os, signal, socket, sys, time
rank, port, how = int(os.environ["RANK"]), int(sys.argv[1]), sys.argv[2]
if rank == 0:
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", port))
    server.listen()
    conn, _ = server.accept()
    print("rank 0 ready", flush=True)
    conn.sendall(b"r")
    data = conn.recv(1)  # the collective: waits for rank 1
    raise ValueError({error!r}.format(port=port) + f" (recv returned {{data!r}})")
deadline = time.monotonic() + 30
while True:
    try:
        conn = socket.create_connection(("127.0.0.1", port))
        break
    except OSError:
        if time.monotonic() > deadline:
            raise
        time.sleep(0.01)
conn.recv(1)  # rank 0 has said it is ready
print("rank 1 ready", flush=True)
time.sleep(0.05)
if how == "exit":
    os._exit(3)
if how == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
raise ValueError("boom on rank one")
"""
EXPECTED = {"exit": (3, "exited with status 3"), "kill": (128 + 9, "was killed by signal SIGKILL (9)"),
            "raise": (1, "exited with status 1")}


@pytest.fixture(scope="module")
def race_script(tmp_path_factory):
    path = tmp_path_factory.mktemp("race") / "race_rank.py"
    path.write_text(RACE_RANK.format(error=GLOO_ERROR.split(": ", 1)[1]))
    return path


@pytest.mark.parametrize("repeat", range(20))
@pytest.mark.parametrize("how", ["exit", "kill", "raise"])
def test_the_rank_that_died_first_is_blamed_not_its_peer(monkeypatch, race_script, how, repeat):
    monkeypatch.setattr(launch, "WORKER", (sys.executable,))  # plain Python ranks: the supervision alone
    monkeypatch.setenv("TILESCALE_PLATFORM", "cpu")
    out = io.StringIO()
    cfg = LaunchConfig(2, 1, 0, "127.0.0.1", free_port(), timeout_s=60)
    status = launch.run(cfg, [str(race_script), str(free_port()), how], out)
    text = out.getvalue()
    code, words = EXPECTED[how]
    assert "[rank 0] rank 0 ready" in text and "[rank 1] rank 1 ready" in text, text
    assert status == code, text
    assert f"[launch] rank 1 (node 0) {words}; its last" in text, text
    # Rank 0 either failed on its own (then it is named as a knock-on) or was stopped before it could.
    assert ("[launch] rank 0 (node 0) also failed after it: exited with status 1, a knock-on (Connection closed by "
            "peer)" in text) or "[launch] stopped the rank still running: 0" in text, text


# --- with jax.distributed and Gloo's collectives --------------------------------------------------------

JAX_RACE = """
import os, signal, sys, time
import jax, numpy as np
from jax.experimental import multihost_utils
from jax.sharding import PartitionSpec as P
how, where = sys.argv[1], sys.argv[2]
mesh = jax.make_mesh((jax.device_count(),), ("x",))
psum = jax.jit(jax.shard_map(lambda a: jax.lax.psum(a, "x"), mesh=mesh, in_specs=P("x"), out_specs=P()))
x = multihost_utils.host_local_array_to_global_array(np.ones((1,), np.float32), mesh, P("x"))
print("warm", psum(x))  # Gloo's connections are made
multihost_utils.sync_global_devices("warm")
if jax.process_index() == 1:
    time.sleep(0.2)
    if how == "exit":
        os._exit(3)
    if how == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    raise ValueError("boom on rank one")
try:
    if where == "psum":
        while True:
            psum(x).block_until_ready()
    multihost_utils.sync_global_devices("never")
except Exception:
    if where == "disguised":  # a knock-on whose words say nothing of the peer: the moments decide
        raise RuntimeError("the training step failed") from None
    raise
"""


@pytest.mark.parametrize("how,where", [
    ("exit", "psum"), ("kill", "psum"), ("raise", "psum"),
    ("exit", "sync"), ("kill", "sync"), ("raise", "sync"),
    ("raise", "disguised"),
])
def test_jax_collective_peer_failure_blames_the_rank_that_died(tmp_path, how, where):
    script = write_script(tmp_path, JAX_RACE)
    env = cpu_env(TILESCALE_HEARTBEAT_TIMEOUT="60", TILESCALE_WATCHDOG_POLL="5")  # leave the race to Gloo
    launcher = start([sys.executable, "-m", "jax_tilescale.launch", "-n", "2", str(script), how, where], env)
    (code,), (out,), seconds = finish([launcher], timeout=180)
    want, words = EXPECTED[how]
    assert code == want, out
    assert f"[launch] rank 1 (node 0) {words}" in out, out
    assert "[launch] rank 0 (node 0) exited" not in out and seconds < 120, out
