"""One rank started by `jax_tilescale.launch`: set up jax.distributed (and NVSHMEM), run the script.

A rank that fails tells the others through jax.distributed's key-value store before it exits (see
runtime/watchdog.py), so that ranks on other nodes stop within a second too, and exits without
jax.distributed's shutdown barrier, which would wait for ranks that still run. It also leaves the
launcher a failure record (the moment and the error messages: launch_report.py), by which the launcher
tells the rank that failed first from those that failed because of it.
"""

from __future__ import annotations

import os
import runpy
import sys
import traceback
from types import TracebackType

from .launch_report import exception_messages, write_failure_record


def _init_distributed() -> None:
    from .errors import LaunchError
    from .runtime import distributed

    local_rank = int(os.environ["TILESCALE_LOCAL_RANK"])
    local_device_ids = None
    if os.environ.get("TILESCALE_PLATFORM", "").lower() != "cpu" and _has_gpu():
        # One GPU per process (NVSHMEM has one PE per process): GPU i for local rank i, unless --devices says.
        local_device_ids = [int(os.environ.get("TILESCALE_DEVICE", local_rank))]
    try:
        distributed.initialize(
            coordinator_address=os.environ["TILESCALE_COORDINATOR"],
            num_processes=int(os.environ["TILESCALE_NUM_PROCESSES"]),
            process_id=int(os.environ["TILESCALE_PROCESS_ID"]),
            local_device_ids=local_device_ids,
        )
    except LaunchError as e:
        print(f"[jax_tilescale] LaunchError: {e}", file=sys.stderr)
        write_failure_record([f"LaunchError: {e}"], distributed.INIT_TIMEOUT_STATUS)
        _fail_fast(distributed.INIT_TIMEOUT_STATUS)


def _has_gpu() -> bool:
    from .launch_options import visible_gpu_count

    return visible_gpu_count() > 0


def _report(message: str) -> None:
    """Tells the other ranks (if jax.distributed is up) that this one failed."""
    if "jax" not in sys.modules:
        return
    try:
        from .runtime import watchdog

        watchdog.report_failure(message)
    except Exception:
        pass


def _fail_fast(code: int) -> None:
    """Exits without jax.distributed's shutdown barrier, which would wait for ranks that still run."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _user_frames(tb: TracebackType | None) -> TracebackType | None:
    """The traceback without its leading frames of this module and runpy (what the user's script did)."""
    while tb is not None and tb.tb_next is not None:
        name = tb.tb_frame.f_code.co_filename
        if name != __file__ and "runpy" not in name:
            break
        tb = tb.tb_next
    return tb


def main() -> None:
    try:
        _run()
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if code:
            if not isinstance(e.code, int):
                print(e.code, file=sys.stderr)
            write_failure_record([f"SystemExit: {e.code}"], code)
            _report(f"exited with status {code}" + (f" ({e.code})" if not isinstance(e.code, int) else ""))
            _fail_fast(code)
        raise
    except BaseException as e:
        code = 130 if isinstance(e, KeyboardInterrupt) else 1
        write_failure_record(exception_messages(e), code)  # first: the moment of failure, before the traceback
        traceback.print_exception(type(e), e, _user_frames(e.__traceback__))
        from .runtime.watchdog import describe_exception

        _report(describe_exception(e))
        _fail_fast(code)


def _run() -> None:
    if len(sys.argv) < 2:
        sys.exit("usage: python -m jax_tilescale._worker script.py [args] | -m module [args]")
    _init_distributed()
    if sys.argv[1] == "-m":  # python -m jax_tilescale.launch -n 2 -m pytest ...
        module = sys.argv[2]
        sys.argv = [module, *sys.argv[3:]]
        sys.path.insert(0, os.getcwd())
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        return
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
