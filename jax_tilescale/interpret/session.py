"""The interpreter's entry point: one session per lowered call site, one `run` per device.

JAX calls `run` from one thread per simulated device (io_callback under shard_map). Devices of a
team form one launch; a device's k-th call joins its team's launch number k, so consecutive
calls of the same compiled function never mix. The session keeps all state (no module globals):
a per-(team, PE) call counter and the live worlds, each dropped when all of its PEs have left.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Hashable, Sequence

import numpy as np

from ..errors import KernelRuntimeError
from ..ir.kernel_ir import KernelIR
from ..ir.verify import verify_kernel
from .options import InterpretOptions
from .scheduler import run_pe
from .world import World


class InterpreterSession:
    """Runs one kernel on simulated devices, with NVSHMEM semantics (see InterpretOptions)."""

    def __init__(self, kernel: KernelIR, options: InterpretOptions | None = None,
                 replicated_outputs: tuple[int, ...] = ()):
        self.kernel = verify_kernel(kernel)
        self.options = options if options is not None else InterpretOptions()
        self.replicated_outputs = replicated_outputs  # outputs every PE must end with bit for bit equal
        self._lock = threading.Lock()
        self._calls: dict[tuple[Hashable, int], int] = {}
        self._worlds: dict[tuple[Hashable, int], World] = {}

    def run(self, pe: int, team: Hashable, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Runs this device's part of a launch; returns its outputs (fresh arrays, in the order of
        `kernel.outputs`; elements the kernel never wrote hold poison: NaN, or an int's maximum).

        Blocks until every PE of the team has finished (end-of-kernel barrier). Raises
        KernelRuntimeError (DeadlockError for a deadlock, RaceError for a race,
        InterpreterTimeoutError past `timeout_s`) when this or any other PE of the launch fails.
        """
        pe = int(pe)
        if isinstance(team, np.integer):  # JAX hands numpy scalars; key and report them as ints
            team = int(team)
        if not 0 <= pe < self.kernel.num_pes:
            raise KernelRuntimeError(
                f"kernel {self.kernel.name!r}: run(pe={pe}) is outside its PE space of {self.kernel.num_pes} PEs"
            )
        deadline = time.monotonic() + self.options.timeout_s
        key, world = self._enter(team, pe)
        try:
            world.join(pe, inputs, deadline)
            return run_pe(world, pe, deadline)
        except BaseException as err:
            world.fail(pe, err)
            raise
        finally:
            if world.leave(pe):
                with self._lock:
                    self._worlds.pop(key, None)

    def _enter(self, team: Hashable, pe: int) -> tuple[tuple[Hashable, int], World]:
        """The world of this call's launch: made by the first PE to arrive."""
        with self._lock:
            index = self._calls.get((team, pe), 0)
            self._calls[(team, pe)] = index + 1
            key = (team, index)
            world = self._worlds.get(key)
            if world is None:
                world = self._worlds[key] = World(self.kernel, self.options, team, index,
                                                      self.replicated_outputs)
            return key, world

    def live_launches(self) -> int:
        """How many launches have a PE that has not returned yet (0 when the session is idle)."""
        with self._lock:
            return len(self._worlds)
