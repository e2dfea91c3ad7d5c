"""How a launch starts and ends under ABI 3 (docs/calling_convention.md, "End of a call"): a kernel
that communicates ends with the device-side end-of-call barrier, one whose peers read its inputs
also starts with the entry barrier, a plain kernel with scratch zeroes it at its end, and a plain
kernel without scratch is the launch alone (and may be captured in a command buffer). nvcc builds
each. What the barriers do on the GPU is tested by tests/gpu (two PEs) and tools/gpu_test.sh."""

from __future__ import annotations

import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_tilescale as ts
from jax_tilescale import language as T
from jax_tilescale.codegen import generate_cuda
from jax_tilescale.compiler import compile_cubin

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import allgather
import simple_shift

S = jax.ShapeDtypeStruct
F32 = jnp.float32


def _shift():
    return simple_shift.simple_shift(128, 64, np.dtype(np.float32)).trace(S((128, 64), F32), mesh_axes=("x",),
                                                                          num_pes=2)


def _pull():  # peers get from this PE's input: the handler stages it, so the kernel starts with the entry barrier
    k = allgather.allgather_pull(64, 64, 2, np.dtype(np.float32))
    return k.trace(S((64, 64), F32), mesh_axes=("x",), num_pes=2)


def _plain():
    @ts.kernel(out_shape=S((64, 64), F32), grid=(1,))
    def copy(x, y):
        T.copy(x, y)

    return copy.trace(S((64, 64), F32))


def _plain_with_scratch():  # per-launch global scratch (T.alloc level "global"), no NVSHMEM
    @ts.kernel(out_shape=S((2, 64), F32), grid=(2,))
    def two_blocks(x, y):
        rows = T.ds(T.program_id(0), 1)
        g = T.alloc((2, 64), F32, level="global")
        T.copy(x[rows, :], g[rows, :])
        T.copy(g[rows, :], y[rows, :])

    return two_blocks.trace(S((2, 64), F32))


def _plain_left_zero(also_plain: bool = False):  # a ticket counter the last block takes back to zero
    @ts.kernel(out_shape=S((4,), jnp.int32), grid=(4,))
    def tickets(x, y):
        count = T.alloc((1,), jnp.int32, level="global", left_zero=True)
        if also_plain:
            T.alloc((1,), jnp.int32, level="global")  # zero at the start only: the end of call clears it
        ticket = T.alloc_shared((2,), jnp.int32)
        T.atomic_fetch_add(count[0], 1, ticket[0])
        if ticket[0] == 3:
            T.atomic_fetch_add(count[0], -4, ticket[1])
        for j in T.Parallel(1):
            y[T.program_id(0) + j] = x[T.program_id(0) + j]

    return tickets.trace(S((4,), jnp.int32))


CASES = {"shift": _shift, "pull": _pull, "plain": _plain, "plain_scratch": _plain_with_scratch,
         "plain_left_zero": _plain_left_zero, "plain_mixed": lambda: _plain_left_zero(also_plain=True)}


@pytest.fixture(scope="module")
def modules():
    return {name: generate_cuda(make()) for name, make in CASES.items()}


def _body(source: str, entry: str) -> str:
    return source[source.index(f"{entry}(const TsLaunchArgs args"):]


def test_a_communicating_kernel_ends_with_the_end_of_call_barrier(modules) -> None:
    m = modules["shift"]
    body = _body(m.source, m.entry)
    assert body.count("ts_call_end(args, ") == 1 and "ts_call_start(" not in body
    assert "end of call: every block quiets" in body  # the source says which ending, and why
    # it is the last statement: only the kernel's closing brace (and a line directive) follows
    tail = body[body.index("ts_call_end(args, "):].splitlines()[1:]
    assert [line for line in tail if line.strip() and not line.startswith("#line")] == ["}"]
    assert not m.graph_safe


def test_peers_reading_an_input_add_the_entry_barrier_first_with_nvshmem_calls() -> None:
    m = generate_cuda(CASES["pull"](), p2p_peers=False)
    body = _body(m.source, m.entry)
    assert body.index("ts_call_start(args, ") < body.index("args.buffers[0]")  # before anything reads
    assert "entry barrier: peers read" in body and "ts_call_end(args, " in body


def test_a_call_free_pull_has_no_entry_barrier_but_publishes_first(modules) -> None:
    """Call-free, a peer reads this PE's input only after waiting for its publish of the launch."""
    m = modules["pull"]
    body = _body(m.source, m.entry)
    assert "ts_call_start(" not in body and "no entry barrier: peers read" in body
    assert body.index("ts_publish_params(args, ") < body.index("ts_peer_param_ptr(args, ")
    assert "ts_call_end(args, " in body


def test_a_plain_kernel_is_the_launch_alone_and_graph_safe(modules) -> None:
    m = modules["plain"]
    assert "ts_call_end(" not in _body(m.source, m.entry) and m.scratch_bytes == 0 and m.graph_safe


def test_a_plain_kernel_with_scratch_zeroes_it_at_the_end(modules) -> None:
    m = modules["plain_scratch"]
    assert m.scratch_bytes > 0 and not m.uses_nvshmem and not m.graph_safe
    assert f"ts_call_end(args, ts_seq, {m.scratch_bytes}u, " in _body(m.source, m.entry)


def test_a_plain_kernel_whose_scratch_is_left_zero_has_no_end_of_call(modules) -> None:
    m = modules["plain_left_zero"]
    body = _body(m.source, m.entry)
    assert m.scratch_bytes > 0 and "ts_call_end(" not in body
    assert "no end of call: the kernel leaves its scratch (count) zero itself (left_zero=True)" in body
    assert m.scratch_left_zero and m.graph_safe  # nothing per call: XLA may replay it from a command buffer
    mixed = modules["plain_mixed"]  # one buffer without the promise: the end of call zeroes the scratch
    assert f"ts_call_end(args, ts_seq, {mixed.scratch_bytes}u, " in _body(mixed.source, mixed.entry)
    assert not mixed.scratch_left_zero and not mixed.graph_safe


@pytest.mark.parametrize("name", list(CASES))
def test_nvcc_builds_it(modules, name: str) -> None:
    m = modules[name]
    cubin = compile_cubin(m.source, arch=m.arch, entry=m.entry, nvshmem=m.uses_nvshmem)
    assert cubin.read_bytes()[:4] == b"\x7fELF"
