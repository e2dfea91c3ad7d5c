"""The process layout of a multi-process job: starting `jax.distributed` with bounded waits, and knowing
each process's global rank, local rank and node, whoever launched it (our launcher, SLURM, mpirun, a
user's own script).

The global rank is `jax.process_index()` (and the NVSHMEM PE, see nvshmem_bootstrap.py). Processes on
one node are told apart by a node id that every process publishes in jax.distributed's key-value
store: the host name, or the launcher's `TILESCALE_NODE_ID` (which also names the node rank, so that
two "nodes" on one machine stay two nodes). The local rank is the position among the processes of
one node, in global-rank order, which is what the launcher's `LOCAL_RANK` is too; when the launcher's
variables are present they must agree with JAX, or the layout is refused with a LaunchError.
"""

from __future__ import annotations

import inspect
import os
import socket
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any, NamedTuple

from ..errors import LaunchError
from . import watchdog as _watchdog
from .process import distributed_client, env_seconds, node_id, rank_and_world

INIT_TIMEOUT_VAR = "TILESCALE_INIT_TIMEOUT"
HEARTBEAT_TIMEOUT_VAR = "TILESCALE_HEARTBEAT_TIMEOUT"
DEFAULT_INIT_TIMEOUT_S = 120.0
DEFAULT_HEARTBEAT_TIMEOUT_S = 30
INIT_TIMEOUT_STATUS = 3  # exit status of a process that could not join the job in time
# JAX's own connect deadline is set this much past ours, so that our clear message comes first.
_JAX_GRACE_S = 30
_NODE_KEY = "jax_tilescale/node"
_LAUNCH_HINT = "launch one process per GPU with `python -m jax_tilescale.launch -n N script.py`"


class ProcessLayout(NamedTuple):
    rank: int  # global rank: jax.process_index(), the NVSHMEM PE
    local_rank: int  # index among the processes of this node (global-rank order)
    world_size: int  # jax.process_count()
    local_size: int  # processes on this node
    hosts: int = 1  # machines (host names) of the job: peers on one machine are load/store reachable


# --- starting jax.distributed --------------------------------------------------------------------


def initialize(
    coordinator_address: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    local_device_ids: int | Sequence[int] | None = None,
    *,
    init_timeout: float | None = None,
    heartbeat_timeout: int | None = None,
    watchdog: bool = True,
    **kwargs: Any,
) -> ProcessLayout | None:
    """`jax.distributed.initialize` with bounded waits; what `python -m jax_tilescale.launch` runs in each rank.

    Arguments as jax.distributed.initialize's (None: detected by JAX, e.g. under SLURM or mpirun), plus:
    init_timeout: seconds to wait for every process to join (default $TILESCALE_INIT_TIMEOUT, else 120).
      A process that cannot reach the coordinator, or whose peers never come, exits with a message
      saying so (status 3) instead of JAX's abort.
    heartbeat_timeout: seconds after which a silent (dead) process makes every other one exit with an
      error naming it (default $TILESCALE_HEARTBEAT_TIMEOUT, else 30; JAX's own default is 100).
    watchdog: also stop every process within a second when one raises (runtime/watchdog.py).

    Other keyword arguments go to jax.distributed.initialize as they are (and win over the bounds above).
    Returns the process layout (None when jax.distributed made no client, i.e. a single process).
    """
    import jax

    timeout = float(init_timeout) if init_timeout is not None else env_seconds(INIT_TIMEOUT_VAR, DEFAULT_INIT_TIMEOUT_S)
    heartbeat = (
        int(heartbeat_timeout)
        if heartbeat_timeout is not None
        else max(1, round(env_seconds(HEARTBEAT_TIMEOUT_VAR, DEFAULT_HEARTBEAT_TIMEOUT_S)))
    )
    where = coordinator_address or os.environ.get("JAX_COORDINATOR_ADDRESS")
    who = "this process" if process_id is None else f"rank {process_id}"
    deadline = time.monotonic() + timeout
    if where and process_id not in (None, 0):
        _wait_for_coordinator(where, who, timeout, deadline)
    alarm = _InitAlarm(who, where, num_processes, timeout, max(0.0, deadline - time.monotonic()))
    bounds = {"initialization_timeout": int(timeout) + _JAX_GRACE_S, "heartbeat_timeout_seconds": heartbeat}
    accepted = inspect.signature(jax.distributed.initialize).parameters
    try:
        jax.distributed.initialize(
            coordinator_address=coordinator_address,
            num_processes=num_processes,
            process_id=process_id,
            local_device_ids=local_device_ids,
            **{**{k: v for k, v in bounds.items() if k in accepted}, **kwargs},
        )
    finally:
        alarm.cancel()
    # Nothing here may start XLA's backends (jax.process_index() would): the script may still configure them.
    client = distributed_client()
    if client is None:
        return None
    rank, _ = rank_and_world()
    _publish_node(client, rank)
    if watchdog:
        _watchdog.install(client, rank)
    return process_layout()


def _wait_for_coordinator(address: str, who: str, timeout: float, deadline: float) -> None:
    """Waits until the coordinator accepts TCP connections; a LaunchError naming it if it never does."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    last: OSError | None = None
    while True:
        try:
            with socket.create_connection((host, int(port)), timeout=2.0):
                return
        except OSError as e:
            last = e
        if time.monotonic() >= deadline:
            break
        time.sleep(0.2)
    raise LaunchError(
        f"{who} could not reach the jax.distributed coordinator at {address} within {timeout:g} s ({last}). "
        "The coordinator runs in rank 0 (node 0): start node 0's launcher with the same NODES, MASTER_ADDR "
        "and MASTER_PORT, make MASTER_ADDR an address of node 0 that this node can reach (not 127.0.0.1 "
        f"across machines), check firewalls; wait longer with --init-timeout or {INIT_TIMEOUT_VAR}"
    )


class _InitAlarm:
    """Ends the process with a clear message if jax.distributed.initialize has not returned by the deadline.

    JAX would abort later with "another task died"; the usual cause is ranks that were never started.
    """

    def __init__(self, who: str, where: str | None, num: int | None, timeout: float, left: float):
        self._message = (
            f"[jax_tilescale] {who} waited {timeout:g} s for the other processes of the job"
            f"{f' ({num} in all)' if num else ''} to connect to the jax.distributed coordinator"
            f"{f' at {where}' if where else ''}: some were never started or cannot reach it. Start every "
            "node's launcher with the same NODES, GPUS, MASTER_ADDR and MASTER_PORT (NODE_RANK 0..NODES-1); "
            f"wait longer with --init-timeout or {INIT_TIMEOUT_VAR}"
        )
        self._timer = threading.Timer(left, self._fire)
        self._timer.daemon = True
        self._timer.start()

    def _fire(self) -> None:
        print(self._message, file=sys.stderr, flush=True)
        sys.stdout.flush()
        os._exit(INIT_TIMEOUT_STATUS)

    def cancel(self) -> None:
        self._timer.cancel()


# --- the layout ------------------------------------------------------------------------------------

_lock = threading.Lock()
_layout: ProcessLayout | None = None
_published: set[int] = set()


def _publish_node(client: Any, rank: int) -> None:
    if rank not in _published:
        # "<node>\n<host name>": the launcher may run several nodes on one machine (tools/gpu_test.sh)
        client.key_value_set(f"{_NODE_KEY}/{rank}", f"{node_id()}\n{socket.gethostname()}", allow_overwrite=True)
        _published.add(rank)


def check_launch_env() -> None:
    """LaunchError if the launcher's RANK / WORLD_SIZE disagree with jax.distributed (cheap, not collective)."""
    rank, world = rank_and_world()
    _agree("RANK", rank, "jax.process_index()")
    _agree("WORLD_SIZE", world, "jax.process_count()")


def _agree(var: str, actual: int, source: str) -> None:
    raw = os.environ.get(var, "").strip()
    if not raw:
        return
    try:
        expected = int(raw)
    except ValueError:
        raise LaunchError(f"{var}={raw!r} is not an integer") from None
    if expected != actual:
        raise LaunchError(
            f"{var} is {expected} but {source} is {actual}: the launcher's variables and jax.distributed disagree. "
            f"Pass process_id=int(os.environ['RANK']) and num_processes=int(os.environ['WORLD_SIZE']) to "
            f"jax.distributed.initialize (or let JAX detect them), or {_LAUNCH_HINT}; a stale {var} left in the "
            "environment by another launcher causes this too"
        )


def process_layout(timeout_s: float = 60.0) -> ProcessLayout:
    """(global rank, local rank, world size, local size) of this process, from jax.distributed.

    Checked against the launcher's RANK, LOCAL_RANK and WORLD_SIZE when they are set (LaunchError if they
    disagree). Started through jax_tilescale (launcher or runtime.initialize) it never waits; after a plain
    `jax.distributed.initialize`, the first call on each process publishes its node, so every process must
    call it (nvshmem_bootstrap.init does).
    """
    global _layout
    with _lock:
        if _layout is not None:
            return _layout
        check_launch_env()
        rank, world = rank_and_world()
        if world == 1:
            layout = ProcessLayout(0, 0, 1, 1)
        else:
            client = distributed_client()
            if client is None:
                raise LaunchError(f"jax.process_count() is {world} but jax.distributed has no client; {_LAUNCH_HINT}")
            _publish_node(client, rank)
            published = [_node_and_host(v) for v in _all_nodes(client, world, timeout_s)]
            nodes = [node for node, _ in published]
            same = [r for r in range(world) if nodes[r] == nodes[rank]]
            layout = ProcessLayout(rank, same.index(rank), world, len(same), len({host for _, host in published}))
        _agree("LOCAL_RANK", layout.local_rank, "this process's index among the processes of its node")
        _layout = layout
        return layout


def _node_and_host(published: str) -> tuple[str, str]:
    """(node, host name) of a rank's published value (the node stands for the host where none is given)."""
    node, _, host = published.partition("\n")
    return node, host or node


def _all_nodes(client: Any, world: int, timeout_s: float) -> list[str]:
    nodes: dict[int, str] = {}
    for key, value in client.key_value_dir_get(_NODE_KEY):
        nodes[int(key.rsplit("/", 1)[1])] = value
    for r in range(world):
        if r not in nodes:
            try:
                nodes[r] = client.blocking_key_value_get(f"{_NODE_KEY}/{r}", int(timeout_s * 1000))
            except Exception as e:  # JAX raises its own runtime error on the deadline
                raise LaunchError(
                    f"rank {r} did not publish its node within {timeout_s:g} s: call "
                    "jax_tilescale.runtime.process_layout() in every process (or start them with "
                    f"jax_tilescale.runtime.initialize or the launcher) ({e})"
                ) from e
    return [nodes[r] for r in range(world)]


def _reset_for_tests() -> None:
    global _layout
    _layout = None
    _published.clear()
