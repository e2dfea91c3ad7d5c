"""Race detection and output coverage: planted bugs are diagnosed, naming both accesses; their
correct versions run clean (and give the right answer)."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import jax_tilescale as ts
from jax_tilescale import language as T
from jax_tilescale.errors import KernelRuntimeError, RaceError
from jax_tilescale.interpret.memory import Access, AccessKind, ResolvedRegion
from jax_tilescale.interpret.race import RaceDetector
from jax_tilescale.ir.nodes import Buffer, BufferKind, Copy, Put, SignalOp, SourceLoc, full_region

from .harness import build, launch, random_inputs, run, session, stmt_loc

F32 = np.float32
M, N, BM = 64, 8, 16
NB = M // BM


def inputs(npes: int, seed: int = 0) -> list[list[np.ndarray]]:
    x = random_inputs(np.random.default_rng(seed), npes, (M, N))
    return [[x[p]] for p in range(npes)]


def race_message(res) -> str:
    """Every PE fails with the same RaceError; returns its message."""
    messages = set()
    for err in res.errors:
        assert isinstance(err, RaceError), repr(err)
        messages.add(str(err))
    assert len(messages) == 1, "every PE reports the same race"
    return messages.pop()


def nxt():
    return (T.get_pe() + 1) % T.get_pe_num()


# --- two blocks of one PE -----------------------------------------------------------------------


def test_two_blocks_writing_the_same_rows() -> None:
    def overlapping(a, b):
        bx = T.program_id(0)
        T.copy(a[T.ds(bx * BM, BM), :], b[T.ds(bx * BM, BM), :])
        T.copy(a[T.ds(bx * BM, BM), :], b[T.ds((bx * BM + BM // 2) % (M - BM), BM), :])  # bug: half a tile off

    kernel = build(overlapping, inputs=[((M, N), F32)], outputs=[((M, N), F32)], grid=(NB,), num_pes=2)
    msg = race_message(launch(session(kernel), inputs(2, seed=1)))
    first, second = stmt_loc(kernel, Copy, 0), stmt_loc(kernel, Copy, 1)
    assert "data race on PE " in msg and "output buffer b" in msg
    # Blocks run statement by statement: block 1 wrote rows 16:32 (first copy) before block 0's
    # second copy writes rows 8:24.
    assert f"write of b[16:32, 0:8] on PE 0 by copy at {first} (PE 0, block (1,))" in msg or \
        f"write of b[16:32, 0:8] on PE 1 by copy at {first} (PE 1, block (1,))" in msg
    assert f"write of b[8:24, 0:8] on PE 0 by copy at {second} (PE 0, block (0,))" in msg or \
        f"write of b[8:24, 0:8] on PE 1 by copy at {second} (PE 1, block (0,))" in msg
    assert "elements b[16:24, 0:8]" in msg


def test_blocks_writing_disjoint_rows_of_one_output_is_fine() -> None:
    def disjoint(a, b):
        rows = T.ds(T.program_id(0) * BM, BM)
        tile = T.alloc_shared((BM, N), F32)
        T.copy(a[rows, :], tile)
        T.copy(tile, b[rows, :])
        T.copy(b[rows, :], tile)  # re-reading what this block wrote: program order
        T.copy(tile, b[rows, :])

    kernel = build(disjoint, inputs=[((M, N), F32)], outputs=[((M, N), F32)], grid=(NB,), num_pes=2)
    data = inputs(2, seed=2)
    outs = run(session(kernel), data)
    for p in range(2):
        np.testing.assert_array_equal(outs[p][0], data[p][0])


# --- a put against a local store --------------------------------------------------------------


@pytest.mark.parametrize("delivery", ["late", "eager"])
def test_peer_put_against_a_local_store(delivery: str) -> None:
    """PE p puts into PE p+1's rows while PE p+1 stores into the same rows itself."""

    def clobber(a, b):
        rows = T.ds(T.program_id(0) * BM, BM)
        T.putmem_nbi_block(b[rows, :], a[rows, :], pe=nxt())
        T.copy(a[rows, :], b[rows, :])

    kernel = build(clobber, inputs=[((M, N), F32)], outputs=[((M, N), F32)], grid=(NB,), num_pes=4)
    msg = race_message(launch(session(kernel, delivery=delivery), inputs(4, seed=3)))
    assert f"by putmem_nbi_block at {stmt_loc(kernel, Put)} (delivery of a transfer issued by PE " in msg
    assert f"by copy at {stmt_loc(kernel, Copy)} (PE " in msg
    assert msg.count("write of b[") == 2


# --- put-with-signal: read before / after the wait ----------------------------------------------


def signalled_kernel(early_read: bool, op: T.SignalOp):
    def signalled(a, recv, result):
        bx = T.program_id(0)
        rows = T.ds(bx * BM, BM)
        sig = T.alloc_signal(NB)
        word, target = (sig[bx], 1) if op is T.SignalOp.SET else (sig[0], NB)
        T.putmem_signal_nbi_block(recv[rows, :], a[rows, :], sig=word, value=1, op=op, pe=nxt())
        if early_read:
            T.copy(recv[rows, :], result[rows, :])  # bug: the data may not be there yet
        T.signal_wait_until(word, T.Cmp.EQ, target)
        if not early_read:
            T.copy(recv[rows, :], result[rows, :])

    return build(signalled, inputs=[((M, N), F32)], outputs=[((M, N), F32)] * 2, grid=(NB,), num_pes=4)


@pytest.mark.parametrize("op", [T.SignalOp.SET, T.SignalOp.ADD])
@pytest.mark.parametrize("delivery", ["late", "eager"])
def test_reading_before_waiting_for_the_signal_is_a_race(delivery: str, op: T.SignalOp) -> None:
    kernel = signalled_kernel(early_read=True, op=op)
    msg = race_message(launch(session(kernel, delivery=delivery), inputs(4, seed=4)))
    assert "read of recv[" in msg and f"by copy at {stmt_loc(kernel, Copy)} (PE " in msg
    assert "write of recv[" in msg and f"by putmem_signal_nbi_block at {stmt_loc(kernel, Put)} (delivery" in msg


@pytest.mark.parametrize("op", [T.SignalOp.SET, T.SignalOp.ADD])
@pytest.mark.parametrize("delivery", ["late", "eager"])
def test_reading_after_waiting_for_the_signal_is_fine(delivery: str, op: T.SignalOp) -> None:
    data = inputs(4, seed=5)
    outs = run(session(signalled_kernel(early_read=False, op=op), delivery=delivery), data)
    expected = np.roll(np.stack([d[0] for d in data]), 1, axis=0)
    np.testing.assert_array_equal(np.stack([o[1] for o in outs]), expected)


def setters_kernel(op: T.SignalOp, npes: int = 3):
    """Every PE puts its rows to PE 0 and updates one word there by 1; PE 0 waits for the word to
    reach 1 (SET) or npes (ADD), then reads all rows. Other PEs wait for 0 (they pass at once)."""

    def setters(a, recv, result):
        sig = T.alloc_signal(1)
        me = T.get_pe()
        T.putmem_signal_nbi_block(recv[T.ds(me * BM, BM), :], a[0:BM, :], sig=sig[0], value=1, op=op, pe=0)
        target = 1 if op is T.SignalOp.SET else npes
        T.signal_wait_until(sig[0], T.Cmp.GE, (npes - me) // npes * target)  # PE 0: target; others: 0
        T.copy(recv[0 : npes * BM, :], result[0 : npes * BM, :])

    return build(setters, inputs=[((M, N), F32)], outputs=[((M, N), F32)] * 2, grid=(1,), num_pes=npes)


@pytest.mark.parametrize("delivery", ["late", "eager"])
def test_a_set_signal_orders_the_waiter_after_one_setter_only(delivery: str) -> None:
    """Seeing a word SET to 1 says that one of its setters arrived, not all of them: reading every
    setter's rows is a race (in eager mode all of them are there already: only the clocks can
    tell). With ADD and a wait for the sum, it is not. (Only PE 0's rows are written: no coverage.)"""
    msg = race_message(launch(session(setters_kernel(T.SignalOp.SET), delivery=delivery, check_coverage=False),
                              inputs(3, seed=6)))
    assert "on PE 0 by copy at" in msg and "putmem_signal_nbi_block" in msg
    data = inputs(3, seed=6)
    outs = run(session(setters_kernel(T.SignalOp.ADD), delivery=delivery, check_coverage=False), data)
    np.testing.assert_array_equal(outs[0][1][: 3 * BM], np.concatenate([d[0][:BM] for d in data]))


# --- put, then the peer reads: quiet alone is not enough, a barrier is --------------------------


def exchange_kernel(sync: str):
    """Puts rows to the next PE, then (after `sync`) copies the rows it received to `result`."""

    def exchange(a, recv, result):
        rows = T.ds(T.program_id(0) * BM, BM)
        T.putmem_nbi_block(recv[rows, :], a[rows, :], pe=nxt())
        if sync in ("quiet", "quiet+barrier"):
            T.quiet()
        if sync in ("barrier", "quiet+barrier"):
            T.barrier_all()
        T.copy(recv[rows, :], result[rows, :])

    return build(exchange, inputs=[((M, N), F32)], outputs=[((M, N), F32)] * 2, grid=(NB,), num_pes=4)


@pytest.mark.parametrize("delivery", ["late", "eager"])
@pytest.mark.parametrize("sync", ["none", "quiet"])
def test_reading_a_peers_put_without_a_barrier_is_a_race(sync: str, delivery: str) -> None:
    """The quiet completes the put, but the reader on the other PE is not ordered after that quiet."""
    kernel = exchange_kernel(sync)
    msg = race_message(launch(session(kernel, delivery=delivery), inputs(4, seed=7)))
    assert f"by putmem_nbi_block at {stmt_loc(kernel, Put)} (delivery of a transfer issued by PE " in msg
    assert "read of recv[" in msg and f"by copy at {stmt_loc(kernel, Copy)} (PE " in msg


@pytest.mark.parametrize("delivery", ["late", "eager"])
@pytest.mark.parametrize("sync", ["barrier", "quiet+barrier"])
def test_reading_a_peers_put_after_a_barrier_is_fine(sync: str, delivery: str) -> None:
    data = inputs(4, seed=8)
    outs = run(session(exchange_kernel(sync), delivery=delivery), data)
    np.testing.assert_array_equal(np.stack([o[1] for o in outs]), np.roll(np.stack([d[0] for d in data]), 1, axis=0))


def test_buffers_are_reused_across_barriers() -> None:
    """Phase 1 writes rows locally, phase 2 overwrites them from a peer, phase 3 reads them: the
    barriers order everything (and clear the logs)."""

    def phases(a, b, result):
        rows = T.ds(T.program_id(0) * BM, BM)
        T.copy(a[rows, :], b[rows, :])
        T.barrier_all()
        T.putmem_nbi_block(b[rows, :], a[rows, :], pe=nxt())
        T.barrier_all()
        T.copy(b[rows, :], result[rows, :])
        T.barrier_all()
        T.copy(a[rows, :], b[rows, :])

    kernel = build(phases, inputs=[((M, N), F32)], outputs=[((M, N), F32)] * 2, grid=(NB,), num_pes=4)
    data = inputs(4, seed=9)
    x = np.stack([d[0] for d in data])
    outs = run(session(kernel), data)
    np.testing.assert_array_equal(np.stack([o[1] for o in outs]), np.roll(x, 1, axis=0))
    np.testing.assert_array_equal(np.stack([o[0] for o in outs]), x)


# --- ordering between puts: fence ---------------------------------------------------------------


def flagged_kernel(between: str):
    """Data put, `between`, then a put-with-signal of a flag; the receiver waits for the flag and
    reads the data. Without a fence (or quiet) the flag may arrive first."""

    def flagged(a, recv, flag, result):
        bx = T.program_id(0)
        rows = T.ds(bx * BM, BM)
        sig = T.alloc_signal(NB)
        T.putmem_nbi_block(recv[rows, :], a[rows, :], pe=nxt())
        if between == "fence":
            T.fence()
        elif between == "quiet":
            T.quiet()
        T.putmem_signal_nbi_block(flag[T.ds(bx, 1), :], a[T.ds(bx * BM, 1), :], sig=sig[bx], value=1,
                                  op=T.SignalOp.SET, pe=nxt())
        T.signal_wait_until(sig[bx], T.Cmp.EQ, 1)
        T.copy(recv[rows, :], result[rows, :])

    shapes = [((M, N), F32), ((NB, N), F32), ((M, N), F32)]
    return build(flagged, inputs=[((M, N), F32)], outputs=shapes, grid=(NB,), num_pes=2)


@pytest.mark.parametrize("delivery", ["late", "eager"])
def test_a_flag_without_a_fence_does_not_order_the_data(delivery: str) -> None:
    kernel = flagged_kernel("none")
    msg = race_message(launch(session(kernel, delivery=delivery), inputs(2, seed=10)))
    assert f"by putmem_nbi_block at {stmt_loc(kernel, Put, 0)} (delivery" in msg
    assert f"by copy at {stmt_loc(kernel, Copy)} (PE " in msg


@pytest.mark.parametrize("reorder", [False, True])
@pytest.mark.parametrize("between", ["fence", "quiet"])
def test_a_flag_after_a_fence_or_quiet_orders_the_data(between: str, reorder: bool) -> None:
    data = inputs(2, seed=11)
    outs = run(session(flagged_kernel(between), reorder_unfenced=reorder), data)
    np.testing.assert_array_equal(np.stack([o[2] for o in outs]), np.roll(np.stack([d[0] for d in data]), 1, axis=0))


@pytest.mark.parametrize("between", ["none", "fence", "quiet"])
def test_two_puts_to_the_same_rows(between: str) -> None:
    """Unfenced puts to one PE may land in any order: writing the same rows twice is a race."""

    def twice(a, b):
        rows = T.ds(T.program_id(0) * BM, BM)
        T.putmem_nbi_block(b[rows, :], a[rows, :], pe=nxt())
        if between == "fence":
            T.fence()
        elif between == "quiet":
            T.quiet()
        T.putmem_nbi_block(b[rows, :], a[T.ds((T.program_id(0) + 1) % NB * BM, BM), :], pe=nxt())

    kernel = build(twice, inputs=[((M, N), F32)], outputs=[((M, N), F32)], grid=(NB,), num_pes=2)
    data = inputs(2, seed=12)
    res = launch(session(kernel, reorder_unfenced=True), data)
    if between == "none":
        msg = race_message(res)
        assert stmt_loc(kernel, Put, 0) in msg and stmt_loc(kernel, Put, 1) in msg
        return
    x = np.stack([d[0] for d in data])
    np.testing.assert_array_equal(np.stack([o[0] for o in res.check()]), np.roll(np.roll(x, -BM, axis=1), 1, axis=0))


# --- blocking puts write at issue, with the issuer's clock -------------------------------------


def test_blocking_put_is_ordered_before_the_issuers_next_statements() -> None:
    """A blocking put to this PE, then a read of its destination: program order (no race). The
    language has no blocking put yet: the IR's Put is made blocking by hand."""

    def self_put(a, recv, result):
        rows = T.ds(T.program_id(0) * BM, BM)
        T.putmem_nbi_block(recv[rows, :], a[rows, :], pe=T.get_pe())
        T.copy(recv[rows, :], result[rows, :])

    kernel = build(self_put, inputs=[((M, N), F32)], outputs=[((M, N), F32)] * 2, grid=(NB,), num_pes=2)
    blocking = dataclasses.replace(
        kernel, body=tuple(dataclasses.replace(s, blocking=True) if isinstance(s, Put) else s for s in kernel.body)
    )
    data = inputs(2, seed=13)
    outs = run(session(blocking), data)
    for p in range(2):
        np.testing.assert_array_equal(outs[p][1], data[p][0])
    # The non-blocking original reads before the put completes.
    msg = race_message(launch(session(kernel), data))
    assert stmt_loc(kernel, Put) in msg and stmt_loc(kernel, Copy) in msg


# --- coverage -------------------------------------------------------------------------------------


@pytest.mark.parametrize("npes", [1, 4])
def test_a_grid_that_does_not_cover_the_output_is_reported(npes: int) -> None:
    def copy_rows(a, b):
        rows = T.ds(T.program_id(0) * BM, BM)
        T.putmem_nbi_block(b[rows, :], a[rows, :], pe=nxt())

    kernel = build(copy_rows, inputs=[((M, N), F32)], outputs=[((M, N), F32)], grid=(NB - 1,), num_pes=npes)
    res = launch(session(kernel), inputs(npes, seed=14))
    messages = [str(e) for e in res.errors]
    assert all(isinstance(e, KernelRuntimeError) for e in res.errors)
    msg = next(m for m in messages if not m.startswith("PE "))  # the PE that found it; others: "PE k failed: ..."
    assert f"output b (float32[{M}, {N}]) of PE 0: {BM * N} of {M * N} elements were never written, " \
        f"the first at [{(NB - 1) * BM}, 0]" in msg
    assert f"Does the grid ({NB - 1},) cover every output?" in msg
    assert all(m == msg or (m.startswith("PE ") and msg in m) for m in messages)
    # The check can be switched off: the unwritten rows then hold poison.
    outs = run(session(kernel, check_coverage=False), inputs(npes, seed=14))
    assert np.isnan(outs[0][0][(NB - 1) * BM:]).all()


# --- options and the JAX path ------------------------------------------------------------------


def test_detect_races_false_lets_a_racy_kernel_run() -> None:
    outs = run(session(exchange_kernel("none"), detect_races=False), inputs(4, seed=15))
    assert np.isnan(outs[0][1]).all()  # late delivery: the unsynchronised read saw poison


def test_a_race_surfaces_through_jax() -> None:
    @ts.kernel(out_shape=jax.ShapeDtypeStruct((M, N), jnp.float32), grid=(NB,))
    def clobber(a, b):
        rows = T.ds(T.program_id(0) * BM, BM)
        T.putmem_nbi_block(b[rows, :], a[rows, :], pe=(T.get_pe() + 1) % T.get_pe_num())
        T.copy(a[rows, :], b[rows, :])

    mesh = jax.make_mesh((2,), ("x",), devices=jax.devices()[:2])
    f = jax.jit(jax.shard_map(clobber, mesh=mesh, in_specs=P("x"), out_specs=P("x")))
    x = jax.device_put(np.ones((2 * M, N), np.float32), NamedSharding(mesh, P("x")))
    with pytest.raises(Exception, match="data race on PE") as info:
        jax.block_until_ready(f(x))
    assert "putmem_nbi_block" in str(info.value) and "by copy at" in str(info.value)


# --- the detector's hooks, directly (what new statements will call) -----------------------------


class _Hooks:
    """A RaceDetector for 2 PEs x 2 blocks and one (16, 4) output, with accesses made by hand."""

    def __init__(self) -> None:
        self.buf = Buffer("out", (128, 4), np.dtype(np.float32), BufferKind.OUTPUT)
        self.word = ResolvedRegion(Buffer("sig", (2,), np.dtype(np.uint64), BufferKind.SIGNAL), (0,), (1,))
        self.race = RaceDetector(2, [(0,), (1,)])

    def access(self, write: bool, rows: tuple[int, int], owner: int, pe: int, block=None, via=None, line: int = 1):
        region = ResolvedRegion(self.buf, (rows[0], 0), (rows[1] - rows[0], 4))
        stmt = Copy(full_region(self.buf), full_region(self.buf), loc=SourceLoc("k.py", line))
        kind = AccessKind.WRITE if write else AccessKind.READ
        self.race.observe(Access(kind, region, owner, None, pe, block, stmt, via))


def test_hooks_a_new_wait_type_acquires_through_sync_words() -> None:
    h = _Hooks()
    h.race.on_issue("t", 0, (0,), 1)  # PE 0 block 0 puts to PE 1 ...
    h.race.begin_delivery("t")
    h.access(True, (0, 8), owner=1, pe=0, via="t", line=10)
    h.race.sync_to(h.race.agent_for("t"), 1, h.word, SignalOp.SET)  # ... with a signal
    h.race.end_delivery("t")

    class RemoteWait:  # e.g. a wait on a word of another PE
        pe, block = 1, (0,)

        def sync_words(self):
            return [(1, h.word)]

    h.race.after_wait(RemoteWait())
    h.access(False, (0, 8), owner=1, pe=1, block=(0,), line=11)  # ordered: no race
    with pytest.raises(RaceError, match=r"k\.py:10.*\n.*k\.py:12"):
        h.access(False, (4, 6), owner=1, pe=1, block=(1,), line=12)  # block 1 did not wait


def test_hooks_join_all_with_a_transfer_in_flight_orders_blocks_not_the_transfer() -> None:
    h = _Hooks()
    h.access(True, (0, 8), owner=0, pe=0, block=(0,), line=1)
    h.race.on_issue("t", 1, (1,), 0)  # still in flight at the join (a sync without quiet)
    h.race.join_all()
    h.access(False, (0, 8), owner=0, pe=1, block=(0,), line=2)  # after the join: ordered after line 1
    h.race.begin_delivery("t")
    with pytest.raises(RaceError, match=r"k\.py:3 \(delivery of a transfer issued by PE 1, block \(1,\)\)"):
        h.access(True, (4, 12), owner=0, pe=1, via="t", line=3)  # the join does not order the transfer


def test_hooks_logs_are_pruned_once_every_live_agent_is_ordered_after_them() -> None:
    h = _Hooks()
    for i in range(100):  # distinct rows of PE 1, read by PE 0 block 0, a release between reads
        h.access(False, (i, i + 1), owner=1, pe=0, block=(0,))
        h.race.sync_to(h.race.block_agent(0, (0,)), 0, h.word, SignalOp.ADD)
    h.access(False, (5, 6), owner=1, pe=0, block=(0,))  # replaces the older read of row 5
    (log,) = h.race._logs.values()
    assert len(log) == 100  # nobody is ordered after them yet: pruning (at 64) kept them all
    for pe, block in [(0, (1,)), (1, (0,))]:
        h.race.sync_from(h.race.block_agent(pe, block), 0, h.word)  # these acquire all of it
    h.race.block_done(1, (1,))  # and this one is gone
    h.race._prune(log)
    assert len(log) == 1  # only the newest read (after the last release) is not covered
    h.race.join_all()  # nothing in flight: a full reset
    assert not h.race._logs


# --- a flag written by a plain put, waited on with wait_eq ------------------------------------------


def plain_flag_kernel(fence: bool):
    """Data put, optional fence, then a plain put of a flag word (no signal); the receiver waits
    on the word with wait_eq and reads the data: NVSHMEM orders the two deliveries only with the fence."""

    def plain_flag(a, ones, result):
        bx = T.program_id(0)
        rows = T.ds(bx * BM, BM)
        recv = T.alloc_symmetric((M, N), F32)
        flag = T.alloc_symmetric((NB,), np.int64)
        T.putmem_nbi_block(recv[rows, :], a[rows, :], pe=nxt())
        if fence:
            T.fence()
        T.putmem_nbi(flag[T.ds(bx, 1)], ones[T.ds(bx, 1)], pe=nxt())
        T.wait_eq(flag[bx], 1)
        T.copy(recv[rows, :], result[rows, :])

    return build(plain_flag, inputs=[((M, N), F32), ((NB,), np.int64)], outputs=[((M, N), F32)], grid=(NB,),
                 num_pes=2)


def _plain_flag_inputs(seed: int) -> list[list[np.ndarray]]:
    return [[d[0], np.ones(NB, np.int64)] for d in inputs(2, seed=seed)]


@pytest.mark.parametrize("delivery", ["late", "eager"])
def test_a_plain_put_flag_after_a_fence_orders_the_data(delivery: str) -> None:
    data = _plain_flag_inputs(13)
    outs = run(session(plain_flag_kernel(True), delivery=delivery, reorder_unfenced=True), data)
    np.testing.assert_array_equal(np.stack([o[0] for o in outs]), np.roll(np.stack([d[0] for d in data]), 1, axis=0))


def test_a_plain_put_flag_without_a_fence_does_not_order_the_data() -> None:
    kernel = plain_flag_kernel(False)
    msg = race_message(launch(session(kernel, reorder_unfenced=True), _plain_flag_inputs(14)))
    assert f"by putmem_nbi_block at {stmt_loc(kernel, Put, 0)} (delivery" in msg
