"""Exceptions of jax_tilescale (a leaf module: every layer may import it)."""

from __future__ import annotations

from typing import Any

# Exit status of a rank that the watchdog (runtime/watchdog.py) stopped because another rank failed;
# the launcher (launch_report.py) reads it as a knock-on, never as the cause.
PEER_FAILED_STATUS = 79


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


class WaitTimeoutError(KernelRuntimeError):
    """A wait on the GPU (signal_wait_until, wait_*, a barrier or collective) was not satisfied within
    the wait timeout (`kernel(wait_timeout_s=)`, $TILESCALE_WAIT_TIMEOUT_S). The message names the
    kernel, the PE, the statement and its source line, the word's value and the expectation; `fault`
    holds the record's fields. Raised in the main thread by the runtime's watcher
    (runtime/wait_timeout.py)."""

    fault: dict | None = None


class KernelCheckError(KernelRuntimeError):
    """A run-time check failed in a kernel generated call-free (codegen/call_free.py: it cannot printf):
    a PE or index out of range, a peer not load/store reachable. The kernel trapped, so this process's
    CUDA context is no longer usable. The message names the kernel, the PE, the source line, what failed
    and the values; `fault` holds the record's fields. Raised in the main thread by the runtime's
    watcher (runtime/wait_timeout.py), like WaitTimeoutError."""

    fault: dict | None = None


class InterpreterTimeoutError(KernelRuntimeError):
    """The interpreter's time limit (InterpretOptions.timeout_s) ran out while the kernel was still
    running or a PE never started its part: slow, not blocked (a DeadlockError is reported at once).
    The message says where each PE was (statement, line, loop iterations) and how to raise the limit."""


class RaceError(KernelRuntimeError):
    """Two accesses to the same memory, one a write, that no synchronisation orders (interpreter)."""


class LaunchError(TileScaleError):
    """The process layout or environment cannot run distributed kernels (names the fix)."""


class CompileError(TileScaleError):
    """nvcc failed on generated code; names the generated source file."""


class PerformanceWarning(UserWarning):
    """A kernel compiled for the GPU in a slower form than its code asks for or than the GPU allows: a GEMM
    loop took the mma.sync or the portable lowering instead of the Hopper one, a ring got fewer stages to
    fit in shared memory, `pingpong=True` was not taken. The message names the kernel, each loop's source
    line and the reason (the same lines head the generated source). Issued when the kernel is compiled for
    the GPU (Python shows each distinct message once by default);
    `warnings.filterwarnings("ignore", category=jax_tilescale.PerformanceWarning)` silences it."""


def raisable_without_arguments(err: BaseException) -> type[BaseException]:
    """A subclass of `type(err)` whose instances, made without arguments, carry `err`'s message and
    attributes: what `PyThreadState_SetAsyncExc` needs (it raises a class, instantiated with no
    arguments, in another thread). `except type(err)` and every base of it still match, and the
    class prints under the same module and name."""
    cls = type(err)
    args = err.args
    attrs = dict(vars(err))

    def __init__(self: BaseException, *given: Any) -> None:
        BaseException.__init__(self, *(given or args))
        self.__dict__.update(attrs)

    return type(cls.__name__, (cls,), {
        "__init__": __init__,
        "__module__": cls.__module__,
        "__qualname__": cls.__qualname__,
        "__doc__": cls.__doc__,
    })
