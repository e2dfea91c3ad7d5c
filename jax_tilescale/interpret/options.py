"""Options of the CPU interpreter (one immutable value per session)."""

from __future__ import annotations

from dataclasses import dataclass

DELIVERY_MODES = ("late", "eager")


@dataclass(frozen=True)
class InterpretOptions:
    """How the interpreter simulates NVSHMEM's delivery of non-blocking puts.

    delivery: "late" (default) delivers each `_nbi` put as late as NVSHMEM allows: at the issuing
        PE's `quiet`, at a `barrier_all`, at the end of the kernel, or when every block of every
        PE is waiting and only a delivery can make progress. A kernel that reads remote data
        without the synchronisation that guarantees it sees poison instead of the data.
        "eager" delivers every put when it is issued (the most forgiving schedule).
    timeout_s: wall-clock limit of each PE's whole `run`, computing or waiting: past it every PE
        raises InterpreterTimeoutError, which says the kernel was still running (or which PEs
        never started) and where each PE was. A deadlock is reported at once (DeadlockError).
    reorder_unfenced: deliver puts from one PE to one PE that no `fence` separates newest first
        (NVSHMEM does not order them), which exposes a missing `T.fence()`. Off by default:
        deliveries then follow issue order per (source PE, target PE).
    detect_races: check every access to global, symmetric and shared memory against the accesses
        of other agents (blocks, in-flight puts) with vector clocks, and raise RaceError on two
        overlapping accesses, one a write, that no synchronisation orders (see `race.py`).
    check_coverage: after the kernel, raise KernelRuntimeError if an element of an output was never
        written on some PE (it would hold poison): usually a grid that does not cover the output.
    pes_per_node: the simulated launch layout for `T.Scale("node")`: kernel PEs 0..k-1 are node 0,
        k..2k-1 node 1, ... (as the launcher places ranks node-major). None: one node holds them all.
    """

    delivery: str = "late"
    timeout_s: float = 60.0
    reorder_unfenced: bool = False
    detect_races: bool = True
    check_coverage: bool = True
    pes_per_node: int | None = None

    def __post_init__(self) -> None:
        if self.delivery not in DELIVERY_MODES:
            raise ValueError(f"InterpretOptions.delivery must be one of {DELIVERY_MODES}, got {self.delivery!r}")
        if not self.timeout_s > 0:
            raise ValueError(f"InterpretOptions.timeout_s must be positive, got {self.timeout_s!r}")
        k = self.pes_per_node
        if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
            raise ValueError(f"InterpretOptions.pes_per_node must be a positive int or None, got {k!r}")

    def node_of(self, pe: int, num_pes: int) -> tuple[int, int]:
        """(node index, node count) of kernel PE `pe` in the simulated launch layout."""
        k = num_pes if self.pes_per_node is None else self.pes_per_node
        return pe // k, -(-num_pes // k)

    @property
    def eager(self) -> bool:
        return self.delivery == "eager"
