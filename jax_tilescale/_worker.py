"""One rank started by `jax_tilescale.launch`: set up jax.distributed (and NVSHMEM), run the script."""

from __future__ import annotations

import os
import runpy
import sys
import traceback


def _init_distributed() -> None:
    import jax

    local_rank = int(os.environ["TILESCALE_LOCAL_RANK"])
    kwargs = {}
    if os.environ.get("TILESCALE_PLATFORM", "").lower() != "cpu" and _has_gpu():
        kwargs["local_device_ids"] = [local_rank]  # one GPU per process: NVSHMEM has one PE per process
    jax.distributed.initialize(
        coordinator_address=os.environ["TILESCALE_COORDINATOR"],
        num_processes=int(os.environ["TILESCALE_NUM_PROCESSES"]),
        process_id=int(os.environ["TILESCALE_PROCESS_ID"]),
        **kwargs,
    )


def _has_gpu() -> bool:
    from .launch import _visible_gpu_count

    return _visible_gpu_count() > 0


def _fail_fast(code: int) -> None:
    """Exits without jax.distributed's shutdown barrier, which would wait for ranks that still run."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def main() -> None:
    try:
        _run()
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if code:
            if not isinstance(e.code, int):
                print(e.code, file=sys.stderr)
            _fail_fast(code)
        raise
    except BaseException:
        traceback.print_exc()
        _fail_fast(1)


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
