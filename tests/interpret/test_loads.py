"""T.load of memory that changes while the kernel runs (symmetric scratch, outputs, signal words):
the value a wait delivered, used as a size, an offset, a PE, a wait value and a condition; and the
interpreter's ordering check (a load no wait orders after the write, or that a `_nbi` put still in
flight overwrites, is a RaceError naming both lines)."""

from __future__ import annotations

import numpy as np
import pytest

from jax_tilescale import language as T
from jax_tilescale.errors import RaceError
from jax_tilescale.ir.nodes import Put, RemoteSignal
from jax_tilescale.ir.tile_ops import Store

from .harness import build, launch, random_inputs, run, session, stmt_loc

I32, F32 = np.int32, np.float32
ROWS, N = 16, 8
ROW_BYTES = N * 4


def race_message(res) -> str:
    """Every PE fails with the same RaceError; returns its message."""
    messages = set()
    for err in res.errors:
        assert isinstance(err, RaceError), repr(err)
        messages.add(str(err))
    assert len(messages) == 1, messages
    return messages.pop()


def peer():
    return (T.get_pe() + 1) % T.get_pe_num()


def prev_pe(pe: int, npes: int) -> int:
    return (pe - 1) % npes


# --- the value a wait delivered, used everywhere an index value goes ----------------------------


def count_then_rows(x, counts, out):
    """Each PE sends its count of rows to the next PE (put + signal), which waits, T.loads it and
    uses it as the byte count and offset of a put back, as a PE number and as a condition."""
    sym = T.alloc_symmetric((2,), I32)
    got = T.alloc_signal(2)
    T.putmem_signal_nbi(sym[0:2], counts[0:2], sig=got[0], value=1, op=T.SignalOp.ADD, pe=peer())
    T.signal_wait_until(got[0], T.Cmp.EQ, 1)
    n = T.load(sym[0])  # rows the previous PE wants
    start = T.load(sym[1])  # where they start in this PE's x
    # x rows [start, start + n) -> out rows [0, n) of this PE itself: run-time size and offsets
    T.putmem_block(out[0, :], x[start, :], n * ROW_BYTES, pe=T.get_pe())
    with T.If(T.load(sym[0]) > 0):
        out[ROWS - 1, 0] = T.load(sym[1]) * 1.0 + 0.5  # marks that the condition held
    # the PE number and the wait value come from loaded data too: signal the PE whose count
    # arrived, by the amount it asked for, and wait for as much from the next PE
    T.signal_op(got[1], T.load(sym[0]) + 1, T.SignalOp.ADD, (T.get_pe() - 1 + T.get_pe_num()) % T.get_pe_num())
    T.signal_wait_until(got[1], T.Cmp.EQ, T.load(counts[0]) + 1)


@pytest.mark.parametrize("npes", [2, 4])
def test_loaded_counts_drive_sizes_offsets_pes_waits_and_conditions(npes: int) -> None:
    rng = np.random.default_rng(npes)
    kernel = build(count_then_rows, inputs=[((ROWS, N), F32), ((2,), I32)], outputs=[((ROWS, N), F32)], grid=(1,),
                   num_pes=npes)
    x = random_inputs(rng, npes, (ROWS, N))
    counts = np.zeros((npes, 2), I32)
    counts[:, 0] = rng.integers(0, ROWS - 4, npes)
    counts[0, 0] = 0  # a zero count: nothing moves, the condition fails
    counts[:, 1] = rng.integers(0, 4, npes)
    outs = run(session(kernel, check_coverage=False), [[x[p], counts[p]] for p in range(npes)])
    for p in range(npes):
        q = prev_pe(p, npes)  # the PE whose counts p received
        n, start = counts[q]
        np.testing.assert_array_equal(outs[p][0][:n], x[p][start:start + n])
        assert (outs[p][0][ROWS - 1, 0] == start + 0.5) == (n > 0)


# --- the ordering check ---------------------------------------------------------------------------


def load_without_wait(x, counts, out):
    sym = T.alloc_symmetric((2,), I32)
    T.putmem_nbi(sym[0:2], counts[0:2], pe=peer())
    T.putmem_block(out[0, :], x[0, :], T.load(sym[0]) * ROW_BYTES, pe=T.get_pe())  # bug: nothing waited


def load_after_barrier(x, counts, out):
    sym = T.alloc_symmetric((2,), I32)
    T.putmem_nbi(sym[0:2], counts[0:2], pe=peer())
    T.barrier_all()
    T.putmem_block(out[0, :], x[0, :], T.load(sym[0]) * ROW_BYTES, pe=T.get_pe())


def inputs_of(npes: int, seed: int) -> list[list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    x = random_inputs(rng, npes, (ROWS, N))
    counts = np.stack([rng.integers(1, ROWS, npes), np.zeros(npes)], axis=1).astype(I32)
    return [[x[p], counts[p]] for p in range(npes)]


@pytest.mark.parametrize("delivery", ["late", "eager"])
def test_load_of_peer_written_word_without_a_wait_is_a_race(delivery: str) -> None:
    kernel = build(load_without_wait, inputs=[((ROWS, N), F32), ((2,), I32)], outputs=[((ROWS, N), F32)],
                   grid=(1,), num_pes=2)
    msg = race_message(launch(session(kernel, delivery=delivery, check_coverage=False), inputs_of(2, 1)))
    put_line, load_line = stmt_loc(kernel, Put, 0), stmt_loc(kernel, Put, 1)
    assert "symmetric buffer" in msg
    assert f"by putmem_nbi at {put_line}" in msg
    assert "T.load of " in msg and f"by putmem_block at {load_line}" in msg
    assert "put it after the wait that delivered the data" in msg


def test_load_after_the_barrier_that_delivered_it_is_fine() -> None:
    kernel = build(load_after_barrier, inputs=[((ROWS, N), F32), ((2,), I32)], outputs=[((ROWS, N), F32)],
                   grid=(1,), num_pes=2)
    data = inputs_of(2, 2)
    outs = run(session(kernel, check_coverage=False), data)
    for p in range(2):
        n = data[prev_pe(p, 2)][1][0]
        np.testing.assert_array_equal(outs[p][0][:n], data[p][0][:n])


def load_own_put_in_flight(x, counts, out):
    sym = T.alloc_symmetric((2,), I32)
    T.putmem_nbi(sym[0:2], counts[0:2], pe=T.get_pe())  # into this PE's own word, completes at quiet
    out[0, 0] = T.load(sym[0]) * 1.0  # bug: the put may still be in flight
    T.quiet()


def load_own_put_after_quiet(x, counts, out):
    sym = T.alloc_symmetric((2,), I32)
    T.putmem_nbi(sym[0:2], counts[0:2], pe=T.get_pe())
    T.quiet()
    out[0, 0] = T.load(sym[0]) * 1.0


def test_load_while_a_nbi_put_into_the_word_is_in_flight_is_a_race() -> None:
    kernel = build(load_own_put_in_flight, inputs=[((ROWS, N), F32), ((2,), I32)], outputs=[((ROWS, N), F32)],
                   grid=(1,), num_pes=2)
    msg = race_message(launch(session(kernel, check_coverage=False), inputs_of(2, 3)))
    assert f"by putmem_nbi at {stmt_loc(kernel, Put, 0)}" in msg
    assert "T.load of " in msg and f"by store at {stmt_loc(kernel, Store, 0)}" in msg
    assert "delivery of a transfer issued by PE" in msg


def test_load_of_own_put_after_quiet_is_fine() -> None:
    kernel = build(load_own_put_after_quiet, inputs=[((ROWS, N), F32), ((2,), I32)], outputs=[((ROWS, N), F32)],
                   grid=(1,), num_pes=2)
    data = inputs_of(2, 4)
    outs = run(session(kernel, check_coverage=False), data)
    for p in range(2):
        assert outs[p][0][0, 0] == data[p][1][0]


def unfenced_flag(x, counts, out):
    """The writer puts the data, then signals without a fence: the signal may overtake the data."""
    sym = T.alloc_symmetric((2,), I32)
    sig = T.alloc_signal(1)
    T.putmem_nbi(sym[0:2], counts[0:2], pe=peer())
    T.signal_op(sig[0], 1, T.SignalOp.SET, peer())  # bug: no T.fence() before it
    T.signal_wait_until(sig[0], T.Cmp.EQ, 1)
    out[0, 0] = T.load(sym[0]) * 1.0
    T.quiet()


def test_load_after_a_signal_that_does_not_order_the_data_is_a_race() -> None:
    kernel = build(unfenced_flag, inputs=[((ROWS, N), F32), ((2,), I32)], outputs=[((ROWS, N), F32)], grid=(1,),
                   num_pes=2)
    msg = race_message(launch(session(kernel, check_coverage=False), inputs_of(2, 5)))
    assert f"by putmem_nbi at {stmt_loc(kernel, Put, 0)}" in msg
    assert f"by store at {stmt_loc(kernel, Store, 0)}" in msg


# --- signal words -------------------------------------------------------------------------------


def signal_count(x, counts, out):
    """Every PE adds its count to word 0 of PE 0, then signals word 1; PE 0 waits for all and loads
    the total."""
    sig = T.alloc_signal(2)
    T.signal_op(sig[0], T.load(counts[0]), T.SignalOp.ADD, 0)
    T.fence()
    T.signal_op(sig[1], 1, T.SignalOp.ADD, 0)
    with T.If(T.get_pe() == 0):
        T.signal_wait_until(sig[1], T.Cmp.EQ, T.get_pe_num())
        out[0, 0] = T.load(sig[0]) * 1.0
    T.quiet()


def signal_count_too_early(x, counts, out):
    sig = T.alloc_signal(2)
    T.signal_op(sig[0], T.load(counts[0]), T.SignalOp.ADD, 0)
    T.fence()
    T.signal_op(sig[1], 1, T.SignalOp.ADD, 0)
    with T.If(T.get_pe() == 0):
        T.signal_wait_until(sig[1], T.Cmp.GE, 1)  # bug: one PE's signal, not every PE's
        out[0, 0] = T.load(sig[0]) * 1.0
    T.quiet()


@pytest.mark.parametrize("npes", [2, 4])
def test_load_of_a_signal_word_after_the_wait_for_every_update(npes: int) -> None:
    kernel = build(signal_count, inputs=[((ROWS, N), F32), ((2,), I32)], outputs=[((ROWS, N), F32)], grid=(1,),
                   num_pes=npes)
    data = inputs_of(npes, 6)
    outs = run(session(kernel, check_coverage=False), data)
    assert outs[0][0][0, 0] == sum(int(d[1][0]) for d in data)


def test_load_of_a_signal_word_some_updates_may_still_reach_is_a_race() -> None:
    kernel = build(signal_count_too_early, inputs=[((ROWS, N), F32), ((2,), I32)], outputs=[((ROWS, N), F32)],
                   grid=(1,), num_pes=4)
    res = launch(session(kernel, check_coverage=False), inputs_of(4, 7))
    msg = race_message(res)
    assert "PE 0's signal buffer" in msg
    assert "signal update of " in msg and f"by signal_op at {stmt_loc(kernel, RemoteSignal, 0)}" in msg
    assert "T.load of " in msg


def test_signal_word_loads_read_uint64_as_int64() -> None:
    def big(x, counts, out):
        sig = T.alloc_signal(1)
        T.signal_op(sig[0], (1 << 63) + 5, T.SignalOp.SET, T.get_pe())
        T.quiet()
        T.signal_wait_until(sig[0], T.Cmp.NE, 0)
        out[0, 0] = T.load(sig[0]) * 1.0

    kernel = build(big, inputs=[((ROWS, N), F32), ((2,), I32)], outputs=[((ROWS, N), F32)], grid=(1,), num_pes=2)
    outs = run(session(kernel, check_coverage=False), inputs_of(2, 8))
    assert outs[0][0][0, 0] == np.float32(-(1 << 63) + 5)



def test_load_of_an_output_element_nothing_wrote_is_reported() -> None:
    def unwritten(x, counts, out, flags):
        flags[0] = T.load(counts[0])
        out[0] = T.load(flags[1]) * 1.0  # bug: flags[1] was never written

    kernel = build(unwritten, inputs=[((ROWS, N), F32), ((2,), I32)], outputs=[((1,), F32), ((2,), I32)],
                   grid=(1,), num_pes=2)
    res = launch(session(kernel), inputs_of(2, 9))  # output coverage (the default) tracks what was written
    assert all(err is not None for err in res.errors)
    err = res.errors[0]
    assert "nothing has written yet" in str(err) and stmt_loc(kernel, Store, 1) in str(err), err


def test_load_of_an_output_element_this_block_wrote_is_fine() -> None:
    def written(x, counts, out, flags):
        flags[1] = T.load(counts[0]) + 1
        flags[0] = T.load(flags[1])  # program order: the block's own store
        out[0] = T.load(flags[0]) * 1.0

    kernel = build(written, inputs=[((ROWS, N), F32), ((2,), I32)], outputs=[((1,), F32), ((2,), I32)],
                   grid=(1,), num_pes=2)
    data = inputs_of(2, 10)
    outs = run(session(kernel), data)
    assert [outs[p][0][0] for p in range(2)] == [data[p][1][0] + 1 for p in range(2)]



def flag_after(fenced: bool):
    def flag_kernel(x, counts, out):
        """The writer puts the data, fences (or not), then puts a flag word; the reader polls the flag."""
        sym = T.alloc_symmetric((2,), I32)
        flag = T.alloc_symmetric((1,), I32)
        T.putmem_nbi(sym[0:2], counts[0:2], pe=peer())
        if fenced:
            T.fence()
        T.putmem_nbi(flag[0:1], counts[1:2], pe=peer())  # counts[1] == 7: the flag's value
        T.wait_eq(flag[0], 7)
        out[0] = T.load(sym[0]) * 1.0
        T.quiet()

    return flag_kernel


def flag_inputs(seed: int) -> list[list[np.ndarray]]:
    data = inputs_of(2, seed)
    for d in data:
        d[1][1] = 7
    return data


def test_load_after_wait_on_a_flag_put_after_a_fence_is_fine() -> None:
    kernel = build(flag_after(True), inputs=[((ROWS, N), F32), ((2,), I32)], outputs=[((1,), F32)], grid=(1,),
                   num_pes=2)
    data = flag_inputs(11)
    for delivery in ("late", "eager"):
        outs = run(session(kernel, delivery=delivery, reorder_unfenced=True), data)
        assert [outs[p][0][0] for p in range(2)] == [data[prev_pe(p, 2)][1][0] for p in range(2)]


def test_load_after_wait_on_an_unfenced_flag_is_a_race() -> None:
    kernel = build(flag_after(False), inputs=[((ROWS, N), F32), ((2,), I32)], outputs=[((1,), F32)], grid=(1,),
                   num_pes=2)
    msg = race_message(launch(session(kernel), flag_inputs(12)))
    assert f"by putmem_nbi at {stmt_loc(kernel, Put, 0)}" in msg and "T.load of " in msg
