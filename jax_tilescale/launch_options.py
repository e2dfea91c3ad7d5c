"""The launcher's options: parsing, the environment variables they stand for, and their checks.

Every value is checked before any rank starts, whether it came from a flag or from a variable: a bad one
is a usage error (exit status 2, argparse's style) that names the flag or the variable, the value and
the range allowed. The coordinator's port is also checked for being free on node 0, where rank 0 will
listen on it: a busy port would otherwise end rank 0 with a gRPC error (or a crash) after it started.
"""

from __future__ import annotations

import argparse
import errno
import math
import os
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NoReturn

USAGE = (
    "%(prog)s [-n N] [--nodes N] [--node-rank R] [--master-addr A] [--master-port P] [--timeout S] "
    "[--init-timeout S] [--devices I,J,...] (script.py | -m module) [args...]"
)
MAX_PORT = 65535


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


def visible_gpu_count() -> int:
    """GPUs this node's ranks may use: CUDA_VISIBLE_DEVICES's entries, else the /dev/nvidiaN devices."""
    vis = os.environ.get("CUDA_VISIBLE_DEVICES")
    if vis is not None:
        return len([v for v in vis.split(",") if v.strip()])
    try:
        return len([d for d in os.listdir("/dev") if d.startswith("nvidia") and d[6:].isdigit()])
    except OSError:
        return 0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_problem(port: int) -> str | None:
    """Why a server could not listen on `port` on every interface, as jax.distributed's coordinator does; None if
    it could. SO_REUSEADDR as gRPC sets it: connections of an earlier job left in TIME_WAIT do not count."""
    for family, host in ((socket.AF_INET6, "::"), (socket.AF_INET, "0.0.0.0")):
        try:
            s = socket.socket(family, socket.SOCK_STREAM)
        except OSError:
            continue  # no IPv6 here
        with s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((host, port))
            except OSError as e:
                if e.errno == errno.EADDRINUSE:
                    return "is already in use on this node"
                if e.errno == errno.EACCES:
                    return "needs privileges this user lacks (ports below 1024)"
                continue  # e.g. IPv6 disabled: the IPv4 bind decides
    return None


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


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m jax_tilescale.launch",
        usage=USAGE,
        description="Run SCRIPT in one process per GPU, with jax.distributed and NVSHMEM initialised.",
        allow_abbrev=False,
    )
    # Values stay strings here: _Options checks them, with messages that name the range allowed.
    p.add_argument("-n", "--nproc", help="processes (GPUs) on this node, 1 .. visible GPUs; default $GPUS, "
                   "else every visible GPU (1 without GPUs)")
    p.add_argument("--nodes", help="nodes, >= 1; default $NODES, else 1")
    p.add_argument("--node-rank", help="this node's index 0 .. nodes-1; default $NODE_RANK, else 0")
    p.add_argument("--master-addr", help="address of node 0, where rank 0 hosts the coordinator; default "
                   "$MASTER_ADDR, else 127.0.0.1 (one node only)")
    p.add_argument("--master-port", help=f"coordinator port, 1 .. {MAX_PORT}, free on node 0; default "
                   "$MASTER_PORT, else a free port (one node only)")
    p.add_argument("--timeout", help="stop every rank after this many seconds (> 0), naming the ranks still "
                   "running (exit status 124)")
    p.add_argument("--init-timeout", help="seconds (> 0) for every rank to join the job before failing; default "
                   "$TILESCALE_INIT_TIMEOUT, else 120")
    p.add_argument("--devices", help="GPU ordinals (among the visible ones) of this node's ranks, one per rank, "
                   "e.g. 2,3; default $TILESCALE_DEVICES, else 0..N-1")
    return p


class _Options:
    """One option's value with where it came from, for messages: `--master-port 0` or `MASTER_PORT=0`."""

    def __init__(self, parser: argparse.ArgumentParser, ns: argparse.Namespace, env: Mapping[str, str]):
        self.parser, self.ns, self.env = parser, ns, env

    def raw(self, dest: str, flag: str, var: str | None) -> tuple[str | None, str]:
        value = getattr(self.ns, dest)
        if value is not None:
            return value, f"{flag} {value}"
        if var and self.env.get(var, "").strip():
            return self.env[var].strip(), f"{var}={self.env[var].strip()} (for {flag})"
        return None, flag

    def error(self, message: str) -> NoReturn:
        self.parser.error(message)

    def integer(self, dest: str, flag: str, var: str | None, lo: int, hi: int | None, what: str) -> int | None:
        value, source = self.raw(dest, flag, var)
        if value is None:
            return None
        try:
            number = int(value)
        except ValueError:
            number = None
        if number is None or number < lo or (hi is not None and number > hi):
            allowed = f"from {lo} to {hi}" if hi is not None else f"of at least {lo}"
            self.error(f"{source}: must be an integer {allowed} ({what})")
        return number

    def seconds(self, dest: str, flag: str, var: str | None) -> float | None:
        value, source = self.raw(dest, flag, var)
        if value is None:
            return None
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        if not (math.isfinite(number) and number > 0):
            self.error(f"{source}: must be a positive number of seconds (e.g. {flag} 600)")
        return number


def parse_args(argv: Sequence[str], env: Mapping[str, str] | None = None) -> tuple[LaunchConfig, list[str]]:
    """The configuration of this node's launch and the command to run; a usage error (exit 2) if invalid."""
    env = os.environ if env is None else env
    own, command = _split_argv(argv)
    if command[:1] and command[0].startswith("-") and command[0] != "-m":
        own, command = own + command[:1], command[1:]
    p = _parser()
    o = _Options(p, p.parse_args(own), env)
    if not command or command == ["-m"]:
        p.error("name a script to run (or -m MODULE)")

    gpus = visible_gpu_count()
    nodes = o.integer("nodes", "--nodes", "NODES", 1, None, "the number of nodes") or 1
    node_rank = o.integer("node_rank", "--node-rank", "NODE_RANK", 0, nodes - 1, f"this node's index; {nodes} nodes")
    node_rank = node_rank or 0
    what = f"processes on this node, one per GPU: it has {gpus} visible GPUs" if gpus else "processes on this node"
    nproc = o.integer("nproc", "-n", "GPUS", 1, gpus or None, what)
    devices = _devices(o, nproc, gpus)
    if nproc is None:
        nproc = len(devices) if devices is not None else (gpus or 1)

    timeout = o.seconds("timeout", "--timeout", None)
    init_timeout = o.seconds("init_timeout", "--init-timeout", "TILESCALE_INIT_TIMEOUT")
    addr, addr_source = o.raw("master_addr", "--master-addr", "MASTER_ADDR")
    if addr is not None and (not addr or any(c.isspace() for c in addr) or _has_port(addr)):
        p.error(f"{addr_source}: give the host only (a name or an address), and its port with --master-port")
    port = o.integer("master_port", "--master-port", "MASTER_PORT", 1, MAX_PORT, "the coordinator's port")
    if nodes > 1:
        missing = [name for name, v in (("MASTER_ADDR", addr), ("MASTER_PORT", port)) if v is None]
        if missing:
            p.error(f"multi-node runs need MASTER_ADDR and MASTER_PORT (or --master-addr, --master-port), the same on "
                    f"every node: the address of node 0 and a free port there; missing: {', '.join(missing)}")
    if port is None:
        port = free_port()
    elif node_rank == 0 and (problem := port_problem(port)):
        _, source = o.raw("master_port", "--master-port", "MASTER_PORT")
        p.error(f"{source}: port {port} {problem} (node 0, where rank 0 hosts the jax.distributed "
                "coordinator). Choose another free port with --master-port or MASTER_PORT (the "
                "same on every node), e.g. one that `python -c 'import socket; s = socket.socket(); "
                "s.bind((\"\", 0)); print(s.getsockname()[1])'` prints; on one node, leave it out to get a free one")
    config = LaunchConfig(nproc, nodes, node_rank, addr or "127.0.0.1", port, timeout, init_timeout, devices)
    return config, command


def _has_port(addr: str) -> bool:
    """`host:29500` (but not an IPv6 address such as ::1)."""
    host, sep, port = addr.rpartition(":")
    return bool(sep) and port.isdigit() and (":" not in host or host.endswith("]"))


def _devices(o: _Options, nproc: int | None, gpus: int) -> tuple[int, ...] | None:
    value, source = o.raw("devices", "--devices", "TILESCALE_DEVICES")
    if value is None:
        return None
    try:
        devices = tuple(int(d) for d in value.split(","))
    except ValueError:
        o.error(f"{source}: must be comma-separated GPU ordinals, one per process, e.g. --devices 2,3")
    want = nproc if nproc is not None else len(devices)
    top = f"0 .. {gpus - 1} (this node has {gpus} visible GPUs)" if gpus else "0 or more"
    if len(devices) != want or len(set(devices)) != len(devices):
        o.error(f"{source}: must name {want} different GPUs, one per process (-n {want}), each in {top}")
    bad = [d for d in devices if d < 0 or (gpus and d >= gpus)]
    if bad:
        o.error(f"{source}: GPU {bad[0]} is not one of this node's GPUs: each must be in {top}")
    return devices
