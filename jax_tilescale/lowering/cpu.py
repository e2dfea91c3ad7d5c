"""The CPU lowering (and `interpret=True` anywhere): the kernel runs in the interpreter through a
host callback, one call per device, each with that device's inputs as numpy arrays.

Errors. A kernel that fails in the interpreter (DeadlockError, RaceError, KernelRuntimeError)
fails in XLA's callback threads; raised there, XLA would turn it into a `JaxRuntimeError` status
string and keep it in the failed computation's runtime token, which JAX's exit handler raises
again ("Exception ignored in atexit callback"). So the callback catches it: every device returns
poisoned outputs (NaN, an integer's maximum), the computation completes normally, and the error
that started the failure is raised in the main thread as its documented type, message and
attributes intact (`async_raise`), once per execution however many devices failed. It is
queued before any output is ready, so it is raised at the latest when the main thread waits for
a result (`block_until_ready`, `np.asarray`); with one device it is raised from the jitted call
itself. A call of a multi-device computation returns before its callbacks run whatever
`jax_cpu_enable_async_dispatch` says (checked on JAX 0.10.2), so the error may also land just
after `f(x)` returns: wait for the result inside the `try` block. A later call runs normally. A program
that ends right after catching the error does not end under callbacks still running: Python's exit
waits for them (callback_exit.py).
"""

from __future__ import annotations

import sys
import threading
import traceback
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np

from .. import _jax_compat
from ..async_raise import raise_in_main_thread
from ..errors import KernelRuntimeError, TileScaleError
from ..interpret import InterpreterSession, InterpretOptions
from ..interpret.memory import poisoned
from ..launch_env import check_interpreter_launch
from .callback_exit import IN_FLIGHT
from .primitive import CallSpec

_EXECUTIONS_REMEMBERED = 64  # failed executions whose error was raised (later reports of them are dropped)


def lower_interpret(ctx: Any, pe_info: Any, *args: Any, call: CallSpec) -> Sequence[Any]:
    """MLIR for `tilescale_call` that runs the kernel in a new interpreter session, one host callback
    per device. Under shard_map every mesh axis must be manual (kernel.py nests a partially manual
    call in a shard_map over the remaining axes)."""
    # PEs of one launch in several processes would wait for each other until the timeout: refuse at once.
    check_interpreter_launch(call.kernel.name, _jax_compat.lowering_mesh(ctx), call.kernel.mesh_axes)
    options = call.interpret if isinstance(call.interpret, InterpretOptions) else InterpretOptions()
    runner = InterpretedCall(InterpreterSession(call.kernel, options, call.replicated))
    # Aliased outputs are returned in their inputs' buffers (operand 0 is pe_info).
    aliases = {i + 1: j for i, j in call.kernel.aliases}
    return _jax_compat.emit_host_callback(ctx, runner, [pe_info, *args], operand_output_aliases=aliases)


class InterpretedCall:
    """The host callback of one lowered call site: runs a device's part of a launch in the
    interpreter, and turns a failure into poisoned outputs plus one error in the main thread."""

    def __init__(self, session: InterpreterSession):
        self.session = session
        self._lock = threading.Lock()
        # A device's k-th call belongs to the k-th execution of the compiled computation (the
        # session pairs launches the same way), which is how failures of one execution are grouped.
        self._calls: dict[tuple[Hashable, int], int] = {}
        self._failed: OrderedDict[int, BaseException] = OrderedDict()

    def __call__(self, info: np.ndarray, *arrays: np.ndarray) -> tuple[np.ndarray, ...]:
        pe, team = int(info[0]), int(info[1])
        with self._lock:
            execution = self._calls.get((team, pe), 0)
            self._calls[(team, pe)] = execution + 1
        with IN_FLIGHT:  # Python's exit waits for it (callback_exit.py)
            try:
                return tuple(self.session.run(pe, team, [np.asarray(a) for a in arrays]))
            except Exception as err:
                self._report(execution, err)
                return tuple(poisoned(b.shape, b.dtype) for b in self.session.kernel.outputs)

    def _report(self, execution: int, err: Exception) -> None:
        """Raises the first failure of `execution` in the main thread; the other devices' reports of
        it (the same error, or "PE k failed: ...") are dropped."""
        error = self._documented(err)
        with self._lock:
            if execution in self._failed:
                return
            self._failed[execution] = error
            while len(self._failed) > _EXECUTIONS_REMEMBERED:
                self._failed.popitem(last=False)
        if not raise_in_main_thread(error):  # no main thread to raise it in: at least say it
            print(f"[jax_tilescale] {type(error).__name__}: {error}", file=sys.stderr, flush=True)

    def _documented(self, err: Exception) -> TileScaleError:
        """The error that started the failure, as a TileScaleError. A PE that stops because another
        failed raises its own error `from` the original, which is what the user needs to see."""
        if not isinstance(err, TileScaleError):
            detail = "".join(traceback.format_exception(err)).rstrip()
            wrapped = KernelRuntimeError(
                f"kernel {self.session.kernel.name!r}: internal error in the interpreter "
                f"({type(err).__name__}: {err}); please report it with this traceback:\n{detail}"
            )
            return wrapped
        while isinstance(err.__cause__, TileScaleError):
            err = err.__cause__
        return err
