"""Which rank of a launch failed first, and what the launcher says about failed or unfinished ranks.

When one rank dies, its peers in a collective fail within milliseconds ("Connection closed by peer",
a failed heartbeat, the watchdog's status 79), often before the launcher has seen the first death.
The rank to blame is therefore chosen on evidence, not on which exit the launcher noticed first:

1. a failure the launcher caused (it stopped a rank that was still running) comes last;
2. a knock-on failure (its status or messages say another process failed first) comes after any
   failure that is not one;
3. then the earliest moment of failure: the time the worker recorded when the script raised or exited
   non-zero (a failure record, written just before it exits), else the time the rank's process ended
   (measured by a thread that waits for it);
4. then the lowest rank.

Failure records travel through a file per rank named by $TILESCALE_FAILURE_RECORD (set by the launcher),
so that nothing is added to the script's output. Times are `time.monotonic()`, one clock for every
process of a machine (CLOCK_MONOTONIC on Linux), and a launcher compares only the ranks of its node.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from .errors import PEER_FAILED_STATUS

FAILURE_RECORD_VAR = "TILESCALE_FAILURE_RECORD"
TAIL_LINES = 8  # last lines of a rank repeated in the launcher's reports

# Lines that would crowd the report's last lines out: frames of a C++ check-failure stack (JAX's abort), and
# the rulers and note that JAX's traceback filtering prints around an error.
_NOISE = re.compile(
    r"\s*(@\s+0x[0-9a-f]+|\*\*\* Check failure stack trace|-{20}$"
    r"|For simplicity, JAX has removed its internal frames)"
)

# What a process says when it fails because another one did (checked against record messages, else the
# last lines): Gloo's CPU collectives and sockets in general when the peer's process ends, NCCL's
# "remote process exited", JAX's coordination service (a heartbeat that stopped, a coordinator that is
# gone, the abort "another task died"), and this package's watchdog.
_KNOCK_ON = re.compile(
    r"(?P<hit>connection closed by peer|connection reset by peer|remote process exited"
    r"|stopped sending heartbeats|tasks are unhealthy|another task died|detected fatal errors"
    r"|failed to send rpc to coordination service|leader task was preempted"
    # the coordination service's socket closed under a call: the process that hosted it (rank 0) is gone
    r"|unavailable: socket closed"
    r"|because rank \d+ failed)",
    re.IGNORECASE,
)


def is_noise(line: str) -> bool:
    return bool(_NOISE.match(line))


def describe_status(code: int) -> str:
    """'exited with status 3', 'was killed by signal SIGKILL (9)', ..."""
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by signal {name} ({-code})"
    if code == PEER_FAILED_STATUS:
        return f"stopped (status {code}) because another rank failed (named in its last lines)"
    return f"exited with status {code}"


# --- failure records (written by the worker, read by the launcher) --------------------------------


def write_failure_record(messages: Sequence[str], status: int | None = None, path: str | None = None) -> None:
    """Records this moment, the messages of a failure and the status the worker is about to exit with, if
    the launcher asked for it (best effort)."""
    path = path or os.environ.get(FAILURE_RECORD_VAR)
    if not path:
        return
    record = {"time": time.monotonic(), "messages": [m[:2000] for m in messages][:8], "status": status}
    try:
        tmp = f"{path}.tmp{os.getpid()}"
        with open(tmp, "w") as f:
            json.dump(record, f)
        os.replace(tmp, path)  # the launcher never reads half a record
    except OSError:
        pass


def exception_messages(exc: BaseException) -> list[str]:
    """Each exception of a chain as its traceback's last lines show it, every line of its message (`raise ... from`,
    or raised while handling another, unless `from None`), outermost first. Whole messages, not their last lines:
    JAX's errors put the status first ("UNAVAILABLE: Socket closed") and gRPC's details after it, and the status is
    what says that the coordinator's process had gone (knock_on_reason)."""
    out: list[str] = []
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen and len(out) < 8:
        seen.add(id(e))
        text = f"{type(e).__name__}: {e}".strip() if str(e).strip() else type(e).__name__
        out.append(text)
        e = e.__cause__ if e.__cause__ is not None or e.__suppress_context__ else e.__context__
    return out


class FailureRecord(NamedTuple):
    """What a rank's worker recorded of its failure."""

    time: float  # time.monotonic() when it failed
    messages: list[str]
    status: int | None  # the status it meant to exit with (None: it did not say)


def read_failure_record(path: str) -> FailureRecord | None:
    try:
        with open(path) as f:
            record = json.load(f)
        status = record.get("status")
        return FailureRecord(float(record["time"]), [str(m) for m in record.get("messages", [])],
                             int(status) if status is not None else None)
    except (OSError, ValueError, KeyError, TypeError):
        return None


# --- blame -------------------------------------------------------------------------------------------


@dataclass
class Outcome:
    """How one rank of this node ended."""

    rank: int
    status: int | None  # None: still running (timeout, interrupt)
    exit_time: float | None = None  # when its process ended (the launcher's waiter thread)
    record_time: float | None = None  # when the worker recorded its failure
    messages: tuple[str, ...] = ()  # the failure record's messages
    tail: tuple[str, ...] = ()  # its last lines
    stopped: bool = False  # the launcher signalled it while it was still running
    record_status: int | None = None  # the status the worker recorded it was exiting with

    @property
    def reported_status(self) -> int | None:
        """The status to report: the script's own (what the worker recorded) when the process then ended
        otherwise, e.g. aborted by JAX's coordination client while it exited because another rank's
        coordinator had gone first; else the process's."""
        if self.record_status is not None and self.status not in (None, 0):
            return self.record_status
        return self.status

    @property
    def failed(self) -> bool:
        return self.status not in (None, 0) and not self.stopped

    @property
    def moment(self) -> float:
        times = [t for t in (self.record_time, self.exit_time) if t is not None]
        return min(times) if times else float("inf")


def knock_on_reason(outcome: Outcome) -> str | None:
    """The words that show this failure followed another process's (None: it shows no such sign)."""
    if outcome.status == PEER_FAILED_STATUS:
        return "stopped by the watchdog because another rank failed"
    for text in (outcome.messages or outcome.tail) if outcome.status is not None else ():
        found = _KNOCK_ON.search(text)
        if found:
            return found.group("hit")
    return None


def first_failure(outcomes: Iterable[Outcome]) -> Outcome | None:
    """The rank to blame among those that failed (module docstring), or None."""
    failed = [o for o in outcomes if o.failed]
    if not failed:
        return None
    return min(failed, key=lambda o: (knock_on_reason(o) is not None, o.moment, o.rank))


# --- what the launcher prints ------------------------------------------------------------------------


def _describe(o: Outcome) -> str:
    """How a failed rank ended: its status, and how its process ended when that differs from what the
    worker recorded (an abort while exiting)."""
    assert o.status is not None
    reported = o.reported_status
    assert reported is not None
    if reported == o.status:
        return describe_status(o.status)
    return f"{describe_status(reported)} (then, while exiting, its process {describe_status(o.status)})"


def _lines_block(tail: Sequence[str]) -> str:
    return "".join(f"\n  | {line}" for line in tail)


def failure_report(outcomes: Sequence[Outcome], node: int) -> str:
    """The first failure (status, last lines), then how the other ranks of this node ended."""
    culprit = first_failure(outcomes)
    if culprit is None:
        return ""
    assert culprit.status is not None
    text = f"rank {culprit.rank} (node {node}) {_describe(culprit)}"
    if culprit.tail:
        text += f"; its last {len(culprit.tail)} lines:" + _lines_block(culprit.tail)
    for o in sorted((o for o in outcomes if o.failed and o is not culprit), key=lambda o: (o.moment, o.rank)):
        assert o.status is not None
        reason = knock_on_reason(o)
        why = f", a knock-on ({reason})" if reason else ""
        text += f"\nrank {o.rank} (node {node}) also failed after it: {_describe(o)}{why}"
    stopped = sorted(o.rank for o in outcomes if o.stopped)
    if stopped:
        text += f"\nstopped the rank{'s' if len(stopped) > 1 else ''} still running: {_ranks(stopped)}"
    return text


def timeout_report(outcomes: Sequence[Outcome], node: int, timeout_s: float) -> str:
    """Which ranks were still running when --timeout expired, with their last lines."""
    running = [o for o in outcomes if o.stopped]
    done = [o for o in outcomes if not o.stopped]
    text = f"timeout after {timeout_s:g} s (--timeout); stopped the ranks still running: "
    text += _ranks(o.rank for o in running)
    if done:
        text += f" (finished: {_ranks(o.rank for o in done)})"
    for o in running:
        if o.tail:
            text += f"\nrank {o.rank} (node {node}) was still running; its last {len(o.tail)} lines:"
            text += _lines_block(o.tail)
        else:
            text += f"\nrank {o.rank} (node {node}) was still running and had printed nothing"
    return text


def _ranks(ranks: Iterable[int]) -> str:
    return ", ".join(str(r) for r in ranks) or "none"
