"""Exceptions of jax_tilescale (a leaf module: every layer may import it)."""

from __future__ import annotations

from typing import Any


class TileScaleError(Exception):
    """Base of every error raised by jax_tilescale."""


class KernelTraceError(TileScaleError):
    """A kernel is malformed; found while tracing or verifying it. Names the user's line."""

    def __init__(self, message: str, loc: Any = None):
        self.message = message
        self.loc = loc
        where = f"{loc}: " if loc is not None and getattr(loc, "lineno", 0) else ""
        super().__init__(f"{where}{message}")


class KernelRuntimeError(TileScaleError):
    """A kernel failed while running (interpreter or GPU): bad PE, out-of-bounds access, ..."""


class DeadlockError(KernelRuntimeError):
    """Every live PE is waiting for something no one will do."""


class RaceError(KernelRuntimeError):
    """Two accesses to the same memory, one a write, that no synchronisation orders (interpreter)."""


class LaunchError(TileScaleError):
    """The process layout or environment cannot run distributed kernels (names the fix)."""


class CompileError(TileScaleError):
    """nvcc failed on generated code; names the generated source file."""
