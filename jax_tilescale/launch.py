"""`python -m jax_tilescale.launch -n N script.py [args]`: one process per GPU.

NVSHMEM has one PE per process, so a distributed kernel runs as a multi-process JAX program.
This launcher starts the processes of this node, each of which initialises `jax.distributed`
(and NVSHMEM, on GPUs) before running the script (see `_worker.py`). Output lines are
prefixed with the rank; if one rank fails, the others are stopped and the launcher exits with
that rank's status.

Environment (the seed's variables; flags override them):
  GPUS         processes on this node (-n)            NODES        number of nodes (--nodes)
  NODE_RANK    this node's index (--node-rank)        MASTER_ADDR  coordinator host (--master-addr)
  MASTER_PORT  coordinator port (--master-port)
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO

# NVLink multicast must stay off on the machines we run on (DESIGN.md); children inherit these.
SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
STOP_GRACE_S = 5.0


@dataclass(frozen=True)
class LaunchConfig:
    procs_per_node: int
    nodes: int
    node_rank: int
    master_addr: str
    master_port: int
    timeout_s: float | None

    @property
    def world_size(self) -> int:
        return self.procs_per_node * self.nodes

    def rank_env(self, local_rank: int) -> dict[str, str]:
        rank = self.node_rank * self.procs_per_node + local_rank
        env = {
            "TILESCALE_COORDINATOR": f"{self.master_addr}:{self.master_port}",
            "TILESCALE_NUM_PROCESSES": str(self.world_size),
            "TILESCALE_PROCESS_ID": str(rank),
            "TILESCALE_LOCAL_RANK": str(local_rank),
            "RANK": str(rank),
            "LOCAL_RANK": str(local_rank),
            "WORLD_SIZE": str(self.world_size),
            "PYTHONUNBUFFERED": "1",
        }
        if self.nodes == 1:
            # The NVSHMEM unique-id bootstrap talks over a socket; one node needs only loopback.
            env["NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME"] = os.environ.get("NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME", "lo")
        return env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_VALUE_OPTIONS = ("-n", "--nproc", "--nodes", "--node-rank", "--master-addr", "--master-port", "--timeout")


def _split_argv(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """(launcher options, command): the command starts at the script or at `-m`.

    Done by hand because argparse would read the script's own options (`--m 4096`) as ours.
    """
    argv = list(argv)
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "-m" or not arg.startswith("-"):
            break
        name = arg.split("=", 1)[0]
        if name in _VALUE_OPTIONS and "=" not in arg:
            i += 2
        elif name in _VALUE_OPTIONS or arg in ("-h", "--help") or (arg.startswith("-n") and arg[2:].isdigit()):
            i += 1
        else:
            break  # unknown option: let argparse report it
    return argv[:i], argv[i:]


def parse_args(argv: Sequence[str]) -> tuple[LaunchConfig, list[str]]:
    env = os.environ
    own, command = _split_argv(argv)
    if command[:1] and command[0].startswith("-") and command[0] != "-m":
        own, command = own + command[:1], command[1:]
    p = argparse.ArgumentParser(
        prog="python -m jax_tilescale.launch",
        usage="%(prog)s [-n N] [--nodes N] [--node-rank R] [--master-addr A] [--master-port P] [--timeout S] "
        "(script.py | -m module) [args...]",
        description="Run SCRIPT in one process per GPU, with jax.distributed and NVSHMEM initialised.",
        allow_abbrev=False,
    )
    p.add_argument("-n", "--nproc", type=int, default=int(env["GPUS"]) if env.get("GPUS") else None,
                   help="processes (GPUs) on this node; default $GPUS, else every visible GPU")
    p.add_argument("--nodes", type=int, default=int(env.get("NODES", "1")))
    p.add_argument("--node-rank", type=int, default=int(env.get("NODE_RANK", "0")))
    p.add_argument("--master-addr", default=env.get("MASTER_ADDR", "127.0.0.1"))
    p.add_argument("--master-port", type=int, default=int(env["MASTER_PORT"]) if "MASTER_PORT" in env else None)
    p.add_argument("--timeout", type=float, default=None, help="stop every rank after this many seconds")
    ns = p.parse_args(own)
    if not command or command == ["-m"]:
        p.error("name a script to run (or -m MODULE)")
    gpus = _visible_gpu_count()
    nproc = ns.nproc if ns.nproc is not None else (gpus or 1)
    if gpus and nproc > gpus:
        p.error(f"-n {nproc} processes but this node has {gpus} visible GPUs (one process per GPU)")
    if nproc < 1 or ns.nodes < 1 or not 0 <= ns.node_rank < ns.nodes:
        p.error(f"need -n >= 1, --nodes >= 1 and 0 <= --node-rank < --nodes (got {nproc}, {ns.nodes}, {ns.node_rank})")
    port = ns.master_port
    if port is None:
        if ns.nodes > 1:
            p.error("multi-node runs need MASTER_PORT (or --master-port), the same on every node")
        port = _free_port()
    return LaunchConfig(nproc, ns.nodes, ns.node_rank, ns.master_addr, port, ns.timeout), command


def _visible_gpu_count() -> int:
    vis = os.environ.get("CUDA_VISIBLE_DEVICES")
    if vis is not None:
        return len([v for v in vis.split(",") if v.strip()])
    try:
        return len([d for d in os.listdir("/dev") if d.startswith("nvidia") and d[6:].isdigit()])
    except OSError:
        return 0


def _pump(stream: IO[bytes], prefix: str, out: IO[str], lock: threading.Lock) -> None:
    for raw in iter(stream.readline, b""):
        line = raw.decode(errors="replace").rstrip("\n")
        with lock:
            out.write(f"{prefix}{line}\n")
            out.flush()


def _stop_all(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + STOP_GRACE_S
    for p in procs:
        try:
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()


def run(cfg: LaunchConfig, command: list[str], out: IO[str] = sys.stdout) -> int:
    """Starts the ranks of this node and supervises them; returns the exit status."""
    lock = threading.Lock()
    procs: list[subprocess.Popen[bytes]] = []
    pumps: list[threading.Thread] = []
    for local in range(cfg.procs_per_node):
        env = {**os.environ, **SAFE_ENV, **cfg.rank_env(local)}
        env.update({k: v for k, v in SAFE_ENV.items()})  # never let the caller turn multicast back on
        proc = subprocess.Popen(
            [sys.executable, "-m", "jax_tilescale._worker", *command],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, so stopping it stops its children too
        )
        procs.append(proc)
        t = threading.Thread(target=_pump, args=(proc.stdout, f"[rank {env['RANK']}] ", out, lock), daemon=True)
        t.start()
        pumps.append(t)
    start = time.monotonic()
    status = 0
    try:
        while True:
            codes = [p.poll() for p in procs]
            failed = [(i, c) for i, c in enumerate(codes) if c not in (None, 0)]
            if failed:
                i, status = failed[0]
                rank = cfg.node_rank * cfg.procs_per_node + i
                with lock:
                    out.write(f"[launch] rank {rank} exited with status {status}; stopping the other ranks\n")
                    out.flush()
                break
            if all(c == 0 for c in codes):
                break
            if cfg.timeout_s is not None and time.monotonic() - start > cfg.timeout_s:
                with lock:
                    out.write(f"[launch] timeout after {cfg.timeout_s:.0f} s; stopping every rank\n")
                    out.flush()
                status = 124
                break
            time.sleep(0.05)
    except KeyboardInterrupt:
        status = 130
    finally:
        _stop_all(procs)
        for t in pumps:
            t.join(timeout=2.0)
    return status if status >= 0 else 128 - status


def main(argv: Sequence[str] | None = None) -> int:
    cfg, command = parse_args(sys.argv[1:] if argv is None else argv)
    return run(cfg, command)


if __name__ == "__main__":
    sys.exit(main())
