"""In-flight non-blocking transfers of one launch (puts, gets, signal_op), and their delivery.

A `_nbi` put is snapshotted when issued (its data and its resolved destination) and queued here;
its source counts as read until delivery (`Transfer.src`: the race detector logs that read with
the transfer's clock, so a write of the source before the put completes is a race).
A `_nbi` get reads its remote source only when delivered (as late as NVSHMEM allows, so a
missing quiet shows), and a `signal_op` is a transfer with a signal and no data.
It is delivered later, at a time the world chooses (quiet, barrier, kernel end, or when nothing
else can progress). Order rules, from NVSHMEM:
- puts from one PE to one PE that a `fence` separates are delivered in fence order: every put
  carries the issuing PE's fence epoch, and a put is never delivered while an older epoch of the
  same (source, target) pair is pending;
- puts that no fence separates may arrive in any order: by default they go in issue order; with
  `reorder_unfenced` the newest goes first, so a kernel that forgot a fence sees it;
- a put-with-signal applies its signal only after its own data is delivered.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from ..ir.nodes import SignalOp, Stmt
from .memory import Access, AccessKind, Block, LaunchMemory, ResolvedRegion
from .race import RaceDetector


@dataclass(frozen=True)
class SignalDelivery:
    word: ResolvedRegion
    op: SignalOp
    value: int  # already reduced modulo 2**64


@dataclass(frozen=True)
class RemoteRead:
    """Where a get's data comes from: a region of PE `owner`, read at delivery."""

    region: ResolvedRegion
    owner: int


@dataclass(frozen=True, eq=False)
class Transfer:
    """One put, get or signal_op, from issue to delivery (compared by identity).

    `src_pe` is the issuing PE (quiet completes what it issued); `dst_pe` the PE whose memory the
    delivery writes (a get's issuer itself)."""

    seq: int  # issue order over the whole launch
    src_pe: int
    dst_pe: int
    dst: ResolvedRegion | None  # None: a signal_op (no data)
    data: np.ndarray | None  # a put's snapshot of its source at issue, in the destination's shape
    signal: SignalDelivery | None
    epoch: int  # the issuing PE's fence count at issue
    stmt: Stmt
    issuer_block: Block
    read: RemoteRead | None = None  # a get: read this at delivery instead of `data`
    dst_block: Block | None = None  # a get into shared memory: the issuing block's tile
    src: ResolvedRegion | None = None  # a `_nbi` put's source on the issuing PE: read until delivered
    src_block: Block | None = None  # ... in the issuing block's shared memory

    def describe(self) -> str:
        sig = ""
        if self.signal is not None:
            sig = f" then {self.signal.word} {self.signal.op.name} {self.signal.value}"
        what = f" ({self.stmt.op_name} at {self.stmt.loc})"
        if self.read is not None:
            return f"PE {self.src_pe} <- PE {self.read.owner}: {self.dst} <- {self.read.region}{what}"
        if self.dst is None:
            return f"PE {self.src_pe} -> PE {self.dst_pe}:{sig.removeprefix(' then')}{what}"
        return f"PE {self.src_pe} -> PE {self.dst_pe}: {self.dst}{sig}{what}"


def deliver(t: Transfer, memory: LaunchMemory, race: RaceDetector | None = None) -> None:
    """Writes a transfer's data on its target, then applies its signal (data before signal).
    Its accesses carry `via=t`: the race detector does them with the transfer's clock."""
    if race is not None:
        race.begin_delivery(t)
        if t.src is not None:  # the data is the snapshot; the race detector sees the source read now
            race.observe(Access(AccessKind.READ, t.src, t.src_pe, t.src_block, t.src_pe, t.issuer_block, t.stmt, t))
    data = t.data
    if t.read is not None:
        acc = Access(AccessKind.READ, t.read.region, t.read.owner, None, t.src_pe, t.issuer_block, t.stmt, t)
        data = memory.read(acc)
    if t.dst is not None and data is not None:
        acc = Access(AccessKind.WRITE, t.dst, t.dst_pe, t.dst_block, t.src_pe, t.issuer_block, t.stmt, t)
        memory.write(acc, data)
    if t.signal is not None:
        acc = Access(AccessKind.SYNC_UPDATE, t.signal.word, t.dst_pe, None, t.src_pe, t.issuer_block, t.stmt, t)
        memory.update_signal(acc, t.signal.value, add=t.signal.op is SignalOp.ADD)
        if race is not None:
            race.sync_to(race.agent_for(t), t.dst_pe, t.signal.word, t.signal.op)
    if race is not None:
        race.end_delivery(t)


class TransferQueue:
    """Pending transfers in issue order, with the choice of which one may be delivered next."""

    def __init__(self, reorder_unfenced: bool = False, race: RaceDetector | None = None):
        self.reorder_unfenced = reorder_unfenced
        self.race = race
        self._pending: list[Transfer] = []
        self._seq = 0
        self._epochs: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self._pending)

    def __iter__(self) -> Iterator[Transfer]:
        return iter(list(self._pending))

    def issue(
        self,
        src_pe: int,
        dst_pe: int,
        dst: ResolvedRegion | None,
        data: np.ndarray | None,
        signal: SignalDelivery | None,
        stmt: Stmt,
        issuer_block: Block,
        read: RemoteRead | None = None,
        dst_block: Block | None = None,
        src: ResolvedRegion | None = None,
        src_block: Block | None = None,
    ) -> Transfer:
        epoch = self._epochs.get(src_pe, 0)
        t = Transfer(self._seq, src_pe, dst_pe, dst, data, signal, epoch, stmt, issuer_block, read, dst_block, src,
                     src_block)
        self._seq += 1
        self._pending.append(t)
        return t

    def fence(self, src_pe: int) -> None:
        """Puts `src_pe` issues from now on are delivered after those it issued before."""
        self._epochs[src_pe] = self._epochs.get(src_pe, 0) + 1

    def next(self, src_pe: int | None = None, dst_pe: int | None = None) -> Transfer | None:
        """The transfer to deliver next (of `src_pe`'s, of those to `dst_pe`, or of all): the
        oldest pending one, or with `reorder_unfenced` the newest of its unfenced group."""
        if src_pe is None and dst_pe is None and not self.reorder_unfenced:
            return self._pending[0] if self._pending else None
        pending = [
            t
            for t in self._pending
            if (src_pe is None or t.src_pe == src_pe) and (dst_pe is None or t.dst_pe == dst_pe)
        ]
        if not pending:
            return None
        first = pending[0]
        if not self.reorder_unfenced:
            return first
        group = [t for t in pending if (t.src_pe, t.dst_pe, t.epoch) == (first.src_pe, first.dst_pe, first.epoch)]
        return group[-1]

    def deliver_next(
        self, memory: LaunchMemory, src_pe: int | None = None, dst_pe: int | None = None
    ) -> Transfer | None:
        """Delivers one transfer and returns it; None when none (matching the filters) is pending."""
        t = self.next(src_pe, dst_pe)
        if t is None:
            return None
        self._pending.remove(t)
        deliver(t, memory, self.race)
        return t

    def deliver_all(
        self, memory: LaunchMemory, src_pe: int | None = None, dst_pe: int | None = None
    ) -> list[Transfer]:
        """Delivers every pending transfer matching the filters, in an allowed order."""
        done = []
        while (t := self.deliver_next(memory, src_pe, dst_pe)) is not None:
            done.append(t)
        return done
