"""`python -m jax_tilescale.launch -n N script.py [args]`: one process per GPU.

NVSHMEM has one PE per process, so a distributed kernel runs as a multi-process JAX program.
This launcher starts the processes of this node, each of which initialises `jax.distributed`
(and NVSHMEM, on GPUs) before running the script (see `_worker.py`). Output lines are
prefixed with the rank; if one rank fails, the others are stopped and the launcher exits with
the status of the rank that failed first, after naming it (exit status or signal) and repeating
its last lines (launch_report.py says how the first is told from the ranks that failed because of it).

Several nodes: run the launcher on each node with the same NODES, GPUS, MASTER_ADDR and
MASTER_PORT and NODE_RANK = 0..NODES-1. Node k's local rank i is global rank k * GPUS + i;
rank 0 (on node 0) hosts jax.distributed's coordinator at MASTER_ADDR:MASTER_PORT. A rank that
fails on one node stops the ranks of every node (runtime/watchdog.py; JAX's heartbeat for ranks
that die without a word).

Environment (flags override them; launch_options.py checks them; docs/environment.md lists every variable):
  GPUS         processes on this node (-n)            NODES        number of nodes (--nodes)
  NODE_RANK    this node's index (--node-rank)        MASTER_ADDR  coordinator host (--master-addr)
  MASTER_PORT  coordinator port (--master-port)       TILESCALE_INIT_TIMEOUT  seconds to join (--init-timeout)
"""

from __future__ import annotations

import os
import queue
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO

from .launch_env import LAUNCH_COMMAND_VAR, cpu_processes_note
from .launch_options import LaunchConfig, parse_args, visible_gpu_count
from .launch_report import (
    FAILURE_RECORD_VAR,
    PEER_FAILED_STATUS,
    TAIL_LINES,
    Outcome,
    describe_status,
    failure_report,
    first_failure,
    is_noise,
    knock_on_reason,
    read_failure_record,
    timeout_report,
)

__all__ = ["PEER_FAILED_STATUS", "LaunchConfig", "describe_status", "main", "parse_args", "run"]

# NVLink multicast must stay off on the machines we run on (DESIGN.md); children inherit these.
SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
# Defaults of each rank's environment, unless the caller sets them. JAX's preemption service catches SIGTERM
# (for TPU preemption) so that a rank would ignore the launcher's stop signal; ranks of this launcher end on it.
RANK_ENV_DEFAULTS = {"JAX_ENABLE_PREEMPTION_SERVICE": "false"}
STOP_GRACE_S = 5.0
# After a failure, how long ranks that are failing too (a failure record written, a knock-on seen) may take to end
# on their own before the others are stopped: stopping a rank that raised first would lose its own status.
SETTLE_S = 2.0
TIMEOUT_STATUS = 124
# What each rank runs, followed by the command (tests of the supervision alone run plain Python instead).
WORKER: tuple[str, ...] = (sys.executable, "-m", "jax_tilescale._worker")


@dataclass
class _Rank:
    rank: int
    proc: subprocess.Popen[bytes]
    tail: deque[str]
    record_path: str
    pump: threading.Thread | None = None
    waiter: threading.Thread | None = None
    status: int | None = None  # set by the waiter thread when the process has ended
    exit_time: float | None = None  # time.monotonic() then
    stopped: bool = False  # the launcher signalled it while it was still running
    # Its last lines when --timeout expired: what it was doing then, not what it printed while being
    # stopped (a rank whose coordinator went first prints the coordination service's errors).
    frozen_tail: tuple[str, ...] | None = None

    def outcome(self, lock: threading.Lock) -> Outcome:
        record = read_failure_record(self.record_path)
        with lock:  # its pump may still be adding lines
            tail = tuple(self.tail) if self.frozen_tail is None else self.frozen_tail
        if record is None:
            return Outcome(self.rank, self.status, self.exit_time, tail=tail, stopped=self.stopped)
        return Outcome(self.rank, self.status, self.exit_time, record.time, tuple(record.messages), tail,
                       self.stopped, record.status)


def _pump(stream: IO[bytes], prefix: str, out: IO[str], lock: threading.Lock, tail: deque[str]) -> None:
    for raw in iter(stream.readline, b""):
        line = raw.decode(errors="replace").rstrip("\n")
        with lock:
            if line.strip() and not is_noise(line):
                tail.append(line)
            out.write(f"{prefix}{line}\n")
            out.flush()


def _wait(r: _Rank, events: queue.Queue[_Rank]) -> None:
    """Waits for one rank's process: the moment it ended is measured here, not at the next look of a poll."""
    status = r.proc.wait()
    r.exit_time = time.monotonic()
    r.status = status
    events.put(r)


def _has_exited(r: _Rank) -> bool:
    """Whether the process has ended, even if its waiter has not recorded it yet (does not reap it)."""
    if r.status is not None:
        return True
    try:
        return os.waitid(os.P_PID, r.proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True  # reaped by its waiter a moment ago
    except (AttributeError, OSError):
        return False  # no waitid here: treat it as running


def _signal_group(r: _Rank, sig: signal.Signals) -> None:
    try:
        os.killpg(r.proc.pid, sig)
    except ProcessLookupError:
        pass


def _settle(ranks: list[_Rank], events: queue.Queue[_Rank], lock: threading.Lock) -> None:
    """After a failure, waits (up to SETTLE_S) while some rank is failing without having ended yet (it wrote a
    failure record), or while every failure seen is a knock-on of another (whose rank may still be ending)."""
    deadline = time.monotonic() + SETTLE_S
    joined: set[int] = set()
    while time.monotonic() < deadline:
        ended = [r for r in ranks if r.status is not None]
        if len(ended) == len(ranks):
            return
        for r in ended:
            if r.rank not in joined and r.pump is not None:
                r.pump.join(timeout=0.2)  # its last lines, for the knock-on words
                joined.add(r.rank)
        failing = [r for r in ranks if r.status is None and os.path.exists(r.record_path)]
        if not failing and not all(knock_on_reason(r.outcome(lock)) for r in ended if r.status):
            return
        try:
            events.get(timeout=max(0.0, min(0.05, deadline - time.monotonic())))
        except queue.Empty:
            pass


def _stop(ranks: list[_Rank]) -> None:
    """Stops the ranks still running (SIGTERM, then SIGKILL after STOP_GRACE_S) and waits for every rank.

    A rank that has written a failure record was failing already: it stays a failure, not a rank stopped."""
    for r in ranks:
        if not _has_exited(r):
            r.stopped = not os.path.exists(r.record_path)
            _signal_group(r, signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_S
    for r in ranks:
        if r.waiter is not None:
            r.waiter.join(timeout=max(0.0, deadline - time.monotonic()))
    for r in ranks:
        if r.waiter is not None and r.waiter.is_alive():
            _signal_group(r, signal.SIGKILL)
            r.waiter.join()


def _say(out: IO[str], lock: threading.Lock, text: str) -> None:
    with lock:
        out.write("".join(f"[launch] {line}\n" for line in text.splitlines()))
        out.flush()


def _start_rank(cfg: LaunchConfig, local: int, command: list[str], out: IO[str], lock: threading.Lock,
                events: queue.Queue[_Rank], records: str) -> _Rank:
    rank = cfg.node_rank * cfg.procs_per_node + local
    record_path = os.path.join(records, f"rank{rank}.json")
    env = {**RANK_ENV_DEFAULTS, **os.environ, **cfg.rank_env(local),
           FAILURE_RECORD_VAR: record_path, LAUNCH_COMMAND_VAR: shlex.join(command)}
    env.update(SAFE_ENV)  # never let the caller turn multicast back on
    proc = subprocess.Popen(
        [*WORKER, *command],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group, so stopping it stops its children too
    )
    r = _Rank(rank, proc, deque(maxlen=TAIL_LINES), record_path)
    r.pump = threading.Thread(target=_pump, args=(proc.stdout, f"[rank {r.rank}] ", out, lock, r.tail), daemon=True)
    r.pump.start()
    r.waiter = threading.Thread(target=_wait, args=(r, events), daemon=True)
    r.waiter.start()
    return r


def run(cfg: LaunchConfig, command: list[str], out: IO[str] = sys.stdout) -> int:
    """Starts the ranks of this node and supervises them; returns the exit status."""
    lock = threading.Lock()
    events: queue.Queue[_Rank] = queue.Queue()
    ranks: list[_Rank] = []
    records = tempfile.mkdtemp(prefix="jax_tilescale_launch_")
    ending = ""  # "failed", "timeout", or how the launcher itself was stopped
    status = 0
    try:
        cpu_chosen = os.environ.get("TILESCALE_PLATFORM", "").lower() == "cpu"
        if cfg.world_size > 1 and visible_gpu_count() == 0 and not cpu_chosen:
            _say(out, lock, cpu_processes_note(command, cfg.world_size))
        for local in range(cfg.procs_per_node):
            ranks.append(_start_rank(cfg, local, command, out, lock, events, records))
        deadline = None if cfg.timeout_s is None else time.monotonic() + cfg.timeout_s
        running = len(ranks)
        while running:
            left = 0.5 if deadline is None else min(0.5, deadline - time.monotonic())
            try:
                r = events.get(timeout=max(0.0, left))
            except queue.Empty:
                if deadline is not None and time.monotonic() >= deadline:
                    ending, status = "timeout", TIMEOUT_STATUS
                    with lock:
                        for rank in ranks:
                            rank.frozen_tail = tuple(rank.tail)
                    break
                continue
            running -= 1
            if r.status != 0:
                ending = "failed"
                _settle(ranks, events, lock)
                break
    except KeyboardInterrupt:
        ending, status = "interrupted", 130
    except _Terminated as e:
        _say(out, lock, f"received {signal.Signals(e.signum).name}; stopping every rank")
        ending, status = "terminated", 128 + e.signum
    finally:
        _stop(ranks)
        for r in ranks:
            if r.pump is not None:
                r.pump.join(timeout=2.0)
        outcomes = [r.outcome(lock) for r in ranks]  # records are read before their directory goes
        shutil.rmtree(records, ignore_errors=True)
    if ending == "failed":
        culprit = first_failure(outcomes)
        if culprit is not None and culprit.reported_status is not None:
            status = culprit.reported_status
            _say(out, lock, failure_report(outcomes, cfg.node_rank))
    elif ending == "timeout":
        _say(out, lock, timeout_report(outcomes, cfg.node_rank, cfg.timeout_s or 0.0))
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
