"""Registration of the XLA FFI target `jax_tilescale_launch` (the C++ handler in xla_ffi/)."""

from __future__ import annotations

import importlib
import threading
from types import ModuleType

import jax

from ..errors import LaunchError

TARGET_NAME = "jax_tilescale_launch"
# The same handler with its execute stage declared compatible with XLA's command buffers (CUDA graphs):
# for launches with no host work that changes per call (codegen's CudaModule.graph_safe).
GRAPH_TARGET_NAME = "jax_tilescale_launch_graph"
PLATFORM = "CUDA"
API_VERSION = 1

_lock = threading.Lock()
_registered = False

_NOT_BUILT = (
    "the GPU extension jax_tilescale._ffi was not built: reinstall with the CUDA toolkit present (nvcc on PATH) "
    "and NVSHMEM available, e.g. `pip install -e '.[gpu]'` (add `--no-build-isolation` on an offline machine "
    "that already has jaxlib, nanobind, scikit-build-core and nvidia-nvshmem-cu13); the install log says why it "
    "was skipped. On CPU, run kernels with interpret=True instead."
)


def load_extension() -> ModuleType:
    """Imports jax_tilescale._ffi, turning a missing or unloadable extension into a LaunchError with the fix."""
    try:
        return importlib.import_module("jax_tilescale._ffi")
    except ModuleNotFoundError as e:
        if e.name not in (None, "jax_tilescale._ffi"):
            raise
        raise LaunchError(_NOT_BUILT) from e
    except ImportError as e:
        # Built but unloadable: most often a build for another Python, or a stale build directory.
        raise LaunchError(
            f"the GPU extension jax_tilescale._ffi is installed but cannot be loaded ({e}); rebuild it from this "
            "checkout with `pip install -e .` (it needs no GPU libraries at import time)"
        ) from e


def ensure_registered() -> ModuleType:
    """Registers the launch target and its state type with JAX once per process; returns the extension.

    Safe on a machine without GPUs: JAX keeps CUDA registrations until a CUDA backend appears.
    """
    global _registered
    with _lock:
        ext = load_extension()
        if _registered:
            return ext
        for type_name, registration in ext.type_registrations().items():
            jax.ffi.register_ffi_type(type_name, registration, platform=PLATFORM)
        jax.ffi.register_ffi_target(TARGET_NAME, ext.registrations(), platform=PLATFORM, api_version=API_VERSION)
        jax.ffi.register_ffi_target(
            GRAPH_TARGET_NAME, ext.registrations(graph=True), platform=PLATFORM, api_version=API_VERSION
        )
        # The handler's PE when NVSHMEM is not initialised (plain launches); the bootstrap makes the NVSHMEM PE
        # equal to this too.
        ext.set_default_pe(jax.process_index())
        # Turns waits that give up on the GPU into WaitTimeoutError in the main thread (wait_timeout.py).
        from .wait_timeout import start_watcher

        start_watcher(ext)
        _registered = True
        return ext


def is_registered() -> bool:
    return _registered
