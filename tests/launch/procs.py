"""Starting launchers and plain processes for the multi-process tests (CPU, loopback)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from jax_tilescale.launch_options import free_port as _free_port

# Variables a surrounding launcher (or CI) may have set that would leak into the processes under test.
_LEAKY = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "NODE_RANK", "NODES", "GPUS", "MASTER_ADDR", "MASTER_PORT",
          "XLA_FLAGS", "TILESCALE_NODE_ID", "TILESCALE_INIT_TIMEOUT", "TILESCALE_HEARTBEAT_TIMEOUT",
          "JAX_COORDINATOR_ADDRESS", "CUDA_VISIBLE_DEVICES")


def cpu_env(**extra: str) -> dict[str, str]:
    """One CPU device per process, no GPU, nothing inherited from an outer job."""
    env = {k: v for k, v in os.environ.items() if k not in _LEAKY and not k.startswith("TILESCALE_")}
    env.update(TILESCALE_PLATFORM="cpu", JAX_PLATFORMS="cpu", PYTHONUNBUFFERED="1")
    env.update(extra)
    return env


def write_script(tmp_path: Path, body: str, name: str = "script.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


def free_port() -> int:
    return _free_port()


def start(argv: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def start_launcher(script: Path, env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return start([sys.executable, "-m", "jax_tilescale.launch", *args, str(script)], env)


def finish(procs: list[subprocess.Popen[str]], timeout: float) -> tuple[list[int], list[str], float]:
    """(exit statuses, outputs, seconds until the last one ended); kills everything past `timeout`."""
    t0 = time.monotonic()
    outs = []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=max(1.0, timeout - (time.monotonic() - t0)))[0])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    return [p.returncode for p in procs], outs, time.monotonic() - t0


def records(output: str, tag: str = "R ") -> list[dict]:
    """JSON records printed as `<tag>{...}` (after the launcher's `[rank i] ` prefix, if any)."""
    found = []
    for line in output.splitlines():
        _, sep, rest = line.partition(tag + "{")
        if sep:
            found.append(json.loads("{" + rest))
    return found
