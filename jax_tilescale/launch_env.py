"""How a process was launched, for the checks that must refuse at once what cannot work.

The CPU interpreter simulates every PE of a kernel launch inside one process. A launch whose PEs live
in several processes (e.g. `python -m jax_tilescale.launch -n 2 script.py` on a machine without GPUs:
each process holds simulated devices of its own) would leave each process's interpreter waiting for
PEs that run in the other, until the interpreter's timeout. `check_interpreter_launch` is called where
a kernel is lowered for the interpreter and says instead how to run on CPU. Multi-process CPU jobs
that call no kernel (tests of the launch itself, plain jax.distributed programs) are left alone.

Leaf module: it imports neither jax nor the runtime at module level.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Sequence
from typing import Any

from .errors import LaunchError

LAUNCH_COMMAND_VAR = "TILESCALE_LAUNCH_COMMAND"  # set by the launcher in each rank: the script (or -m module) and args
DEVICE_COUNT_FLAG = "--xla_force_host_platform_device_count"


def single_process_command(env: Any = None) -> str:
    """The command that runs this program as one process: `python examples/allgather.py --m 64`."""
    env = os.environ if env is None else env
    launched = env.get(LAUNCH_COMMAND_VAR)
    if launched:
        return f"python {launched}"
    return shlex.join(["python", *sys.argv]) if sys.argv and sys.argv[0] else "python script.py"


def cpu_processes_note(command: Sequence[str], world_size: int) -> str:
    """What the launcher says when it starts several ranks on a node without GPUs."""
    return (
        f"no GPU on this node: the {world_size} ranks run on CPU, each with simulated devices of its own. A "
        "jax_tilescale kernel cannot span them (the interpreter simulates every PE inside one process), so on CPU "
        f"run the program as one process: `python {shlex.join(command)}` "
        f"(XLA_FLAGS={DEVICE_COUNT_FLAG}=N sets the number of simulated devices). Set TILESCALE_PLATFORM=cpu to "
        "run several CPU processes without this note (jax.distributed programs without kernels)."
    )


def processes_of_launch_groups(mesh: Any, kernel_axes: Sequence[str]) -> list[set[int]]:
    """For each group of devices that run one kernel launch together (the PEs along `kernel_axes`, other mesh
    axes fixed), the processes that hold them. Empty when `mesh` has no concrete devices."""
    devices = getattr(mesh, "devices", None)
    names = tuple(getattr(mesh, "axis_names", ()))
    if devices is None or not hasattr(devices, "ndim") or devices.ndim != len(names):
        return []
    import numpy as np

    axes = [names.index(a) for a in kernel_axes if a in names]
    others = [i for i in range(len(names)) if i not in axes]
    team_size = int(np.prod([devices.shape[i] for i in axes])) if axes else 1
    groups = np.transpose(devices, others + axes).reshape(-1, team_size)
    return [{int(getattr(d, "process_index", 0)) for d in row} for row in groups]


def check_interpreter_launch(kernel_name: str, mesh: Any, kernel_axes: Sequence[str]) -> None:
    """A LaunchError (at once, in every process) when one launch of this kernel would run in the interpreter
    with PEs in more than one process; it names the single-process command to use instead.

    mesh: the concrete mesh of the enclosing shard_map (None outside shard_map: one PE per device, nothing
    spans processes); kernel_axes: the kernel's PE axes (its other manual axes number independent teams).
    """
    spread = [g for g in processes_of_launch_groups(mesh, kernel_axes) if len(g) > 1]
    if not spread:
        return
    procs = sorted(set().union(*spread))
    pes = int(getattr(mesh, "size", 0)) // max(1, len(processes_of_launch_groups(mesh, kernel_axes)))
    raise LaunchError(
        f"kernel `{kernel_name}` would run in the CPU interpreter with its {pes} PEs spread over "
        f"{len(procs)} processes (processes {', '.join(map(str, procs))} of this job), but the interpreter "
        "simulates every PE of a launch inside one process: each process would wait for PEs that run in "
        f"another. On CPU, run the program as one process with simulated devices: `{single_process_command()}` "
        f"(XLA_FLAGS={DEVICE_COUNT_FLAG}=N sets how many). Several processes, one per GPU, are for GPUs: "
        "`python -m jax_tilescale.launch -n N script.py` on a machine with N GPUs."
    )
