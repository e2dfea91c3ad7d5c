"""Raising an error in another thread: how errors found outside the calling thread reach the user.

A kernel fails in a thread JAX or XLA owns (the interpreter's host callbacks, the GPU runtime's
watcher). An exception raised there would come back as XLA's `JaxRuntimeError` status string, or
not at all. Instead the error is queued in the main thread with `PyThreadState_SetAsyncExc`, the
mechanism of Ctrl-C's KeyboardInterrupt: the main thread raises it at its next Python
instruction, normally as the jitted call, `block_until_ready` or the read of a result that
waited for the kernel returns. It is raised as the documented type (a subclass made per error
that carries the message and attributes: `errors.raisable_without_arguments`), so `except
ts.DeadlockError` matches. A leaf module: every layer may import it.
"""

from __future__ import annotations

import ctypes
import sys
import threading
from types import FrameType

from . import _jax_compat
from .errors import raisable_without_arguments


def raise_in_main_thread(err: BaseException) -> bool:
    """Queues `err` in the main thread (raised there at its next Python instruction). False if there is
    no main thread left to raise it in.

    Called from a host callback that runs ON the main thread (a one-device computation runs its
    callbacks inline, in the thread that made the call), the error cannot be raised inside the
    callback: it would fail the callback and come back as XLA's status string. It is raised instead
    in the frame that called into XLA, as soon as that call returns, so it comes out of the jitted
    call itself; errors of other callbacks of the same computation are dropped meanwhile (the first
    error wins)."""
    main = threading.main_thread()
    if not main.is_alive() or main.ident is None:
        return False
    cls = raisable_without_arguments(err)
    if main.ident != threading.get_ident():
        return _set_async_exc(main.ident, cls)
    callback_frames = _jax_compat.host_callback_frames(sys._getframe(1))
    if not callback_frames:  # not inside a host callback: raised as this call returns
        return _set_async_exc(main.ident, cls)
    with _lock:
        if main.ident in _armed:
            return True
        _armed.add(main.ident)
    _raise_when_back_in(callback_frames[-1].f_back, main.ident, cls)
    return True


_lock = threading.Lock()
_armed: set[int] = set()  # threads with an error waiting for their call into XLA to return


def _raise_when_back_in(caller: FrameType | None, ident: int, cls: type[BaseException]) -> None:
    """Queues `cls` in this thread once Python runs in frame `caller` again (the frame that called into
    XLA), seen by a profile hook on this thread; the previous hook, if any, keeps being called."""
    previous = sys.getprofile()

    def hook(frame: FrameType, event: str, arg: object) -> None:
        if previous is not None:
            previous(frame, event, arg)
        if frame is caller or caller is None:
            sys.setprofile(previous)
            with _lock:
                _armed.discard(ident)
            _set_async_exc(ident, cls)  # raised at the caller's next instruction

    sys.setprofile(hook)


def _set_async_exc(ident: int, cls: type[BaseException]) -> bool:
    return ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), ctypes.py_object(cls)) == 1
