"""When one PE's error stops the others, every PE reports the original error and the PE at fault;
errors about the launch as a whole are reported as they are by every PE. Run-time sizes that are
negative say so."""

from __future__ import annotations

import numpy as np
import pytest

from jax_tilescale import language as T
from jax_tilescale.errors import KernelRuntimeError
from jax_tilescale.ir.nodes import Put

from .harness import build, launch, random_inputs, session, stmt_loc

F32 = np.float32
M, N, BM = 32, 8, 16
NPES = 4


def inputs(seed: int = 0) -> list[list[np.ndarray]]:
    x = random_inputs(np.random.default_rng(seed), NPES, (M, N))
    return [[x[p]] for p in range(NPES)]


def test_unwritten_outputs_are_reported_alike_by_every_pe() -> None:
    """Only PE 2 leaves rows unwritten; whichever PE completes the end barrier finds it, and no PE
    may blame that one: every PE reports the coverage error itself."""

    def gap_on_pe2(a, b):
        T.copy(a[0:BM, :], b[0:BM, :])
        with T.If(T.get_pe() != 2):
            T.copy(a[BM:M, :], b[BM:M, :])

    kernel = build(gap_on_pe2, inputs=[((M, N), F32)], outputs=[((M, N), F32)], grid=(1,), num_pes=NPES)
    res = launch(session(kernel), inputs())
    messages = {str(e) for e in res.errors}
    assert len(messages) == 1 and all(type(e) is KernelRuntimeError for e in res.errors)
    msg = messages.pop()
    assert not msg.startswith("PE ") and f"output b (float32[{M}, {N}]) of PE 2: {BM * N} of {M * N}" in msg


def test_mismatched_collectives_are_reported_alike_by_every_pe() -> None:
    def two_barriers(a, b):
        T.copy(a, b)
        with T.If(T.get_pe() % 2 == 0):
            T.barrier_all_block()
        with T.Else():
            T.sync_all_block()  # PEs pair different team collectives

    kernel = build(two_barriers, inputs=[((M, N), F32)], outputs=[((M, N), F32)], grid=(1,), num_pes=NPES)
    res = launch(session(kernel), inputs(1))
    messages = {str(e) for e in res.errors}
    assert len(messages) == 1, messages
    assert "team collective call 1 of each PE pairs different statements" in messages.pop()


def test_a_one_pe_error_names_that_pe_on_every_other_pe() -> None:
    def bad_target_on_pe3(a, b):
        rows = T.ds(T.program_id(0) * BM, BM)
        T.copy(a[rows, :], b[rows, :])
        T.putmem_nbi_block(b[rows, :], a[rows, :], pe=(T.get_pe() * 3) % 5)  # PE 3 targets PE 4 of 0..3

    kernel = build(bad_target_on_pe3, inputs=[((M, N), F32)], outputs=[((M, N), F32)], grid=(2,), num_pes=NPES)
    res = launch(session(kernel), inputs(2))
    original = str(res.errors[3])
    assert "target PE 4" in original and f"(PE 3, block (0,), at {stmt_loc(kernel, Put)})" in original
    for pe in (0, 1, 2):
        assert type(res.errors[pe]) is KernelRuntimeError
        assert str(res.errors[pe]) == f"PE 3 failed: {original}"


@pytest.mark.parametrize("op", ["put", "get"])
def test_a_negative_run_time_size_says_it_is_negative(op: str) -> None:
    def negative(a, sizes, b):
        there = T.alloc_symmetric((M, N), F32)
        T.copy(a, b)
        nbytes = T.load(sizes[T.get_pe()]) * (N * 4)
        if op == "put":
            T.putmem_block(there[0, :], a[0, :], nbytes, (T.get_pe() + 1) % T.get_pe_num())
        else:
            T.getmem_block(there[0, :], a[0, :], nbytes, (T.get_pe() + 1) % T.get_pe_num())

    kernel = build(negative, inputs=[((M, N), F32), ((NPES,), np.int32)], outputs=[((M, N), F32)], grid=(1,),
                   num_pes=NPES)
    sizes = np.array([2, 1, -3, 0], np.int32)
    res = launch(session(kernel), [[x[0], sizes] for x in inputs(3)])
    msg = str(res.errors[2])
    loc = kernel.body[-1].loc
    assert f"{op}mem_block: size=(sizes[pe] * 32) is negative: -96 bytes (PE 2, block (0,), at {loc})" in msg, msg
    assert "whole number" not in msg
    assert str(res.errors[0]) == f"PE 2 failed: {msg}"
