"""T.atomic_fetch_add, the block's ordered ticket (examples/gemm.py's split-K turnstile): every block
draws a different ticket, the block that draws the last one reads what the others wrote before
theirs without a race (release/acquire through the word), a part written after the ticket is a
race, and the errors (its CUDA: tests/codegen/test_fetch_add_nvcc.py)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_tilescale as ts
from jax_tilescale import language as T
from jax_tilescale.errors import KernelTraceError
from tests.compute.test_elementwise import rand, run1

SDS = jax.ShapeDtypeStruct
BLOCKS, N = 5, 16


def _turnstile(write_after_ticket: bool = False, dtype=jnp.int32):
    """Each block writes its part (x[b] * (b + 1)), draws a ticket; the last sums every part in
    block order into `total`. `write_after_ticket`: the part is written after the ticket (wrong)."""

    @ts.kernel(out_shape=(SDS((N,), jnp.float32), SDS((BLOCKS,), jnp.int32), SDS((BLOCKS, N), jnp.float32)),
               grid=(BLOCKS,))
    def k(x, total, tickets, parts):
        bx = T.program_id(0)
        count = T.alloc((1,), dtype, level="global")
        ticket = T.alloc_shared((1,), dtype)
        if not write_after_ticket:
            for j in T.Parallel(N):
                parts[bx, j] = x[bx, j] * T.cast(bx + 1, jnp.float32)
        T.atomic_fetch_add(count[0], 1, ticket[0])
        if write_after_ticket:
            for j in T.Parallel(N):
                parts[bx, j] = x[bx, j] * T.cast(bx + 1, jnp.float32)
        for j in T.Parallel(1):
            tickets[bx + j] = T.cast(ticket[0], jnp.int32)
        if ticket[0] == BLOCKS - 1:
            acc = T.alloc_shared((N,), jnp.float32)
            T.clear(acc)
            for b in T.serial(BLOCKS):
                for j in T.Parallel(N):
                    acc[j] = acc[j] + parts[b, j]
            T.copy(acc, total)

    return k


@pytest.mark.parametrize("dtype", [jnp.int32, jnp.int64])
def test_the_last_ticket_reads_every_part_without_a_race(dtype):
    x = rand(np.random.default_rng(60), (BLOCKS, N), np.float32)
    total, tickets, _ = run1(_turnstile(dtype=dtype), x)
    assert sorted(tickets.tolist()) == list(range(BLOCKS))  # one ticket each, none twice
    want = np.zeros(N, np.float32)
    for b in range(BLOCKS):  # block order, in float32, as the kernel adds
        want = want + x[b] * np.float32(b + 1)
    np.testing.assert_array_equal(total, want)


def test_a_part_written_after_the_ticket_is_a_race():
    """The ticket orders only what the block did before it: the last block's read of a part written
    after its writer's ticket is reported."""
    x = rand(np.random.default_rng(61), (BLOCKS, N), np.float32)
    with pytest.raises(ts.RaceError, match=r"data race .* parts"):
        run1(_turnstile(write_after_ticket=True), x)


def _kernel(body, dtype=jnp.int32):
    @ts.kernel(out_shape=SDS((4,), jnp.int32), grid=(2,))
    def k(x, y):
        body(x, y)

    return k.trace(SDS((4,), jnp.int32))


def test_a_word_in_shared_memory_is_refused():
    def body(x, y):
        word = T.alloc_shared((1,), jnp.int32)
        prev = T.alloc_shared((1,), jnp.int32)
        T.atomic_fetch_add(word[0], 1, prev[0])

    with pytest.raises(KernelTraceError, match=r"atomic_fetch_add: .*word.*global memory"):
        _kernel(body)


def test_prev_of_another_dtype_or_outside_shared_memory_is_refused():
    def other_dtype(x, y):
        word = T.alloc((1,), jnp.int32, level="global")
        prev = T.alloc_shared((1,), jnp.int64)
        T.atomic_fetch_add(word[0], 1, prev[0])

    def in_global(x, y):
        word = T.alloc((2,), jnp.int32, level="global")
        T.atomic_fetch_add(word[0], 1, word[1])

    with pytest.raises(KernelTraceError, match=r"prev .* is int64, the word .* int32: give them one dtype"):
        _kernel(other_dtype)
    with pytest.raises(KernelTraceError, match=r"atomic_fetch_add: .*prev.*shared tile"):
        _kernel(in_global)


def test_a_float_word_is_refused():
    def body(x, y):
        word = T.alloc((1,), jnp.float32, level="global")
        prev = T.alloc_shared((1,), jnp.float32)
        T.atomic_fetch_add(word[0], 1, prev[0])

    with pytest.raises(KernelTraceError, match=r"is float32; it counts in int32, uint32, int64 or uint64"):
        _kernel(body)


def _counted(take_back: int | None, blocks: int = BLOCKS):
    """Each block draws a ticket from a `left_zero` counter; the last one adds `take_back` (None: nothing)."""

    @ts.kernel(out_shape=SDS((blocks,), jnp.int32), grid=(blocks,))
    def k(x, tickets):
        bx = T.program_id(0)
        count = T.alloc((2,), jnp.int32, level="global", left_zero=True)
        ticket = T.alloc_shared((2,), jnp.int32)
        T.atomic_fetch_add(count[1], 1, ticket[0])
        for j in T.Parallel(1):
            tickets[bx + j] = ticket[0] + x[bx + j] * 0
        if take_back is not None and ticket[0] == blocks - 1:
            T.atomic_fetch_add(count[1], take_back, ticket[1])

    return k


def test_a_counter_taken_back_to_zero_keeps_its_promise():
    """The interpreter checks the promise at the end of each launch (on the GPU the next launch's tickets
    depend on it: tests/gpu/test_gemm_paths_gpu.py::test_split_k_matches_dot runs the split-K kernel twice)."""
    kern = _counted(take_back=-BLOCKS)
    for _ in range(2):
        assert sorted(run1(kern, np.zeros(BLOCKS, np.int32))[0].tolist()) == list(range(BLOCKS))


@pytest.mark.parametrize("take_back", [None, -BLOCKS + 1])
def test_a_counter_left_counting_breaks_the_promise_by_name(take_back):
    left = BLOCKS - (0 if take_back is None else BLOCKS - 1)
    with pytest.raises(ts.KernelRuntimeError, match=rf"ended with count\[1\] = {left} on PE 0 .*left_zero=True"):
        run1(_counted(take_back), np.zeros(BLOCKS, np.int32))


def test_left_zero_is_a_promise_about_global_scratch_only():
    def body(x, y):
        T.alloc((4,), jnp.int32, level="l1", left_zero=True)

    with pytest.raises(KernelTraceError, match=r'left_zero=True is a promise about level="global" scratch'):
        _kernel(body)
