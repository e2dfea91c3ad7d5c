"""The interpreter's host callbacks at interpreter exit: Python waits for the ones still running.

A kernel's error reaches the main thread while other devices' callbacks of the same execution may
still be running (lowering/cpu.py raises it as soon as the first device fails, and a multi-device
call returns before its callbacks end). A program that catches the error and ends at once then
finalizes Python under those callbacks, and the first one to come back into Python aborts the
process ("Fatal Python error: PyGILState_Release: thread state ... must be current when
releasing", exit code -6, one exit in twenty with four such programs running at once:
tests/jax/test_interpreter_errors.py). So an exit hook waits until no callback is running, then
sleeps out the last few bytecodes of the last one to end (after it returns into XLA's code, which
holds the interpreter lock until it is done, Python cannot finalize under it). Registered when this
module is imported, after JAX's own exit hook, so it runs before it.
"""

from __future__ import annotations

import atexit
import sys
import threading
import time
from types import TracebackType

EXIT_WAIT_S = 30.0  # how long the exit waits for callbacks still running before it gives up, saying so
TAIL_S = 0.05  # after the last callback ended: long enough for its last bytecodes, short for a normal exit


class CallbacksInFlight:
    """Counts the host callbacks running now (`with IN_FLIGHT:` around each)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._running = 0
        self._last_end = 0.0

    def __enter__(self) -> None:
        with self._cond:
            self._running += 1

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None,
                 tb: TracebackType | None) -> None:
        with self._cond:
            self._running -= 1
            self._last_end = time.monotonic()
            self._cond.notify_all()

    def drain(self, timeout: float = EXIT_WAIT_S) -> bool:
        """Waits until no callback runs and the last one has had TAIL_S to get back into XLA; False
        (after printing why) if some are still running after `timeout` seconds."""
        with self._cond:
            done = self._cond.wait_for(lambda: self._running == 0, timeout)
            running, tail = self._running, self._last_end + TAIL_S - time.monotonic()
        if not done:
            print(f"[jax_tilescale] exiting with {running} interpreter callback(s) still running after "
                  f"{timeout:.0f} s", file=sys.stderr, flush=True)
            return False
        if tail > 0:
            time.sleep(tail)  # releases the interpreter lock: the callback finishes its return
        return True


IN_FLIGHT = CallbacksInFlight()
atexit.register(IN_FLIGHT.drain)
