"""Python's exit waits for the interpreter's host callbacks still running (lowering/callback_exit.py):
the counter and its wait, deterministic here; the end-to-end case (an error caught, the program
ending while other devices' callbacks return) is tests/jax/test_interpreter_errors.py's
test_a_caught_error_prints_nothing_at_exit, which aborted one exit in twenty to forty under load
before the wait existed."""

from __future__ import annotations

import threading
import time

import pytest

from jax_tilescale.lowering import callback_exit
from jax_tilescale.lowering.callback_exit import CallbacksInFlight


def _callback(in_flight: CallbacksInFlight, started: threading.Event, seconds: float) -> threading.Thread:
    def run() -> None:
        with in_flight:
            started.set()
            time.sleep(seconds)

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_the_exit_waits_for_a_running_callback_and_its_tail() -> None:
    in_flight, started = CallbacksInFlight(), threading.Event()
    thread = _callback(in_flight, started, 0.3)
    assert started.wait(5)
    t0 = time.monotonic()
    assert in_flight.drain(timeout=10)
    waited = time.monotonic() - t0
    assert not thread.is_alive() or waited >= 0.25  # it ended before the wait returned
    assert waited >= 0.25 + callback_exit.TAIL_S * 0.9, waited  # the callback's time, then the tail
    thread.join()


def test_with_nothing_running_the_exit_does_not_wait() -> None:
    in_flight = CallbacksInFlight()
    t0 = time.monotonic()
    assert in_flight.drain(timeout=10)
    assert time.monotonic() - t0 < callback_exit.TAIL_S  # no callback ever ended: no tail either


def test_a_callback_still_running_at_the_deadline_is_reported_not_waited_for(capsys) -> None:
    in_flight, started = CallbacksInFlight(), threading.Event()
    thread = _callback(in_flight, started, 2.0)
    assert started.wait(5)
    t0 = time.monotonic()
    assert in_flight.drain(timeout=0.2) is False
    assert time.monotonic() - t0 < 1.5
    assert "1 interpreter callback(s) still running" in capsys.readouterr().err
    thread.join()


def test_a_failing_callback_is_counted_out_too() -> None:
    in_flight = CallbacksInFlight()
    with pytest.raises(RuntimeError), in_flight:
        raise RuntimeError("a callback that fails")
    assert in_flight.drain(timeout=1)


def test_the_lowerings_callback_is_counted_while_it_runs() -> None:
    """InterpretedCall (lowering/cpu.py) runs each device's part inside the counter the exit hook waits on."""
    import numpy as np

    from jax_tilescale.lowering.cpu import InterpretedCall

    seen = []

    class Session:  # what InterpretedCall asks of a session when the run succeeds
        def run(self, pe, team, arrays):
            seen.append(callback_exit.IN_FLIGHT._running)
            return [arrays[0] + pe]

    out = InterpretedCall(Session())(np.array([2, 0]), np.ones(3, np.float32))
    np.testing.assert_array_equal(out[0], np.full(3, 3.0, np.float32))
    assert seen and seen[0] >= 1  # counted while it ran
    assert callback_exit.IN_FLIGHT.drain(timeout=5)  # and counted out after
