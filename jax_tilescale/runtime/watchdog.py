"""Stopping every process of a job soon after one of them fails, with a message that names it.

A rank that raises publishes a line in jax.distributed's key-value store (`report_failure`) before it
exits; every other rank runs a daemon thread that polls that directory (default every 0.5 s) and,
when it sees another rank's failure, prints it and ends its own process with PEER_FAILED_STATUS --
even while its main thread is blocked in a collective, a key-value wait or a GPU kernel waiting for
the dead peer. Ranks that die without a word (a signal, os._exit, a machine lost) are caught by JAX's
heartbeat instead (runtime/distributed.py bounds it: $TILESCALE_HEARTBEAT_TIMEOUT, default 30 s),
which aborts the survivors with "The following tasks are unhealthy ...: <task>" (task = rank).

`install()` also replaces sys.excepthook: after a plain `jax.distributed.initialize`, an uncaught
exception would otherwise leave the failed process in JAX's shutdown barrier (up to 5 minutes) while
its peers wait for it; instead it prints the traceback, reports, and exits at once (status 1) without
running atexit handlers. Set TILESCALE_WATCHDOG=0 to keep Python's behaviour.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import traceback
from collections.abc import Callable
from types import TracebackType
from typing import Any

from ..errors import PEER_FAILED_STATUS
from .poller import Poller
from .process import distributed_client, env_seconds, rank_and_world

ENABLE_VAR = "TILESCALE_WATCHDOG"
POLL_VAR = "TILESCALE_WATCHDOG_POLL"
DEFAULT_POLL_S = 0.5
_FAILED_DIR = "jax_tilescale/failed"
_MAX_MESSAGE = 2000

_lock = threading.Lock()  # the excepthook's installation
_poller = Poller("jax_tilescale-watchdog")
_exit: Callable[[int], Any] = os._exit  # replaced by tests


def enabled() -> bool:
    return os.environ.get(ENABLE_VAR, "1").strip().lower() not in ("0", "false", "no", "off")


def _rank() -> int:
    return rank_and_world()[0]


def report_failure(message: str, client: Any = None, rank: int | None = None) -> bool:
    """Tells the other ranks that this one failed (best effort; False if there is no one to tell)."""
    client = client if client is not None else distributed_client()
    if client is None:
        return False
    rank = _rank() if rank is None else rank
    try:
        client.key_value_set(f"{_FAILED_DIR}/{rank}", message[:_MAX_MESSAGE] or "failed", allow_overwrite=True)
        return True
    except Exception:  # the coordinator may be gone already; the heartbeat still bounds the others' wait
        return False


def describe_exception(exc: BaseException) -> str:
    """The last line of a traceback: `ValueError: boom`."""
    return "".join(traceback.format_exception_only(type(exc), exc)).strip().splitlines()[-1]


def failed_ranks(client: Any) -> dict[int, str]:
    """{rank: message} of every rank that reported a failure so far."""
    out = {}
    for key, value in client.key_value_dir_get(_FAILED_DIR):
        try:
            out[int(key.rsplit("/", 1)[1])] = value
        except ValueError:
            continue
    return out


def install(client: Any = None, rank: int | None = None, poll_s: float | None = None) -> bool:
    """Starts the watchdog in this process (idempotent); False when single-process or disabled."""
    if not enabled():
        return False
    client = client if client is not None else distributed_client()
    if client is None:
        return False
    rank = _rank() if rank is None else rank
    poll = poll_s if poll_s is not None else env_seconds(POLL_VAR, DEFAULT_POLL_S)
    if not _poller.start(lambda: _check(client, rank), poll):
        return True
    with _lock:
        if not getattr(sys.excepthook, "_jax_tilescale", False):
            sys.excepthook = _make_excepthook(sys.excepthook, client, rank)
    return True


def stop(timeout_s: float = 2.0) -> None:
    """Stops the polling thread (at exit, before jax.distributed shuts its client down)."""
    _poller.stop(timeout_s)


atexit.register(stop)  # registered after jax's own atexit handler, so it runs before jax.distributed.shutdown


def _check(client: Any, rank: int) -> bool:
    """One poll: ends this process when another rank has reported a failure; False ends the polling."""
    try:
        failed = failed_ranks(client)
    except Exception:
        # The coordinator is gone (JAX itself reports that and stops this process) or shutting down.
        return False
    others = sorted(r for r in failed if r != rank)
    if others and not _poller.stopping:
        culprit = others[0]
        print(
            f"[jax_tilescale] rank {culprit} failed: {failed[culprit]}\n"
            f"[jax_tilescale] stopping rank {rank} (exit status {PEER_FAILED_STATUS}) because rank {culprit} "
            "failed",
            file=sys.stderr,
            flush=True,
        )
        sys.stdout.flush()
        _exit(PEER_FAILED_STATUS)
        return False  # only reached when tests replace _exit
    return True


def _make_excepthook(previous: Any, client: Any, rank: int) -> Any:
    def hook(kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
        try:
            previous(kind, exc, tb)
        finally:
            report_failure(describe_exception(exc), client, rank)
            sys.stdout.flush()
            sys.stderr.flush()
            _exit(130 if issubclass(kind, KeyboardInterrupt) else 1)

    hook._jax_tilescale = True  # type: ignore[attr-defined]
    return hook
