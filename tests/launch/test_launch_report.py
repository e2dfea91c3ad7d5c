"""Choosing the rank to blame and what the launcher prints about failed or unfinished ranks (no processes)."""

from __future__ import annotations

import json
import signal

import pytest

from jax_tilescale.launch_report import (
    PEER_FAILED_STATUS,
    Outcome,
    describe_status,
    exception_messages,
    failure_report,
    first_failure,
    is_noise,
    knock_on_reason,
    read_failure_record,
    timeout_report,
    write_failure_record,
)

GLOO = ("ValueError: UNKNOWN: Gloo AllGather failed: [external/gloo/gloo/transport/tcp/pair.cc:547] Connection "
        "closed by peer [127.0.0.1]:26856")
JAX_ABORT = ("F1201 11:13:41.156987 31169 client.h:80] Terminating process because the JAX distributed service "
             "detected fatal errors. This most likely indicates that another task died")


@pytest.mark.parametrize("code,text", [
    (3, "exited with status 3"),
    (-signal.SIGKILL, "was killed by signal SIGKILL (9)"),
    (-signal.SIGABRT, "was killed by signal SIGABRT (6)"),
    (PEER_FAILED_STATUS, "because another rank failed"),
])
def test_describe_status(code, text):
    assert text in describe_status(code)


@pytest.mark.parametrize("outcome,reason", [
    (Outcome(0, 1, tail=("Traceback (most recent call last):", GLOO)), "Connection closed by peer"),
    (Outcome(0, 1, messages=("ValueError: Connection reset by peer",)), "Connection reset by peer"),
    (Outcome(0, -signal.SIGABRT, tail=(JAX_ABORT,)), "detected fatal errors"),
    (Outcome(2, -signal.SIGABRT, tail=("The following tasks are unhealthy (stopped sending heartbeats): 1",)),
     "tasks are unhealthy"),
    (Outcome(1, -signal.SIGABRT, tail=("UNAVAILABLE: Failed to send RPC to coordination service.",)),
     "Failed to send RPC to coordination service"),
    # rank 1 still in its key-value wait of jax_tilescale's initialize when rank 0 (the coordinator) died: seen
    # in CI, 2026-12-03, where it was blamed instead of rank 0's SIGKILL
    (Outcome(1, 1, messages=("jax.errors.JaxRuntimeError: UNAVAILABLE: Socket closed\nAdditional GRPC error "
                             "information from remote target coordination_service while calling /xla.coordination."
                             "CoordinationService/GetKeyValueDir",)), "UNAVAILABLE: Socket closed"),
    (Outcome(0, PEER_FAILED_STATUS), "stopped by the watchdog because another rank failed"),
    (Outcome(0, 1, tail=("[jax_tilescale] stopping rank 0 (exit status 79) because rank 1 failed",)),
     "because rank 1 failed"),
    (Outcome(1, 1, tail=("ValueError: boom",)), None),
    (Outcome(1, -signal.SIGABRT, tail=("F external/xla/service.cc:12] Check failed: x == y",)), None),
    (Outcome(1, -signal.SIGKILL, tail=("[Gloo] Rank 1 is connected to 1 peer ranks.",)), None),
    # A record's messages are the rank's own words; its earlier output does not count.
    (Outcome(1, 1, messages=("ValueError: bad shape",), tail=("retrying after Connection reset by peer",)), None),
])
def test_knock_on_failures_are_recognised(outcome, reason):
    assert knock_on_reason(outcome) == reason


def test_the_first_real_failure_is_blamed():
    dead = Outcome(1, -signal.SIGKILL, exit_time=10.002)
    peer = Outcome(0, 1, exit_time=10.001, record_time=10.0005, tail=(GLOO,))  # noticed first, yet a knock-on
    assert first_failure([peer, dead]) is dead
    # Two failures of their own: the earlier moment (a record's time comes before the process's end) wins.
    a = Outcome(0, 1, exit_time=5.0, record_time=3.0)
    b = Outcome(3, 2, exit_time=4.0)
    assert first_failure([a, b]) is a and first_failure([b, Outcome(0, 1, exit_time=4.5)]) is b
    # Only knock-ons here (the first failure was on another node): the earliest of them.
    c, d = Outcome(0, PEER_FAILED_STATUS, exit_time=2.0), Outcome(1, PEER_FAILED_STATUS, exit_time=1.0)
    assert first_failure([c, d]) is d
    # A rank the launcher stopped is not a failure; neither is one that finished.
    assert first_failure([Outcome(0, -signal.SIGTERM, stopped=True), Outcome(1, 0)]) is None
    assert first_failure([Outcome(0, 1, exit_time=1.0), Outcome(1, 1, exit_time=1.0)]).rank == 0  # a tie


def test_failure_report_names_the_first_then_the_others():
    outcomes = [
        Outcome(0, 1, exit_time=2.0, tail=("Traceback (most recent call last):", GLOO)),
        Outcome(1, 3, exit_time=1.0, tail=("step 7",)),
        Outcome(2, -signal.SIGTERM, stopped=True),
        Outcome(3, 0),
    ]
    assert failure_report(outcomes, node=1).splitlines() == [
        "rank 1 (node 1) exited with status 3; its last 1 lines:",
        "  | step 7",
        "rank 0 (node 1) also failed after it: exited with status 1, a knock-on (Connection closed by peer)",
        "stopped the rank still running: 2",
    ]


def test_a_rank_aborted_while_exiting_reports_the_status_its_script_failed_with():
    """Both ranks raise; rank 0 hosts the coordinator and exits first, and JAX's coordination client aborts
    rank 1 while it exits: the launcher reports (and exits with) the script's status 1, not SIGABRT."""
    aborted = Outcome(1, -signal.SIGABRT, exit_time=2.0, record_time=1.0, messages=("LaunchError: refused",),
                      record_status=1)
    first = Outcome(0, 1, exit_time=1.5, record_time=1.1, messages=("LaunchError: refused",), record_status=1)
    assert first_failure([first, aborted]) is aborted and aborted.reported_status == 1
    assert failure_report([first, aborted], node=0).splitlines()[0] == (
        "rank 1 (node 0) exited with status 1 (then, while exiting, its process was killed by signal SIGABRT (6))")
    assert first.reported_status == 1 and Outcome(2, -signal.SIGKILL).reported_status == -signal.SIGKILL
    assert Outcome(3, 0, record_status=1).reported_status == 0  # a record, then a clean exit: nothing failed


def test_timeout_report_names_the_ranks_still_running_and_their_last_lines():
    outcomes = [Outcome(4, None, stopped=True, tail=("epoch 3", "waiting for rank 5")),
                Outcome(5, None, stopped=True), Outcome(6, 0)]
    assert timeout_report(outcomes, node=2, timeout_s=30).splitlines() == [
        "timeout after 30 s (--timeout); stopped the ranks still running: 4, 5 (finished: 6)",
        "rank 4 (node 2) was still running; its last 2 lines:",
        "  | epoch 3",
        "  | waiting for rank 5",
        "rank 5 (node 2) was still running and had printed nothing",
    ]


def test_failure_records_round_trip(tmp_path, monkeypatch):
    path = tmp_path / "rank3.json"
    try:
        try:
            raise ConnectionError("Connection reset by peer")
        except ConnectionError as e:
            raise RuntimeError("step 9 failed") from e
    except RuntimeError as e:
        messages = exception_messages(e)
    assert messages == ["RuntimeError: step 9 failed", "ConnectionError: Connection reset by peer"]
    monkeypatch.setenv("TILESCALE_FAILURE_RECORD", str(path))
    write_failure_record(messages, 1)
    when, got, status = read_failure_record(str(path))
    assert got == messages and status == 1 and json.loads(path.read_text())["time"] == when
    write_failure_record(messages)  # a record without a status (the worker did not say)
    assert read_failure_record(str(path))[2] is None
    assert read_failure_record(str(tmp_path / "none.json")) is None
    try:
        try:
            raise ConnectionError("Connection reset by peer")
        except ConnectionError:
            raise RuntimeError("step 9 failed") from None
    except RuntimeError as e:
        assert exception_messages(e) == ["RuntimeError: step 9 failed"]  # as its traceback shows it


def test_a_multi_line_message_is_recorded_whole_so_its_status_line_counts():
    """JAX's error when the coordinator's process is gone: the status on the first line, gRPC's details after it
    (seen in CI and reproduced, 2026-12-05: with only the last line recorded the rank was blamed instead of the
    rank whose SIGKILL took the coordinator with it)."""
    text = ("UNAVAILABLE: Socket closed\nAdditional GRPC error information from remote target coordination_service "
            "while calling /xla.coordination.CoordinationService/GetKeyValueDir:\n:UNKNOWN:Error received from peer "
            ' {grpc_status:14, grpc_message:"Socket closed"}')
    try:
        raise RuntimeError(text)
    except RuntimeError as e:
        messages = exception_messages(e)
    assert messages == [f"RuntimeError: {text}"]
    assert knock_on_reason(Outcome(1, 1, messages=tuple(messages))) == "UNAVAILABLE: Socket closed"
    killed = Outcome(0, -signal.SIGKILL, exit_time=1.2)
    assert first_failure([killed, Outcome(1, 1, record_time=1.1, messages=tuple(messages))]) is killed


def test_noise_of_a_check_failure_is_left_out_of_the_report():
    assert is_noise("    @     0x7f46c3c40634  absl::log_internal::LogMessage::SendToLog()")
    assert is_noise("*** Check failure stack trace: ***")
    assert is_noise("--------------------")
    assert is_noise("For simplicity, JAX has removed its internal frames from the traceback of the following ...")
    assert not is_noise("ValueError: boom") and not is_noise("---")
