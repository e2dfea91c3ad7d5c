"""What a block (or a finished PE) can wait for, and the barriers it can wait at.

A wait is a small object the scheduler polls with `ready()` (always under the launch's lock)
and that can say in words what it waits for: deadlock and timeout reports are made of these
descriptions. A statement rule returns a wait instead of blocking, so one OS thread can run all
blocks of a PE.
"""

from __future__ import annotations

from ..ir.nodes import Cmp, Stmt
from .memory import Access, AccessKind, Block, LaunchMemory, ResolvedRegion


class Wait:
    """Base: a condition on launch state, with the block waiting for it."""

    pe: int
    block: Block | None

    def ready(self) -> bool:
        raise NotImplementedError

    def describe(self) -> str:
        raise NotImplementedError

    def watches(self, owner: int) -> bool:
        """Whether a write to PE `owner`'s memory may make this wait ready."""
        return False

    def watched(self, num_pes: int) -> list[int]:
        """The PEs whose memory `watches`."""
        return [owner for owner in range(num_pes) if self.watches(owner)]


class SignalWaitOn(Wait):
    """`signal_wait_until(word cmp value)` and `wait_*`: a word of PE `owner` (default: this PE)
    compared with `value`; the word is only read, never changed.

    The word is accessed once, through the memory's access path, when the wait starts; polling
    then reads that live view (it is polled often: by the scheduler and by deadlock checks).
    """

    def __init__(
        self,
        memory: LaunchMemory,
        pe: int,
        block: Block,
        word: ResolvedRegion,
        cmp: Cmp,
        value: int,
        stmt: Stmt,
        owner: int | None = None,
        thread: int | None = None,
    ):
        self.pe, self.block, self.word, self.cmp, self.value, self.stmt = pe, block, word, cmp, value, stmt
        self.owner = pe if owner is None else owner
        self.thread = thread  # the waiting thread, inside a thread-dependent branch (`if tx == 0:`)
        self._holds = cmp.holds
        acc = Access(AccessKind.SYNC_READ, word, self.owner, None, pe, block, stmt)
        self._view = memory.access(acc).reshape(-1)

    def current(self) -> int:
        return int(self._view[0])

    def ready(self) -> bool:
        return self._holds(int(self._view[0]), self.value)

    def watches(self, owner: int) -> bool:
        return owner == self.owner

    def watched(self, num_pes: int) -> list[int]:
        return [self.owner]

    def sync_words(self) -> list[tuple[int, ResolvedRegion]]:
        """The words whose updates the waiter synchronises with (race detection)."""
        return [(self.owner, self.word)]

    def describe(self) -> str:
        on = "" if self.owner == self.pe else f" on PE {self.owner}"
        by = "" if self.thread is None else f" (thread {self.thread})"
        return (
            f"{self.stmt.op_name}({self.word} {self.cmp.value} {self.value}{on}){by}: {self.word} is "
            f"{self.current()}, at {self.stmt.loc}"
        )


class Barrier:
    """A reusable counting barrier; `generation` counts completed rounds."""

    def __init__(self, participants: int, what: str):
        self.participants = participants
        self.what = what
        self.arrived = 0
        self.generation = 0

    def arrive(self) -> tuple[int, bool]:
        """Counts one arrival; returns (the round joined, whether this arrival completes it).
        The caller completes the round with `release()` after its side effects (deliveries)."""
        self.arrived += 1
        return self.generation, self.arrived == self.participants

    def release(self) -> None:
        self.arrived = 0
        self.generation += 1


class BarrierWait(Wait):
    """A block (or, at the kernel's end, a PE) waiting for a barrier round to complete."""

    def __init__(self, barrier: Barrier, generation: int, pe: int, block: Block | None, stmt: Stmt | None):
        self.barrier, self.generation, self.pe, self.block, self.stmt = barrier, generation, pe, block, stmt

    def ready(self) -> bool:
        return self.barrier.generation > self.generation

    def describe(self) -> str:
        loc = f", at {self.stmt.loc}" if self.stmt is not None else ""
        what = self.stmt.op_name if self.stmt is not None else self.barrier.what  # barrier_all or sync_all
        return f"{what} ({self.barrier.arrived} of {self.barrier.participants} arrived){loc}"

