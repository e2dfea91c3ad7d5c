"""Test set-up shared by every suite: 8 simulated CPU devices (must precede JAX's backends)."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

from jax_tilescale.platform import request_cpu_devices

request_cpu_devices(8)

ROOT = Path(__file__).resolve().parent.parent


def load_example(name: str):
    """Imports examples/<name>.py as a module (examples are scripts, not a package)."""
    path = ROOT / "examples" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"examples_{name}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


os.environ.setdefault("JAX_TILESCALE_TESTING", "1")
