"""The watchdog in one process: a fake key-value store stands for jax.distributed's."""

from __future__ import annotations

import sys
import threading
import time

import pytest

from jax_tilescale.runtime import watchdog


class FakeKV:
    def __init__(self):
        self.store: dict[str, str] = {}
        self.lock = threading.Lock()

    def key_value_set(self, key, value, allow_overwrite=False):
        with self.lock:
            self.store[key] = value

    def key_value_dir_get(self, prefix):
        with self.lock:
            return [(k, v) for k, v in self.store.items() if k.startswith(prefix + "/")]


@pytest.fixture
def exits(monkeypatch):
    """Records the watchdog's exit statuses instead of ending the test process."""
    codes: list[int] = []
    monkeypatch.setattr(watchdog, "_exit", codes.append)
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)  # restored afterwards
    monkeypatch.delenv("TILESCALE_WATCHDOG", raising=False)
    yield codes
    watchdog.stop()


def wait_for(cond, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not cond() and time.monotonic() < deadline:
        time.sleep(0.01)
    return cond()


def test_another_ranks_failure_stops_this_one(exits, capsys):
    kv = FakeKV()
    assert watchdog.install(kv, rank=0, poll_s=0.02)
    watchdog.report_failure("own failures are not a reason to stop", kv, rank=0)
    time.sleep(0.1)
    assert exits == []
    watchdog.report_failure("ValueError: boom", kv, rank=3)
    assert wait_for(lambda: exits == [watchdog.PEER_FAILED_STATUS])
    err = capsys.readouterr().err
    assert "[jax_tilescale] rank 3 failed: ValueError: boom" in err
    assert "stopping rank 0 (exit status 79) because rank 3 failed" in err


def test_excepthook_reports_and_exits(exits, capsys):
    kv = FakeKV()
    watchdog.install(kv, rank=2, poll_s=10)
    try:
        raise KeyError("missing")
    except KeyError as e:
        sys.excepthook(type(e), e, e.__traceback__)
    assert exits == [1]
    assert kv.store == {"jax_tilescale/failed/2": "KeyError: 'missing'"}
    assert "KeyError" in capsys.readouterr().err  # the traceback is still printed


def test_disabled_or_single_process(exits, monkeypatch):
    monkeypatch.setenv("TILESCALE_WATCHDOG", "0")
    assert not watchdog.install(FakeKV(), rank=0)
    monkeypatch.delenv("TILESCALE_WATCHDOG")
    monkeypatch.setattr(watchdog, "distributed_client", lambda: None)
    assert not watchdog.install()
    assert not watchdog.report_failure("nobody to tell")


def test_unreachable_store_ends_the_thread_quietly(exits):
    class Gone(FakeKV):
        def key_value_dir_get(self, prefix):
            raise RuntimeError("UNAVAILABLE: Socket closed")

    watchdog.install(Gone(), rank=0, poll_s=0.01)
    assert wait_for(lambda: not watchdog._poller.running)
    assert exits == []  # JAX itself reports a lost coordinator
