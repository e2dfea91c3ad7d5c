"""Facts about this process that every part of the runtime asks for, without starting anything:
its rank and the job's size, jax.distributed's client, its node, seconds from the environment.

A leaf of runtime/ (the watchdog and the distributed start both build on it)."""

from __future__ import annotations

import os
import socket
from typing import Any

from .. import _jax_compat
from ..errors import LaunchError

NODE_ID_VAR = "TILESCALE_NODE_ID"


def env_seconds(name: str, default: float) -> float:
    """A positive number of seconds from the environment, else `default`; a bad value is a LaunchError."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if value <= 0:
        raise LaunchError(f"{name}={raw!r} must be a positive number of seconds")
    return value


def node_id() -> str:
    """This process's node: $TILESCALE_NODE_ID (set by the launcher), else the host name."""
    return os.environ.get(NODE_ID_VAR) or socket.gethostname()


def distributed_client() -> Any:
    """jax.distributed's client (key-value store), or None in a single-process run."""
    return _jax_compat.distributed_client()


def rank_and_world() -> tuple[int, int]:
    """(jax.process_index(), jax.process_count()), from jax.distributed's state when it is up, so that asking
    does not start XLA's backends."""
    started = _jax_compat.distributed_rank_and_world()
    if started is not None:
        return started
    import jax

    return jax.process_index(), jax.process_count()
