"""Race detection for the interpreter: vector clocks over agents, an access log per buffer and PE.

Agents
    Every block of every PE is an agent (blocks of one PE share nothing implicitly). Every
    non-blocking transfer is an agent of its own from issue to delivery: its clock is the
    issuer's clock at issue, and its accesses (the write of a put's destination, at delivery) are
    logged with that clock. A blocking put is no agent of its own: its write happens at issue,
    with the issuer's clock. Clocks are sparse dicts {agent id: count}: a kernel that synchronises
    little keeps them tiny, and a barrier resets them all (below).

Accesses
    Every READ and WRITE that goes through `LaunchMemory.access` reaches `observe` (a memory
    observer) and is checked, then logged, in the log of (buffer, owner PE, owner block): its
    rectangle (starts, ends), whether it writes, its agent and that agent's own count at the time
    (its epoch), and the Access itself (op, region, source line) for the report. Access `b` of
    agent Y is ordered after a logged access `a` of agent X iff `Y.vc[X] >= a.epoch`. Two
    overlapping accesses, one a write, of different agents, not so ordered, raise RaceError.
    ATOMIC accesses (T.atomic_add/max/min) count as writes, except that two atomics never race
    with each other (they are read-modify-writes of the hardware); they order nothing either.
    Inputs are never written, so their reads are not logged, except those of an input aliased to an
    output (`KernelIR.aliases`): the pair is one memory, logged in the output's log, so a read
    through the input ref races with an unordered write through the output ref. SYNC_READ / SYNC_UPDATE accesses
    (signal words) are atomic: they are not data accesses; their ordering effect is `sync_to` /
    `sync_from` below. One exception: the updates of a signal buffer the kernel reads with
    `T.load` (`loaded_signals`) are logged as atomic writes, so that a load (a plain READ) that no
    wait orders after an update, or that an update not ordered after it follows, is reported:
    its value would depend on timing.

Happens-before edges (each an explicit call; `world.py`, `transfers.py`, `scheduler.py` make them)
    - program order within an agent;
    - release: an agent's own count goes up whenever its clock is copied out (a transfer issued,
      a signal word updated, a barrier), so its later accesses are not covered by the copy;
    - `on_issue`: a transfer starts with the issuer's clock. A blocking put reads its source
      at issue, as the issuer (the source is free on return); a `_nbi` put's source is read by
      the issuer at issue (the snapshot) and again by the transfer at its delivery
      (transfers.deliver), so a write of the source before the put completes (reusing a tile
      before T.quiet()) races with that read unless something orders it after the delivery;
    - `begin_delivery`: a transfer delivered after a `fence` of its issuing agent joins the
      clocks of that agent's earlier transfers to the same PE (deliveries are in fence order);
    - `on_quiet`: the quieting block joins the clocks of the transfers it issued (all delivered);
    - `sync_to(agent, owner, word, op)`: a signal word takes the updater's clock. ADD joins it
      into the word's clock (a read-modify-write continues the release sequence); SET replaces
      the word's clock: a waiter that sees the value SET synchronises with that setter only
      (C++'s release/acquire on a plain store), which is the precise reading and finds more bugs;
    - `sync_from(agent, owner, word)` / `after_wait(wait)`: a satisfied wait joins the word's
      clock into the waiter (so waiting for a put's signal orders the waiter after its data);
    - a put's delivery into at most MAX_PUBLISHED_WORDS integer words that `wait_*` can poll
      publishes the put's clock on each word, like `sync_to` with SET (a flag put after a fence
      orders the data puts before it); a block's own plain store to such a word forgets the
      word's clock (no release);
    - `join_all`: barrier_all and the end of the kernel: every clock becomes the join of all.
      When no transfer is in flight (barrier_all delivers them first), everything before is
      ordered before everything after, so logs, word clocks and clocks are simply reset.

Pruning
    A newer access of the same agent that covers an older one's rectangle (a write covers both
    kinds, a read covers reads) replaces it: nothing can race with the older that would not race
    with the newer. When a log grows past its limit, entries that every live agent's clock
    already covers (`floor`) are dropped, and the limit doubles if that freed little. Barriers
    clear everything.

Hooks a new statement must call (all under the world's lock; methods are no-ops when disabled)
    - Memory accesses: nothing to call, as long as they go through `LaunchMemory.access` with the
      right actor: `Access(..., actor_pe=pe, actor_block=block)` for an access a block does now,
      and `via=key` for an access a transfer does on its own later (a put's delivery, a get's
      remote read and local write at completion). Inputs are skipped; SYMMETRIC scratch and
      outputs are logged per (buffer, PE); SHARED per block too.
    - A transfer: `race.on_issue(key, pe, block, dst_pe, own_agent=not blocking)` when issued;
      its completion is `race.begin_delivery(key)`, its accesses (`via=key`), then
      `race.end_delivery(key)` (transfers.deliver does this for puts). `on_quiet` joins it.
    - A word update (a put's signal, `signal_op`, atomics): `race.sync_to(agent, owner_pe, word,
      op)` right after it; agent = `race.block_agent(pe, block)` for a block's own store,
      `race.agent_for(key)` for a transfer's.
    - A wait on a word, local or remote: give the Wait a `sync_words()` method returning
      [(owner_pe, word region)]; the scheduler calls `race.after_wait(wait)` when it resumes the
      block (a SignalWaitOn needs nothing: it is recognised).
    - `race.on_fence(pe, block)` / `race.on_quiet(pe, block)` (world.fence / world.quiet do it).
    - Collectives: `race.join_all()` once every block of every PE has arrived (a full reset when
      nothing is in flight, else a true join), `race.join_all(agents)` for some blocks only.

    Recipes for the statements of ir/nodes.py that have no interpreter rule yet:
    - Get (getmem[_nbi]): on_issue(key, pe, block, dst_pe=peer, own_agent=not blocking); at
      completion (at issue if blocking; else at quiet / barrier / kernel end, or when stuck):
      begin_delivery, READ of the peer's src (owner=peer, via=key), WRITE of the local dst
      (owner=pe, via=key), end_delivery. A later quiet of the block then orders it.
    - RemoteSignal (signal_op): a transfer with no data: on_issue(key, ...); at delivery
      begin_delivery(key) (this gives it the clocks of the block's puts to that PE from before
      a fence), the SYNC_UPDATE, sync_to(race.agent_for(key), peer, word, op), end_delivery.
    - WaitUntil (wait_eq ... on this PE or a peer): its Wait's sync_words() = [(pe or peer, word)].
    - PeerCopy (put_block / get_block through nvshmem_ptr): plain accesses of the block with
      owner = the peer; nothing else (they are complete when the statement ends).
    - BarrierAll(quiet=False) (sync_all): as barrier_all without delivering first: join_all()
      then does a true join and the transfers stay unordered until quiet / barrier_all.
    - TeamBarrier (one block per PE calls it): with quiet, on_quiet(pe, block) after delivering
      that block's puts; then, when the instance completes, join_all([block_agent(p, b) for the
      calling block b of every PE p]).
    - Broadcast / Fcollect (team collectives, one block per PE): model as join_all over the
      calling blocks when the instance completes, then each calling block READs the root's (or
      every PE's) src and WRITEs its own dst as plain accesses of its own (owner = the PE whose
      memory it is); if the implementation returns before peers finished reading a src, keep a
      second join_all at the end, or a later write of src by the root will (rightly) race.
"""

from __future__ import annotations

import itertools
import math
from bisect import bisect_left, bisect_right
from collections.abc import Hashable, Iterable, Mapping, Sequence
from operator import add

from ..errors import KernelRuntimeError, RaceError
from ..ir.expr import loads
from ..ir.nodes import BLOCK_LOCAL, WAIT_WORD_KINDS, Buffer, BufferKind, Put, SignalOp, stmt_exprs
from .memory import BLOCK_LOCAL_IDS, Access, AccessKind, Block, ResolvedRegion
from .waits import SignalWaitOn

VC = dict[int, int]  # a sparse vector clock: agent id -> count (absent = 0)

LOG_LIMIT = 64  # entries of one log before it is pruned by the live agents' clocks
# Puts of at most this many integer words publish their clock on each word (flags waited on with
# wait_*); bigger puts are data, and tracking each element would cost more than it could find.
MAX_PUBLISHED_WORDS = 64


def join_into(dst: VC, src: VC) -> None:
    """dst = max(dst, src), elementwise."""
    for k, v in src.items():
        if dst.get(k, 0) < v:
            dst[k] = v


class Agent:
    """One block of one PE, or one transfer in flight; `vc` is its vector clock."""

    __slots__ = ("block", "dst_pe", "fences", "id", "issuer", "live", "outstanding", "pe", "vc")

    def __init__(self, agent_id: int, pe: int, block: Block | None, issuer: Agent | None = None):
        self.id, self.pe, self.block, self.issuer = agent_id, pe, block, issuer
        self.vc: VC = {agent_id: 1}
        self.live = True
        self.fences = 0  # fences this block executed (blocks) / its issuer's at issue (transfers)
        self.outstanding: list[Agent] = []  # transfers this block issued that no quiet joined yet
        self.dst_pe = -1

    def release(self) -> None:
        """The clock has just been copied out: later accesses must not be covered by the copy."""
        self.vc[self.id] += 1

    def describe(self) -> str:
        if self.issuer is None:
            return f"PE {self.pe}, block {self.block}"
        return f"delivery of a transfer issued by PE {self.pe}, block {self.block}"


class _Entry:
    __slots__ = ("acc", "agent", "atomic", "ends", "epoch", "starts", "write")

    def __init__(self, acc: Access, agent: Agent, write: bool, starts: tuple[int, ...], ends: tuple[int, ...],
                 atomic: bool = False):
        self.acc, self.agent, self.write, self.starts, self.ends = acc, agent, write, starts, ends
        self.atomic = atomic  # an atomic read-modify-write (also `write`): races with plain accesses only
        self.epoch = agent.vc[agent.id]


class AccessLog:
    """The logged accesses to one buffer of one PE (or one block's shared tile), kept sorted by
    their start along the first dimension: the entries that may overlap a rectangle are found by
    bisection (those starting in [start - span + 1, end), `span` the longest extent logged), so
    disjoint tiles cost no scan. `limit` and `pruned_at` pace the pruning by clocks."""

    __slots__ = ("entries", "keys", "limit", "pruned_at", "span")

    def __init__(self) -> None:
        self.keys: list[int] = []  # entries[i].starts[0], ascending
        self.entries: list[_Entry] = []
        self.span = 1
        self.limit = LOG_LIMIT
        self.pruned_at = -1

    def __len__(self) -> int:
        return len(self.entries)

    def window(self, s0: int, e0: int) -> range:
        """Indices of the entries whose first-dimension range may meet [s0, e0)."""
        lo = bisect_left(self.keys, s0 - self.span + 1)
        return range(lo, bisect_left(self.keys, e0, lo))

    def remove(self, indices: list[int]) -> None:
        for i in reversed(indices):
            del self.keys[i]
            del self.entries[i]

    def add(self, entry: _Entry, s0: int, e0: int) -> None:
        pos = bisect_right(self.keys, s0)
        self.keys.insert(pos, s0)
        self.entries.insert(pos, entry)
        if e0 - s0 > self.span:
            self.span = e0 - s0

    def keep(self, entries: list[_Entry]) -> None:
        """Keeps only `entries` (a subsequence, so still sorted)."""
        self.entries = entries
        self.keys = [e.starts[0] if e.starts else 0 for e in entries]
        self.span = max((e.ends[0] - e.starts[0] if e.starts else 1 for e in entries), default=1)


def _overlap(s1: Sequence[int], e1: Sequence[int], s2: Sequence[int], e2: Sequence[int]) -> bool:
    for a, b, c, d in zip(s1, e1, s2, e2):
        if a >= d or c >= b:
            return False
    return True


def _contains(s1: Sequence[int], e1: Sequence[int], s2: Sequence[int], e2: Sequence[int]) -> bool:
    """[s1, e1) contains [s2, e2)."""
    for a, b, c, d in zip(s1, e1, s2, e2):
        if c < a or d > b:
            return False
    return True


def _is_load(acc: Access) -> bool:
    """Whether `acc` is a block's `T.load` (a one-element read by a statement that loads its buffer)."""
    if acc.kind is not AccessKind.READ or acc.via is not None or acc.stmt is None or math.prod(acc.region.sizes) != 1:
        return False
    return any(ld.buffer == acc.region.buffer for e in stmt_exprs(acc.stmt) for ld in loads(e))


def _box(starts: Sequence[int], ends: Sequence[int]) -> str:
    return "[" + ", ".join(str(s) if e == s + 1 else f"{s}:{e}" for s, e in zip(starts, ends)) + "]"


class RaceDetector:
    """The clocks and access logs of one launch. All methods run under the world's lock."""

    def __init__(self, num_pes: int, blocks: Sequence[Block], enabled: bool = True,
                 loaded_signals: frozenset[Buffer] = frozenset(), aliases: Mapping[Buffer, Buffer] | None = None):
        self.enabled = enabled
        self._aliases = dict(aliases or {})  # aliased input -> its output: one memory, one log
        self._loaded_signals = loaded_signals  # signal buffers read by T.load: their updates are logged
        self._blocks: dict[tuple[int, Block], Agent] = {}
        for pe in range(num_pes):
            for block in blocks:
                self._blocks[(pe, block)] = Agent(len(self._blocks), pe, block)
        self._next_id = len(self._blocks)
        self._live: set[Agent] = set(self._blocks.values())
        self._transfers: dict[Hashable, Agent] = {}  # key -> the agent that does its accesses
        self._blocking_dst: dict[Hashable, int] = {}  # key -> target PE, for blocking transfers
        self._logs: dict[tuple[int, int, Block | None], AccessLog] = {}
        self._canonical: dict[Buffer, int] = {}  # equal buffers share one log
        self._buffer_ids: dict[int, tuple[int, Buffer]] = {}  # id(buffer) -> (its index, it: kept alive)
        self._acquires = 0  # counts events that may raise the floor of the live clocks (see _prune)
        self._words: dict[tuple[object, int, tuple[int, ...]], VC] = {}
        self._fenced: dict[tuple[int, int], dict[int, VC]] = {}  # (issuer id, dst PE) -> fences -> clock

    # --- agents -------------------------------------------------------------------------------

    def block_agent(self, pe: int, block: Block) -> Agent:
        return self._blocks[(pe, block)]

    def agent_for(self, key: Hashable) -> Agent:
        """The agent that does the accesses of transfer `key` (itself, or a blocking put's issuer)."""
        try:
            return self._transfers[key]
        except KeyError:
            raise KernelRuntimeError(f"internal: race detection does not know the transfer {key!r}") from None

    def _agent_of(self, acc: Access) -> Agent:
        if acc.via is not None:
            return self.agent_for(acc.via)
        if acc.actor_block is None:
            raise KernelRuntimeError(f"internal: an access to {acc.region} has neither a block nor a transfer")
        return self._blocks[(acc.actor_pe, acc.actor_block)]

    def block_done(self, pe: int, block: Block) -> None:
        """A block finished: it accesses nothing more (its clock no longer holds back pruning)."""
        if self.enabled:
            self._live.discard(self._blocks[(pe, block)])
            self._acquires += 1

    # --- data accesses ------------------------------------------------------------------------

    def observe(self, acc: Access) -> None:
        """The memory observer: checks and logs every data access (reads and writes)."""
        if acc.kind is AccessKind.WRITE:
            write = True
        elif acc.kind is AccessKind.READ:
            write = False
        elif acc.kind is AccessKind.ATOMIC or (acc.kind is AccessKind.SYNC_UPDATE and self._loaded_signals
                                               and acc.region.buffer in self._loaded_signals):
            self.on_access(self._agent_of(acc), acc, True, atomic=True)
            return
        else:
            return  # signal words: atomic; ordered by sync_to / sync_from
        if acc.region.buffer.kind is BufferKind.INPUT and (not self._aliases or acc.region.buffer not in self._aliases):
            return  # read-only: reads of inputs never race (an aliased input's memory is its output's)
        agent = self._agent_of(acc)
        self.on_access(agent, acc, write)
        if write and self.enabled:
            self._word_written(agent, acc)

    def _word_written(self, agent: Agent, acc: Access) -> None:
        """A plain write of words a `wait_*` may poll. Delivered by a put, it publishes the put's
        clock on each word (a waiter that sees the value acquires it: NVSHMEM delivers a put after
        the issuer's fenced earlier puts, whose clocks `begin_delivery` joined in). Written by a
        block's own store, it carries no ordering (no release), so it forgets the word's clock."""
        region = acc.region
        buf = region.buffer
        if buf.kind not in WAIT_WORD_KINDS or buf.dtype.kind not in "iu":
            return
        if math.prod(region.sizes) > MAX_PUBLISHED_WORDS:
            return
        clock = dict(agent.vc) if acc.via is not None else None
        for coords in itertools.product(*(range(s, s + n) for s, n in zip(region.starts, region.sizes))):
            key = (buf, acc.owner, coords)
            if clock is None:
                self._words.pop(key, None)
            else:
                self._words[key] = dict(clock)

    def on_access(self, agent: Agent, acc: Access, write: bool, atomic: bool = False) -> None:
        """Checks `acc` by `agent` against the log of its memory, then logs it (`atomic`: a
        read-modify-write that races with plain reads and writes, not with other atomics)."""
        if not self.enabled:
            return
        region = acc.region
        starts = region.starts
        ends = tuple(map(add, starts, region.sizes))
        buf = region.buffer
        ref = self._buffer_ids.get(id(buf))  # hashing a Buffer (a frozen dataclass) per access is slow
        if ref is None:
            memory = self._aliases.get(buf, buf)  # an aliased input is logged as its output
            ref = self._buffer_ids[id(buf)] = (self._canonical.setdefault(memory, len(self._canonical)), buf)
        # one log per buffer and PE; shared memory is per block too
        key = (ref[0], acc.owner, acc.owner_block if id(buf.kind) in BLOCK_LOCAL_IDS else None)
        log = self._logs.get(key)
        if log is None:
            log = self._logs[key] = AccessLog()
        s0, e0 = (starts[0], ends[0]) if starts else (0, 1)
        entries = log.entries
        vc = agent.vc
        superseded = []
        for i in log.window(s0, e0):
            e = entries[i]
            other = e.agent
            if other is agent:
                # The new entry stands for an older one whose races it would all report: a write
                # for anything, a read for reads, an atomic for atomics.
                if (write or not e.write) and (not atomic or e.atomic) and _contains(starts, ends, e.starts, e.ends):
                    superseded.append(i)
                continue
            if (write or e.write) and not (atomic and e.atomic) and vc.get(other.id, 0) < e.epoch and \
                    _overlap(starts, ends, e.starts, e.ends):
                raise self._race_error(e, acc, agent, write, starts, ends)
        if superseded:
            log.remove(superseded)
        log.add(_Entry(acc, agent, write, starts, ends, atomic), s0, e0)
        if len(log) > log.limit:
            self._prune(log)

    def _floor(self, ids: Iterable[int]) -> dict[int, int]:
        """For each agent id, the least count of it that every live agent's clock holds: an
        access of that agent at or below it is ordered before every access still to come."""
        live = [a.vc for a in self._live]
        floor = {}
        for i in ids:
            least = 1 << 62  # no live agent: nothing can come
            for vc in live:
                v = vc.get(i, 0)
                if v < least:
                    least = v
                    if not v:
                        break
            floor[i] = least
        return floor

    def _prune(self, log: AccessLog) -> None:
        """Drops the entries every live agent is ordered after. Only worth trying when some agent
        acquired something (or finished) since this log was last pruned; the limit doubles when
        little goes, so a log that cannot shrink costs amortised O(1) per access."""
        if log.pruned_at != self._acquires:
            log.pruned_at = self._acquires
            floor = self._floor({e.agent.id for e in log.entries})
            log.keep([e for e in log.entries if e.epoch > floor[e.agent.id]])
        log.limit = max(LOG_LIMIT, 2 * len(log))

    def _race_error(
        self, old: _Entry, acc: Access, agent: Agent, write: bool, starts: tuple[int, ...], ends: tuple[int, ...]
    ) -> RaceError:
        lo = tuple(max(a, b) for a, b in zip(starts, old.starts))
        hi = tuple(min(a, b) for a, b in zip(ends, old.ends))
        buf = acc.region.buffer
        mem = f"PE {acc.owner}'s {buf.kind.value} buffer {buf.name}"
        if buf.kind in BLOCK_LOCAL:
            mem = f"the {buf.kind.value} tile {buf.name} of PE {acc.owner}, block {acc.owner_block}"
        pair = next(((i, o) for i, o in self._aliases.items() if buf in (i, o)), None)
        if pair is not None:
            mem += f" (input {pair[0].name} and output {pair[1].name} are one memory: input_output_aliases)"
        reuse = ""
        if any(_is_load(a) for a in (old.acc, acc)):
            reuse = (
                "T.load reads memory that peers or other blocks write where its statement stands: put it after the "
                "wait that delivered the data (T.signal_wait_until on the put's signal, T.wait_* on a flag written "
                "after the data, or T.barrier_all), and let no write it must not see start before the writer knows "
                "the load is done. "
            )
        if any(a.via is not None and a.kind is AccessKind.READ and isinstance(a.stmt, Put) for a in (old.acc, acc)):
            reuse = (
                "A non-blocking put reads its source until it completes: its issuer may write the source again "
                "only after a T.quiet() (or barrier_all) of the issuing block, or use the blocking form, whose "
                "source is free on return. "
            )
        return RaceError(
            f"data race on {mem}: elements {buf.name}{_box(lo, hi)} are accessed by two agents, at least once "
            f"to write, and no synchronisation orders the two accesses:\n"
            f"  {self._describe(old.acc, old.agent, old.write)}\n"
            f"  {self._describe(acc, agent, write)}\n"
            f"{reuse}A put's write is ordered before another agent's access only by a quiet of its issuing block "
            f"followed by a barrier_all or a signal, or by a signal_wait_until on the put's own signal; two blocks' "
            f"accesses only by a barrier_all or a signal. (InterpretOptions(detect_races=False) turns this check off.)"
        )

    @staticmethod
    def _describe(acc: Access, agent: Agent, write: bool) -> str:
        op = acc.stmt.op_name if acc.stmt is not None else "?"
        loc = acc.stmt.loc if acc.stmt is not None else "?"
        verb = "atomic update of" if acc.kind is AccessKind.ATOMIC else "signal update of" if \
            acc.kind is AccessKind.SYNC_UPDATE else "write of" if write else "T.load of" if _is_load(acc) else "read of"
        return f"{verb} {acc.region} on PE {acc.owner} by {op} at {loc} ({agent.describe()})"

    # --- transfers ----------------------------------------------------------------------------

    def on_issue(self, key: Hashable, pe: int, block: Block, dst_pe: int, own_agent: bool = True) -> None:
        """A transfer issued by (pe, block) to `dst_pe`. With `own_agent` (a non-blocking one) it
        gets its own agent, whose clock is the issuer's now; otherwise its accesses are the
        issuer's, done with the issuer's clock (blocking puts, which write at issue)."""
        if not self.enabled:
            return
        issuer = self._blocks[(pe, block)]
        if not own_agent:
            self._transfers[key] = issuer
            self._blocking_dst[key] = dst_pe
            return
        t = Agent(self._next_id, pe, block, issuer)
        self._next_id += 1
        t.vc = dict(issuer.vc)
        t.vc[t.id] = 1
        t.fences, t.dst_pe = issuer.fences, dst_pe
        issuer.release()
        issuer.outstanding.append(t)
        self._transfers[key] = t
        self._live.add(t)

    def begin_delivery(self, key: Hashable) -> None:
        """Before a transfer's accesses at delivery: fence order. The transfers its issuing block
        sent to the same PE before a fence are delivered already; their clocks join this one's (for
        a blocking put, the issuer's: its write is the issuer's own)."""
        if not self.enabled:
            return
        t = self._transfers[key]
        if t.issuer is None:
            issuer, dst_pe, fences = t, self._blocking_dst[key], t.fences
        else:
            issuer, dst_pe, fences = t.issuer, t.dst_pe, t.fences
        groups = self._fenced.get((issuer.id, dst_pe))
        if groups:
            for count, clock in groups.items():
                if count < fences:
                    join_into(t.vc, clock)
                    self._acquires += 1

    def end_delivery(self, key: Hashable) -> None:
        """After a transfer's last access (data, then signal): it is no longer in flight."""
        if not self.enabled:
            return
        t = self._transfers.pop(key)
        if t.issuer is None:
            self._blocking_dst.pop(key)
            return
        t.live = False
        self._live.discard(t)
        group = self._fenced.setdefault((t.issuer.id, t.dst_pe), {})
        join_into(group.setdefault(t.fences, {}), t.vc)

    def on_quiet(self, pe: int, block: Block) -> None:
        """A quiet by (pe, block): the transfers it issued are complete; their clocks join its own."""
        if not self.enabled:
            return
        agent = self._blocks[(pe, block)]
        pending = []
        for t in agent.outstanding:
            if t.live:
                pending.append(t)  # not delivered (a caller that quiets only some transfers)
            else:
                join_into(agent.vc, t.vc)
                self._acquires += 1
        agent.outstanding = pending

    def on_fence(self, pe: int, block: Block) -> None:
        """A fence by (pe, block): its later transfers to a PE are delivered after its earlier ones."""
        if self.enabled:
            self._blocks[(pe, block)].fences += 1

    # --- signal words -------------------------------------------------------------------------

    def sync_to(self, agent: Agent, owner: int, word: ResolvedRegion, op: SignalOp = SignalOp.ADD) -> None:
        """`agent` updated `word` of PE `owner` (a release): ADD joins its clock into the word's,
        SET replaces the word's clock with it."""
        if not self.enabled:
            return
        key = (word.buffer, owner, word.starts)
        if op is SignalOp.SET or key not in self._words:
            self._words[key] = dict(agent.vc)
        else:
            join_into(self._words[key], agent.vc)
        agent.release()

    def sync_from(self, agent: Agent, owner: int, word: ResolvedRegion) -> None:
        """`agent` saw `word` of PE `owner` satisfy its wait (an acquire): it joins the word's clock."""
        if not self.enabled:
            return
        clock = self._words.get((word.buffer, owner, word.starts))
        if clock:
            join_into(agent.vc, clock)
            self._acquires += 1

    def after_wait(self, wait: object) -> None:
        """The scheduler resumes a block whose `wait` is satisfied: acquire what it waited for."""
        if not self.enabled:
            return
        sync_words = getattr(wait, "sync_words", None)
        if sync_words is not None:
            words = sync_words()
        elif isinstance(wait, SignalWaitOn):
            words = [(wait.pe, wait.word)]
        else:
            return  # barriers: join_all did it
        agent = self._blocks[(wait.pe, wait.block)]  # type: ignore[attr-defined]
        for owner, word in words:
            self.sync_from(agent, owner, word)

    # --- collectives --------------------------------------------------------------------------

    def join_all(self, agents: Iterable[Agent] | None = None) -> None:
        """Every agent of `agents` (default: every block) has arrived: each one's clock becomes the
        join of all (then each releases). For all blocks with no transfer in flight, everything
        before is ordered before everything after: the logs and word clocks are dropped instead."""
        if not self.enabled:
            return
        if agents is None and not self._transfers:
            self._reset()
            return
        group = list(self._blocks.values()) if agents is None else list(agents)
        joined: VC = {}
        for a in group:
            join_into(joined, a.vc)
        for a in group:
            a.vc = dict(joined)
            a.release()
        self._acquires += 1

    def _reset(self) -> None:
        for a in self._blocks.values():
            a.vc = {a.id: 1}
            a.outstanding = []
            a.fences = 0
        self._live = {a for a in self._live if a.issuer is None}
        self._logs.clear()
        self._words.clear()
        self._fenced.clear()
