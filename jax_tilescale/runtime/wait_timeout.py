"""Waits on the GPU that give up (issue 5): the timeout setting and the watcher that turns a kernel's
report into a `WaitTimeoutError` in the main thread.

Every wait the generated code makes (`signal_wait_until`, `wait_*`, the grid and team barriers of
`barrier_all`, `sync_all` and the team collectives) checks, off its fast path, how long it has been
polling. Past `wait_timeout_ns` (the FFI attribute; from `kernel(wait_timeout_s=)`, else
$TILESCALE_WAIT_TIMEOUT_S, else 60 s; 0 turns it off) the first such wait of a launch fills the call
site's record (pinned host memory, xla_ffi/wait_timeout.h) and waits, at most 2 s, for this module's
watcher to acknowledge it; every other wait of that launch then gives up too, the kernel runs to its end
(its outputs are undefined) and the call completes, so the GPU context stays usable and later calls are
not disturbed (the handler's end-of-call barrier still pairs every PE's calls).

The watcher, a daemon thread started with the FFI registration, polls the records every 20 ms. For each
report it builds the message (kernel, PE, statement, source line, value seen, expectation), prints it on
stderr, queues the exception in the main thread (`async_raise`: `PyThreadState_SetAsyncExc`, like Ctrl-C's
KeyboardInterrupt: it is raised at the main thread's next Python instruction, typically as
`block_until_ready` or the array read that waited for the call returns) and only then acknowledges, so the
exception is pending before the call's results are. `last_error()` keeps it for code that runs elsewhere.
"""

from __future__ import annotations

import math
import os
import sys
import threading
from typing import Any

from .. import abi, async_raise
from ..errors import KernelCheckError, LaunchError, WaitTimeoutError
from .poller import Poller

TIMEOUT_VAR = "TILESCALE_WAIT_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 60.0
POLL_S = 0.02
# TsWaitFault.cmp (a TS_CMP_* code of jax_tilescale/abi/ts_abi.h) -> the comparison's symbol.
CMP_SYMBOLS = {abi.CMP_CODES[name]: symbol for name, symbol in
               (("EQ", "=="), ("NE", "!="), ("GT", ">"), ("GE", ">="), ("LT", "<"), ("LE", "<="))}

_lock = threading.Lock()  # _errors
_poller = Poller("jax_tilescale-wait-watcher")
_errors: list[WaitTimeoutError | KernelCheckError] = []


def timeout_seconds(per_kernel: float | None = None) -> float:
    """The wait timeout a kernel gets: its own `wait_timeout_s`, else $TILESCALE_WAIT_TIMEOUT_S, else 60 s.
    0 turns the check off. Read when the kernel is lowered (compiled into the call)."""
    if per_kernel is not None:
        value, source = per_kernel, "wait_timeout_s"
    else:
        raw = os.environ.get(TIMEOUT_VAR, "").strip()
        if not raw:
            return DEFAULT_TIMEOUT_S
        try:
            value, source = float(raw), f"{TIMEOUT_VAR}={raw!r}"
        except ValueError:
            raise LaunchError(f"{TIMEOUT_VAR}={raw!r} must be a number of seconds (0: waits never time out)") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise LaunchError(f"{source} must be a finite number of seconds >= 0 (0: waits never time out), got {value!r}")
    return float(value)


def timeout_ns(per_kernel: float | None = None) -> int:
    """`timeout_seconds` in nanoseconds, for the handler's `wait_timeout_ns` attribute."""
    return round(timeout_seconds(per_kernel) * 1e9)


def _value(fault: dict[str, Any], key: str) -> str:
    return str(int(fault[key]))


def _kernel_name(fault: dict[str, Any]) -> str:
    kernel = fault["kernel"]
    return kernel[3:] if kernel.startswith("ts_") else kernel


def format_check(fault: dict[str, Any]) -> str:
    """The message of a failed check in a call-free kernel (cmp == abi.FAULT_CHECK): `where` holds the
    source line, a newline, and what failed; `seen` and `expected` are the value and its limit."""
    where, _, what = str(fault["where"]).partition("\n")
    bx, by, bz = fault["block"]
    value, limit = int(fault["seen"]), int(fault["expected"])
    return (
        f"kernel `{_kernel_name(fault)}`, PE {fault['pe']} of {fault['npes']}: a check failed at {where} "
        f"(block ({bx}, {by}, {bz}), thread {fault['thread']}): {what} (value {value}, limit {limit}). The kernel "
        f"stopped (trap), so this process's CUDA context is no longer usable; restart the process."
    )


def format_fault(fault: dict[str, Any]) -> str:
    """The message of a wait that gave up (or of a failed check: `format_check`), from its record
    (`_ffi.take_wait_faults()` entries)."""
    if int(fault["cmp"]) == abi.FAULT_CHECK:
        return format_check(fault)
    kernel = _kernel_name(fault)
    cmp = CMP_SYMBOLS.get(int(fault["cmp"]), f"<comparison {fault['cmp']}>")
    peer = int(fault["peer"])
    word = "its own word" if peer < 0 else f"a word of PE {peer}"
    bx, by, bz = fault["block"]
    waited = int(fault["waited_ns"]) / 1e9
    return (
        f"kernel `{kernel}`, PE {fault['pe']} of {fault['npes']}: {fault['op']} at {fault['where']} gave up after "
        f"waiting {waited:.1f} s: the word is {_value(fault, 'seen')}, expected {cmp} {_value(fault, 'expected')} "
        f"(block ({bx}, {by}, {bz}) polled {word}). Nothing satisfied it: a peer that never signals or never "
        f"arrives, or a kernel bug. The call's outputs are undefined; later calls run normally. The timeout is "
        f"kernel(wait_timeout_s=...) or ${TIMEOUT_VAR} (default {DEFAULT_TIMEOUT_S:g} s; 0: never)."
    )


def make_error(fault: dict[str, Any]) -> WaitTimeoutError | KernelCheckError:
    kind = KernelCheckError if int(fault["cmp"]) == abi.FAULT_CHECK else WaitTimeoutError
    err = kind(format_fault(fault))
    err.fault = dict(fault)
    return err


def last_error() -> WaitTimeoutError | KernelCheckError | None:
    """The latest wait that gave up in this process, if any."""
    with _lock:
        return _errors[-1] if _errors else None


def errors() -> list[WaitTimeoutError | KernelCheckError]:
    with _lock:
        return list(_errors)


def raise_in_main_thread(err: WaitTimeoutError) -> bool:
    """Queues `err` in the main thread (raised at its next Python instruction). False if there is none."""
    return async_raise.raise_in_main_thread(err)


def handle(faults: list[dict[str, Any]], ext: Any, deliver: bool = True) -> list[WaitTimeoutError | KernelCheckError]:
    """What the watcher does with a poll's reports: record, print, raise in the main thread, then ack."""
    out = []
    for fault in faults:
        err = make_error(fault)
        with _lock:
            _errors.append(err)
        print(f"[jax_tilescale] {type(err).__name__}: {err}", file=sys.stderr, flush=True)
        if deliver:
            raise_in_main_thread(err)
        out.append(err)
    if faults:
        ext.ack_wait_faults()
    return out


def _check(ext: Any) -> bool:
    """One poll: reports the kernels' wait faults; False (ends the polling) when `ext` is gone."""
    try:
        faults = ext.take_wait_faults()
    except Exception:  # the extension is going away with the process
        return False
    if faults:
        handle(faults, ext)
    return True


def start_watcher(ext: Any, poll_s: float = POLL_S) -> bool:
    """Starts the watcher thread for the extension `ext` (idempotent)."""
    if not hasattr(ext, "take_wait_faults"):
        return False
    _poller.start(lambda: _check(ext), poll_s)
    return True


def stop_watcher(timeout_s: float = 1.0) -> None:
    _poller.stop(timeout_s)
