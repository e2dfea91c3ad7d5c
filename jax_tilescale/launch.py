"""`python -m jax_tilescale.launch -n N script.py [args]`: one process per GPU.

NVSHMEM has one PE per process, so a distributed kernel runs as a multi-process JAX program.
This launcher starts the processes of this node, each of which initialises `jax.distributed`
(and NVSHMEM, on GPUs) before running the script (see `_worker.py`). Output lines are
prefixed with the rank; if one rank fails, the others are stopped and the launcher exits with
that rank's status, after naming it (exit status or signal) and repeating its last lines.

Several nodes: run the launcher on each node with the same NODES, GPUS, MASTER_ADDR and
MASTER_PORT and NODE_RANK = 0..NODES-1. Node k's local rank i is global rank k * GPUS + i;
rank 0 (on node 0) hosts jax.distributed's coordinator at MASTER_ADDR:MASTER_PORT. A rank that
fails on one node stops the ranks of every node (runtime/watchdog.py; JAX's heartbeat for ranks
that die without a word).

Environment (flags override them; docs/environment.md lists every variable):
  GPUS         processes on this node (-n)            NODES        number of nodes (--nodes)
  NODE_RANK    this node's index (--node-rank)        MASTER_ADDR  coordinator host (--master-addr)
  MASTER_PORT  coordinator port (--master-port)       TILESCALE_INIT_TIMEOUT  seconds to join (--init-timeout)
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO

from .runtime.watchdog import PEER_FAILED_STATUS  # a rank stopped because another rank failed

# NVLink multicast must stay off on the machines we run on (DESIGN.md); children inherit these.
SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
# Defaults of each rank's environment, unless the caller sets them. JAX's preemption service catches SIGTERM
# (for TPU preemption) so that a rank would ignore the launcher's stop signal; ranks of this launcher end on it.
RANK_ENV_DEFAULTS = {"JAX_ENABLE_PREEMPTION_SERVICE": "false"}
STOP_GRACE_S = 5.0
TAIL_LINES = 8  # last lines of a failed rank repeated in the launcher's report
_NOISE = re.compile(r"\s*(@\s+0x[0-9a-f]+|\*\*\* Check failure stack trace)")


@dataclass(frozen=True)
class LaunchConfig:
    procs_per_node: int
    nodes: int
    node_rank: int
    master_addr: str
    master_port: int
    timeout_s: float | None
    init_timeout_s: float | None = None
    devices: tuple[int, ...] | None = None  # GPU of each local rank (default: local rank i uses GPU i)

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
            "NODE_RANK": str(self.node_rank),
            # Tells nodes apart even when two "nodes" share a machine (runtime.process_layout uses it).
            "TILESCALE_NODE_ID": f"{socket.gethostname()}/node{self.node_rank}",
            "PYTHONUNBUFFERED": "1",
        }
        if self.init_timeout_s is not None:
            env["TILESCALE_INIT_TIMEOUT"] = f"{self.init_timeout_s:g}"
        if self.devices is not None:
            env["TILESCALE_DEVICE"] = str(self.devices[local_rank])
        if self.nodes == 1:
            # The NVSHMEM unique-id bootstrap talks over a socket; one node needs only loopback.
            env["NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME"] = os.environ.get("NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME", "lo")
        return env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_VALUE_OPTIONS = (
    "-n", "--nproc", "--nodes", "--node-rank", "--master-addr", "--master-port", "--timeout", "--init-timeout",
    "--devices",
)


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
        "[--init-timeout S] [--devices I,J,...] (script.py | -m module) [args...]",
        description="Run SCRIPT in one process per GPU, with jax.distributed and NVSHMEM initialised.",
        allow_abbrev=False,
    )
    p.add_argument("-n", "--nproc", type=int, default=int(env["GPUS"]) if env.get("GPUS") else None,
                   help="processes (GPUs) on this node; default $GPUS, else every visible GPU")
    p.add_argument("--nodes", type=int, default=int(env.get("NODES", "1")), help="nodes; default $NODES, else 1")
    p.add_argument("--node-rank", type=int, default=int(env.get("NODE_RANK", "0")),
                   help="this node's index 0..nodes-1; default $NODE_RANK, else 0")
    p.add_argument("--master-addr", default=env.get("MASTER_ADDR") or None,
                   help="address of node 0, where rank 0 hosts the coordinator; default $MASTER_ADDR, else 127.0.0.1 "
                   "(one node only)")
    p.add_argument("--master-port", type=int, default=int(env["MASTER_PORT"]) if env.get("MASTER_PORT") else None,
                   help="coordinator port; default $MASTER_PORT, else a free port (one node only)")
    p.add_argument("--timeout", type=float, default=None, help="stop every rank after this many seconds")
    p.add_argument("--init-timeout", type=float,
                   default=float(env["TILESCALE_INIT_TIMEOUT"]) if env.get("TILESCALE_INIT_TIMEOUT") else None,
                   help="seconds for every rank to join the job before failing; default $TILESCALE_INIT_TIMEOUT, "
                   "else 120")
    p.add_argument("--devices", default=env.get("TILESCALE_DEVICES") or None,
                   help="GPU ordinals (among the visible ones) of this node's ranks, one per rank, e.g. 2,3; "
                   "default $TILESCALE_DEVICES, else 0..N-1")
    ns = p.parse_args(own)
    if not command or command == ["-m"]:
        p.error("name a script to run (or -m MODULE)")
    gpus = _visible_gpu_count()
    nproc = ns.nproc if ns.nproc is not None else (gpus or 1)
    if gpus and nproc > gpus:
        p.error(f"-n {nproc} processes but this node has {gpus} visible GPUs (one process per GPU)")
    if nproc < 1 or ns.nodes < 1 or not 0 <= ns.node_rank < ns.nodes:
        p.error(f"need -n >= 1, --nodes >= 1 and 0 <= --node-rank < --nodes (got {nproc}, {ns.nodes}, {ns.node_rank})")
    devices = None
    if ns.devices is not None:
        try:
            devices = tuple(int(d) for d in ns.devices.split(",") if d.strip())
        except ValueError:
            p.error(f"--devices must be comma-separated GPU ordinals (got {ns.devices!r})")
        if ns.nproc is None:
            nproc = len(devices)
        if len(devices) != nproc or len(set(devices)) != len(devices) or min(devices) < 0:
            p.error(f"--devices {ns.devices} must name {nproc} different GPUs, one per process")
        if gpus and max(devices) >= gpus:
            p.error(f"--devices {ns.devices} names GPU {max(devices)} but this node has {gpus} visible GPUs")
    if ns.init_timeout is not None and ns.init_timeout <= 0:
        p.error(f"--init-timeout must be positive (got {ns.init_timeout:g})")
    port = ns.master_port
    if ns.nodes > 1:
        missing = [name for name, v in (("MASTER_ADDR", ns.master_addr), ("MASTER_PORT", port)) if v is None]
        if missing:
            p.error(f"multi-node runs need MASTER_ADDR and MASTER_PORT (or --master-addr, --master-port), the same on "
                    f"every node: the address of node 0 and a free port there; missing: {', '.join(missing)}")
    if port is None:
        port = _free_port()
    addr = ns.master_addr or "127.0.0.1"
    return LaunchConfig(nproc, ns.nodes, ns.node_rank, addr, port, ns.timeout, ns.init_timeout, devices), command


def _visible_gpu_count() -> int:
    vis = os.environ.get("CUDA_VISIBLE_DEVICES")
    if vis is not None:
        return len([v for v in vis.split(",") if v.strip()])
    try:
        return len([d for d in os.listdir("/dev") if d.startswith("nvidia") and d[6:].isdigit()])
    except OSError:
        return 0


@dataclass
class _Rank:
    rank: int
    proc: subprocess.Popen[bytes]
    tail: deque[str]
    pump: threading.Thread | None = None


def _pump(stream: IO[bytes], prefix: str, out: IO[str], lock: threading.Lock, tail: deque[str]) -> None:
    for raw in iter(stream.readline, b""):
        line = raw.decode(errors="replace").rstrip("\n")
        if line.strip() and not _is_noise(line):
            tail.append(line)
        with lock:
            out.write(f"{prefix}{line}\n")
            out.flush()


def _is_noise(line: str) -> bool:
    """Frames of a C++ check-failure stack (JAX's abort), which would crowd the report's last lines."""
    return bool(_NOISE.match(line))


def describe_status(code: int) -> str:
    """'exited with status 3', 'was killed by signal SIGKILL (9)', ..."""
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by signal {name} ({-code})"
    if code == PEER_FAILED_STATUS:
        return f"stopped (status {code}) because another rank failed (named in its last lines)"
    return f"exited with status {code}"


def _culprit(failed: list[_Rank]) -> _Rank:
    """The rank to blame among those that failed in one poll: not one that was stopped for another's failure."""
    def secondary(r: _Rank) -> bool:
        return r.proc.returncode in (PEER_FAILED_STATUS, -signal.SIGABRT, -signal.SIGTERM)

    return sorted(failed, key=lambda r: (secondary(r), r.rank))[0]


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


def _say(out: IO[str], lock: threading.Lock, text: str) -> None:
    with lock:
        out.write("".join(f"[launch] {line}\n" for line in text.splitlines()))
        out.flush()


def _start_rank(cfg: LaunchConfig, local: int, command: list[str], out: IO[str], lock: threading.Lock) -> _Rank:
    env = {**RANK_ENV_DEFAULTS, **os.environ, **SAFE_ENV, **cfg.rank_env(local)}
    env.update({k: v for k, v in SAFE_ENV.items()})  # never let the caller turn multicast back on
    proc = subprocess.Popen(
        [sys.executable, "-m", "jax_tilescale._worker", *command],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group, so stopping it stops its children too
    )
    r = _Rank(int(env["RANK"]), proc, deque(maxlen=TAIL_LINES))
    r.pump = threading.Thread(target=_pump, args=(proc.stdout, f"[rank {r.rank}] ", out, lock, r.tail), daemon=True)
    r.pump.start()
    return r


def run(cfg: LaunchConfig, command: list[str], out: IO[str] = sys.stdout) -> int:
    """Starts the ranks of this node and supervises them; returns the exit status."""
    lock = threading.Lock()
    ranks: list[_Rank] = []
    status = 0
    culprit: _Rank | None = None
    try:
        for local in range(cfg.procs_per_node):
            ranks.append(_start_rank(cfg, local, command, out, lock))
        start = time.monotonic()
        while True:
            codes = [r.proc.poll() for r in ranks]
            failed = [r for r, c in zip(ranks, codes) if c not in (None, 0)]
            if failed:
                culprit = _culprit(failed)
                status = culprit.proc.returncode
                others = "; stopping the other ranks" if len(ranks) > 1 else ""
                _say(out, lock, f"rank {culprit.rank} {describe_status(status)}{others}")
                break
            if all(c == 0 for c in codes):
                break
            if cfg.timeout_s is not None and time.monotonic() - start > cfg.timeout_s:
                _say(out, lock, f"timeout after {cfg.timeout_s:.0f} s; stopping every rank")
                status = 124
                break
            time.sleep(0.05)
    except KeyboardInterrupt:
        status = 130
    except _Terminated as e:
        _say(out, lock, f"received {signal.Signals(e.signum).name}; stopping every rank")
        status = 128 + e.signum
    finally:
        _stop_all([r.proc for r in ranks])
        for r in ranks:
            if r.pump is not None:
                r.pump.join(timeout=2.0)
    if culprit is not None:
        lines = list(culprit.tail)
        report = f"rank {culprit.rank} (node {cfg.node_rank}) {describe_status(status)}"
        if lines:
            report += f"; its last {len(lines)} lines:\n" + "\n".join(f"  | {line}" for line in lines)
        _say(out, lock, report)
    return status if status >= 0 else 128 - status


class _Terminated(Exception):
    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _raise_terminated(signum: int, frame: object) -> None:
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)  # once: stopping the ranks must not be interrupted by a second one
    raise _Terminated(signum)


def main(argv: Sequence[str] | None = None) -> int:
    cfg, command = parse_args(sys.argv[1:] if argv is None else argv)
    # A launcher stopped by SIGTERM or SIGHUP (a batch system, `timeout`, a closed terminal) stops its ranks
    # first: they run in sessions of their own and would outlive it, holding their GPUs.
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _raise_terminated)
    return run(cfg, command)


if __name__ == "__main__":
    sys.exit(main())
