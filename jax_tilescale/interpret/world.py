"""The shared state of one launch: memory, in-flight puts, barriers, waiting PEs, failure.

One `World` per launch, shared by the threads of its PEs (one thread per PE). All of its state is
guarded by one lock (`World.lock`). Each PE sleeps on its own condition of that lock, and whoever
changes state that a sleeping PE may care about (a delivery to it, a barrier release, a failure)
wakes exactly that PE. The world decides what the simulated hardware does when nobody can progress:
- if every live block of every PE is waiting and puts are in flight, puts are delivered one at a
  time, oldest (allowed) first, until one of them satisfies a waiter; this is "as late as NVSHMEM
  allows";
- if nothing is in flight either, it is a deadlock: a DeadlockError listing each waiter goes to
  every PE;
- a PE that fails marks the world failed, and every other PE raises promptly: the same error
  (same type and message) when it concerns the launch as a whole (a deadlock, a race, a timeout,
  unwritten outputs, mismatched collectives), else the same type saying "PE k failed: ...",
  k the PE whose statement failed;
- the time limit (InterpretOptions.timeout_s) bounds each PE's whole call, running or waiting:
  when it runs out while some PE can still progress, the InterpreterTimeoutError says the kernel
  was still running and where each PE was; a deadlock (nobody can progress) is reported at once.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from ..errors import DeadlockError, InterpreterTimeoutError, KernelRuntimeError, RaceError
from ..ir.kernel_ir import KernelIR
from ..ir.nodes import BLOCK_LOCAL, BarrierAll, BufferKind, Put, Stmt
from .clusters import Clusters
from .collectives import Call, CollectiveWait, TeamCollectives
from .coverage import CoverageTracker
from .memory import Access, AccessKind, Block, LaunchMemory, ResolvedRegion
from .options import InterpretOptions
from .race import RaceDetector
from .transfers import RemoteRead, SignalDelivery, Transfer, TransferQueue
from .waits import Barrier, BarrierWait, Wait

POLL_S = 0.25  # fallback re-check period of sleeping PEs; state changes wake them at once
MAX_BLOCKS_LISTED = 4
RAISER = -1  # World.fail's default culprit: the PE that raised


class World:
    """The rendezvous and simulated NVSHMEM of one launch (launch `index` of team `team`)."""

    def __init__(self, kernel: KernelIR, options: InterpretOptions, team: object, index: int,
                 replicated_outputs: tuple[int, ...] = ()):
        self.kernel, self.options, self.team, self.index = kernel, options, team, index
        self.replicated_outputs = replicated_outputs
        self.num_pes = kernel.num_pes
        self.blocks: list[Block] = list(itertools.product(*(range(g) for g in kernel.grid)))
        self.lock = threading.RLock()  # re-entrant: `fail` may run inside a locked wait
        self._wakeup = [threading.Condition(self.lock) for _ in range(self.num_pes)]
        self.memory = LaunchMemory(kernel)
        # Race detection (vector clocks, race.py) and output coverage watch every access.
        self.race = RaceDetector(self.num_pes, self.blocks, enabled=options.detect_races,
                                 loaded_signals=frozenset(b for b in kernel.loaded() if b.kind is BufferKind.SIGNAL),
                                 aliases=dict(kernel.alias_pairs()))
        self.coverage = CoverageTracker(kernel) if options.check_coverage else None
        if options.detect_races:
            self.memory.observers.append(self.race.observe)
        if self.coverage is not None:
            self.memory.observers.append(self.coverage.observe)
        self.transfers = TransferQueue(options.reorder_unfenced, self.race if options.detect_races else None)
        self.barrier = Barrier(self.num_pes * len(self.blocks), "barrier_all")
        self.clusters = Clusters(kernel.cluster)  # T.cluster_sync rounds (cluster_rules.py)
        self.collectives = TeamCollectives(self.num_pes)  # barrier_all_block, broadcast, fcollect, ...
        # A write to a PE's memory may satisfy waits on it, also those of peers (remote waits).
        self.memory.observers.append(self._on_access)
        self.end = Barrier(self.num_pes, "the end of the kernel (all PEs finish, then every put is delivered)")
        self.joined: set[int] = set()
        self.left: set[int] = set()
        self.waiting: dict[int, list[Wait]] = {}  # PEs whose every live block waits, and on what
        self._watchers: dict[int, set[int]] = defaultdict(set)  # PE -> waiting PEs whose waits poll its memory
        self._changed: set[int] = set()  # waiting PEs whose waits may have become ready since checked
        self.failure: BaseException | None = None
        self.failed_pe: int | None = None  # the PE that raised it
        self.culprit: int | None = None  # the PE at fault; None: the error concerns the launch
        self.running: dict[int, Sequence[Any]] = {}  # per PE, its live blocks (scheduler._BlockRun)

    # --- membership and failure ---------------------------------------------------------------

    def join(self, pe: int, inputs: Sequence[np.ndarray], deadline: float) -> None:
        """Binds `pe`'s memory, then waits for every PE of the launch: the launch-start barrier
        (the GPU runtime zeroes signals and stages buffers, then barriers, so no peer writes a PE's
        memory before it exists)."""
        with self.lock:
            if pe in self.joined:
                raise KernelRuntimeError(f"internal: PE {pe} joined launch {self.index} of team {self.team!r} twice")
            self.check_failed(pe)
            self.memory.bind_pe(pe, inputs)
            if self.coverage is not None:
                self.coverage.bind_pe(pe)
            self.joined.add(pe)
            self._wake(range(self.num_pes))
            while len(self.joined) < self.num_pes:
                self.check_failed(pe)
                self._sleep(pe, deadline)

    def leave(self, pe: int) -> bool:
        """Records that `pe` returned or raised; True when every PE has left (drop the world)."""
        with self.lock:
            self.left.add(pe)
            return len(self.left) == self.num_pes

    def fail(self, pe: int, error: BaseException, culprit: int | None = RAISER) -> None:
        """Marks the launch failed (the first failure wins) and wakes everybody. `culprit`: the PE
        at fault (default: `pe`, whose statement raised), None when the error concerns the launch."""
        with self.lock:
            if self.failure is None:
                self.failure, self.failed_pe = error, pe
                launch_wide = isinstance(error, (DeadlockError, RaceError, InterpreterTimeoutError))
                self.culprit = None if launch_wide else pe if culprit == RAISER else culprit
            self._wake(range(self.num_pes))

    def check_failed(self, pe: int) -> None:
        """Raises on `pe` if another PE has failed: the original error's type, with its message as
        is when it concerns the launch (deadlock, race, timeout, ...), else "PE k failed: ..." with
        k the PE at fault (whichever PE's thread found it)."""
        err = self.failure
        if err is None or self.failed_pe == pe:
            return
        if self.culprit is None:
            message = str(err)
        elif isinstance(err, KernelRuntimeError):
            message = f"PE {self.culprit} failed: {err}"
        else:  # an internal error (a bug of the interpreter): keep its type's name
            message = f"PE {self.culprit} failed: {type(err).__name__}: {err}"
        cls = type(err) if isinstance(err, KernelRuntimeError) else KernelRuntimeError
        try:
            copy = cls(message)
        except TypeError:  # a subclass with another constructor
            copy = KernelRuntimeError(message)
        raise copy from err

    # --- state changes (all under `lock`) -----------------------------------------------------

    def _wake(self, pes: Iterable[int]) -> None:
        for pe in pes:
            self._wakeup[pe].notify_all()

    def _delivered(self, transfers: Iterable[Transfer]) -> None:
        """After deliveries: the waits of their targets may be ready now."""
        targets = {t.dst_pe for t in transfers}
        self._changed |= targets & self.waiting.keys()
        self._wake(targets)

    def put(
        self,
        stmt: Put,
        src_pe: int,
        block: Block,
        dst_pe: int,
        dst: ResolvedRegion,
        data: np.ndarray,
        signal: SignalDelivery | None,
        src: ResolvedRegion | None = None,
    ) -> None:
        """Issues a put of `data` (the snapshot of `src`); blocking puts and eager mode deliver it
        now (with everything to that PE issued before it, to keep the order), `_nbi` puts in late
        mode stay in flight. A `_nbi` put's `src` counts as read until the put is delivered (its
        issuer may reuse it only after a quiet): a write of it before is a race."""
        in_flight = None if stmt.blocking else src
        src_block = block if in_flight is not None and in_flight.buffer.kind in BLOCK_LOCAL else None
        t = self.transfers.issue(src_pe, dst_pe, dst, data, signal, stmt, block, src=in_flight, src_block=src_block)
        self.race.on_issue(t, src_pe, block, dst_pe, own_agent=not stmt.blocking)
        if stmt.blocking or self.options.eager:
            self._delivered(self.transfers.deliver_all(self.memory, src_pe=src_pe, dst_pe=dst_pe))

    def transfer(
        self,
        stmt: Stmt,
        pe: int,
        block: Block,
        *,
        target: int,
        remote: int,
        dst: ResolvedRegion | None = None,
        read: RemoteRead | None = None,
        dst_block: Block | None = None,
        signal: SignalDelivery | None = None,
    ) -> None:
        """Issues a non-blocking transfer other than a put: a `_nbi` get (reads `read` on PE
        `remote` when delivered, writes `dst` on `target`, the issuer) or a signal_op (only a
        signal, on `target`). Delivered like puts: at quiet, barriers, the kernel's end, or when
        nothing else can progress (at once in eager mode)."""
        t = self.transfers.issue(pe, target, dst, None, signal, stmt, block, read=read, dst_block=dst_block)
        self.race.on_issue(t, pe, block, remote, own_agent=True)
        if self.options.eager:
            self._delivered(self.transfers.deliver_all(self.memory, src_pe=pe, dst_pe=target))

    def quiet(self, pe: int, block: Block | None = None) -> None:
        """Delivers every put `pe` issued; `block`, the quieting block, is ordered after its own."""
        self._delivered(self.transfers.deliver_all(self.memory, src_pe=pe))
        if block is not None:
            self.race.on_quiet(pe, block)

    def fence(self, pe: int, block: Block | None = None) -> None:
        self.transfers.fence(pe)
        if block is not None:
            self.race.on_fence(pe, block)

    def resumed(self, wait: Wait) -> None:
        """A block continues past its satisfied `wait`: it is ordered after what it waited for."""
        self.race.after_wait(wait)

    def block_done(self, pe: int, block: Block) -> None:
        self._check_gets_landed(pe, block)
        self.memory.release_block(pe, block)
        self.race.block_done(pe, block)

    def _check_gets_landed(self, pe: int, block: Block) -> None:
        """A block that ends with a `_nbi` get into its shared memory in flight lost the data (the
        tile is gone, and on a GPU the get would land in the next block's tile)."""
        for t in self.transfers:
            if t.src_pe == pe and t.issuer_block == block and t.dst_block is not None:
                raise KernelRuntimeError(
                    f"{t.stmt.op_name} into the shared tile {t.dst} was still in flight when block {block} of PE {pe} "
                    f"ended: complete it with T.quiet() before the block ends (issued at {t.stmt.loc})"
                )

    def _on_access(self, acc: Access) -> None:
        """Memory observer: a write to PE `acc.owner` wakes the waiting PEs that poll its memory."""
        if acc.kind is not AccessKind.READ and acc.kind is not AccessKind.SYNC_READ:
            watchers = self._watchers.get(acc.owner)
            if watchers:
                self._changed |= watchers
                for pe in watchers:
                    self._wakeup[pe].notify_all()

    def team_arrive(self, pe: int, call: Call) -> CollectiveWait:
        """`pe`'s next team collective call (see collectives.py); the instance completes when every
        PE has made its call: the callers are then ordered after one another (race detection)."""
        try:
            inst, complete = self.collectives.arrive(pe, call)
        except KernelRuntimeError as err:  # calls of several PEs that do not match: nobody's alone
            self.fail(pe, err, culprit=None)
            raise
        if complete:
            self.race.join_all([self.race.block_agent(p, c.block) for p, c in inst.calls.items()])
            self._changed |= self.waiting.keys()
            self._wake(range(self.num_pes))
        return CollectiveWait(inst, pe, call.block, call.stmt)

    def _arrive(self, barrier: Barrier, pe: int, block: Block | None, stmt: BarrierAll | None) -> BarrierWait:
        generation, complete = barrier.arrive()
        if complete and stmt is not None and not stmt.quiet:
            # sync_all: every block is here, puts may still be in flight; the blocks are ordered.
            self.race.join_all()
            barrier.release()
            self._changed |= self.waiting.keys()
            self._wake(range(self.num_pes))
        elif complete:
            # Every participant is here, so every put issued before the barrier is delivered now.
            self.transfers.deliver_all(self.memory)
            self.race.join_all()
            if barrier is self.end and self.coverage is not None:
                try:
                    self.coverage.check(range(self.num_pes))
                except KernelRuntimeError as err:  # outputs of any PE: not the fault of the last to arrive
                    self.fail(pe, err, culprit=None)
                    raise
            barrier.release()
            self._changed |= self.waiting.keys()
            self._wake(range(self.num_pes))
        return BarrierWait(barrier, generation, pe, block, stmt)

    def barrier_all(self, pe: int, block: Block, stmt: BarrierAll) -> BarrierWait:
        return self._arrive(self.barrier, pe, block, stmt)

    def check_replicated(self, pe: int) -> None:
        """Outputs the kernel declared the same on every PE (`ts.kernel(replicated=)`): this PE's,
        bit for bit, against PE 0's. Called once every PE has ended (their outputs are final)."""
        for i in self.replicated_outputs:
            buf = self.kernel.outputs[i]
            mine, first = self.memory.outputs(pe)[i], self.memory.outputs(0)[i]
            bits = np.dtype(f"u{buf.dtype.itemsize}")
            differ = np.flatnonzero(mine.view(bits) != first.view(bits))
            if differ.size:
                at = tuple(int(x) for x in np.unravel_index(differ[0], buf.shape))
                raise KernelRuntimeError(
                    f"kernel {self.kernel.name}: output {buf.name} is declared replicated (ts.kernel(replicated=...)) "
                    f"but PE {pe} and PE 0 hold different values at {differ.size} of its {buf.size} elements, "
                    f"first at index {at}: {mine[at]!r} on PE {pe}, {first[at]!r} on PE 0"
                )

    def arrive_at_end(self, pe: int) -> BarrierWait:
        """The implicit quiet + barrier at the end of the kernel (end-of-kernel consistency)."""
        return self._arrive(self.end, pe, None, None)

    # --- waiting ------------------------------------------------------------------------------

    def _everyone_stuck(self) -> bool:
        """True when every PE waits and none of their waits is ready. Only PEs whose waits may
        have changed since last checked are re-checked, so this is cheap in the common case."""
        if len(self.waiting) < self.num_pes:
            return False
        for pe in list(self._changed):
            if any(w.ready() for w in self.waiting[pe]):
                return False
            self._changed.discard(pe)
        return True

    def _deliver_until_someone_can_go(self) -> bool:
        """Everybody is stuck: delivers in-flight puts one at a time, in an allowed order, until one
        satisfies a waiter (True) or none is left (False: a deadlock)."""
        while (t := self.transfers.deliver_next(self.memory)) is not None:
            # The delivery's writes marked the PEs that poll the written memory (_on_access).
            if any(w.ready() for p in list(self._changed) for w in self.waiting.get(p, ())):
                self._delivered([t])
                return True
        return False

    def _sleep(self, pe: int, deadline: float) -> None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            self.raise_timeout(pe)
        self._wakeup[pe].wait(min(remaining, POLL_S))

    def wait_any(self, pe: int, waits: list[Wait], deadline: float) -> None:
        """Blocks `pe` (whose every live block waits) until one of `waits` is ready.

        Must be called with `lock` held. Delivers in-flight puts when everybody is stuck, and
        raises DeadlockError when that cannot help, or KernelRuntimeError past the deadline.
        """
        self.waiting[pe] = waits
        watched = {owner for w in waits for owner in w.watched(self.num_pes)}
        for owner in watched:
            self._watchers[owner].add(pe)
        try:
            while True:
                self.check_failed(pe)
                if any(w.ready() for w in waits):
                    return
                self._changed.discard(pe)
                if self._everyone_stuck():
                    if self._deliver_until_someone_can_go():
                        continue
                    self._raise_deadlock(pe)
                self._sleep(pe, deadline)
        finally:
            del self.waiting[pe]
            self._changed.discard(pe)
            for owner in watched:
                self._watchers[owner].discard(pe)

    # --- reports ------------------------------------------------------------------------------

    def _describe_waits(self) -> list[str]:
        lines = []
        for pe in range(self.num_pes):
            if pe not in self.joined:
                lines.append(f"  PE {pe}: has not started launch {self.index} (its `run` was not called)")
                continue
            if len(self.joined) < self.num_pes:
                lines.append(f"  PE {pe}: waits at the start of the launch for the other PEs")
                continue
            if pe not in self.waiting:
                if pe in self.left:
                    lines.append(f"  PE {pe}: returned or failed")
                else:
                    lines += self._describe_running(pe)
                continue
            groups: dict[str, list[Block | None]] = defaultdict(list)
            for w in self.waiting[pe]:
                groups[w.describe()].append(w.block)
            for text, blocks in groups.items():
                who = "" if blocks == [None] else " " + _blocks(blocks)  # type: ignore[arg-type]
                verb = "wait" if len(blocks) > 1 else "waits"
                lines.append(f"  PE {pe}{who} {verb} for {text}")
        return lines

    def _describe_running(self, pe: int) -> list[str]:
        """A PE between passes: where each of its blocks is (waiting or at which statement)."""
        runs = self.running.get(pe)
        if not runs:
            return [f"  PE {pe}: running (no block started yet)" if runs is None else f"  PE {pe}: running"]
        groups: dict[str, list[Block]] = defaultdict(list)
        for run in runs:
            text = f"waits for {run.wait.describe()}" if run.wait is not None and not run.wait.ready() else \
                f"running, {run.progress()}"
            groups[text].append(run.block)
        return [f"  PE {pe} {_blocks(blocks)} {text}" for text, blocks in groups.items()]

    def _header(self) -> str:
        return f"kernel {self.kernel.name!r} (launch {self.index} of team {self.team!r}, {self.num_pes} PEs)"

    def _raise_deadlock(self, pe: int) -> None:
        err = DeadlockError(
            f"deadlock in {self._header()}: every block of every PE is waiting and no put is in flight:\n"
            + "\n".join(self._describe_waits())
        )
        self.fail(pe, err)
        raise err

    def raise_timeout(self, pe: int) -> None:
        """`pe`'s time is up (InterpretOptions.timeout_s): an InterpreterTimeoutError for every PE.
        Nobody is deadlocked (that is found at once), so either a PE never started its part or
        the kernel was still running: the report says which, and where each PE was."""
        self.check_failed(pe)
        lines = self._describe_waits()
        lines += [f"  in flight: {t.describe()}" for t in self.transfers]
        missing = [p for p in range(self.num_pes) if p not in self.joined]
        if missing:
            why = f"PE{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))} never started the launch"
        else:
            why = "the kernel was still running (not a deadlock: some PE could still make progress)"
        err = InterpreterTimeoutError(
            f"{self._header()} timed out after {self.options.timeout_s} s on PE {pe} (InterpretOptions.timeout_s): "
            f"{why}. Where each PE was:\n" + "\n".join(lines) + "\nA kernel that needs longer can have it: "
            "ts.kernel(..., interpret=InterpretOptions(timeout_s=...)), or InterpretOptions(timeout_s=...) for "
            "an InterpreterSession."
        )
        self.fail(pe, err, culprit=None)
        raise err


def _blocks(blocks: Sequence[Block]) -> str:
    """"block (0,)" or "blocks (0,), (1,), ... and k more"."""
    shown = ", ".join(str(b) for b in blocks[:MAX_BLOCKS_LISTED])
    more = f" and {len(blocks) - MAX_BLOCKS_LISTED} more" if len(blocks) > MAX_BLOCKS_LISTED else ""
    return f"block{'s' if len(blocks) > 1 else ''} {shown}{more}"
