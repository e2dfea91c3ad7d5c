"""A daemon thread that calls a function every few seconds until it is stopped or the function
says it is done. The rank watchdog (watchdog.py) and the device-wait watcher (wait_timeout.py)
each own one."""

from __future__ import annotations

import threading
from collections.abc import Callable


class Poller:
    """One named polling thread: `start` (idempotent), `stop` (joins it), `stopping`."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()

    @property
    def running(self) -> bool:
        thread = self._thread
        return thread is not None and thread.is_alive()

    @property
    def stopping(self) -> bool:
        """Set by `stop`: a poll that is about to act on what it found checks this first."""
        return self._stopping.is_set()

    def start(self, poll: Callable[[], bool], poll_s: float) -> bool:
        """Calls `poll()` every `poll_s` seconds on a daemon thread until `stop` or until `poll`
        returns False. True when this call started the thread, False when it was running already."""
        with self._lock:
            if self.running:
                return False
            self._stopping.clear()
            self._thread = threading.Thread(target=self._run, args=(poll, poll_s), name=self.name, daemon=True)
            self._thread.start()
            return True

    def stop(self, timeout_s: float) -> None:
        """Asks the thread to end and waits for it up to `timeout_s` (not when called from it)."""
        self._stopping.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout_s)
        self._thread = None

    def _run(self, poll: Callable[[], bool], poll_s: float) -> None:
        while not self._stopping.wait(poll_s):
            if not poll():
                return
