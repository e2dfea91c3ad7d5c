"""Messages name buffers as the user's code does (issue 13): inputs and outputs by the kernel
function's parameters, allocations by the variable they are assigned to (or `name=`), in every kind
of message: verifier errors, interpreter races, deadlocks, timeouts and run-time errors, the GPU's
wait-timeout records, the IR text. The names are valid C identifiers, unique within a kernel."""

from __future__ import annotations

import re

import jax
import numpy as np
import pytest

import jax_tilescale as ts
from jax_tilescale import abi
from jax_tilescale import language as T
from jax_tilescale.codegen import generate_cuda
from jax_tilescale.errors import InterpreterTimeoutError, KernelTraceError
from jax_tilescale.runtime import wait_timeout as wt
from tests.interpret.harness import build, launch, random_inputs, session
from tests.primitives.util import mesh_of, random_rows, shard_run

F32 = np.float32
SDS = jax.ShapeDtypeStruct
M, N = 16, 8

# The internal names buffers had before: `in0`, `out1`, `sym`, `smem2`, `frag`, `signal[3]`, `reg`, `var`.
INTERNAL = re.compile(r"\b(in|out)\d+\b|\b(sym|smem|frag|reg|var)_?\d*\b|\bsignal_?\d*\[")


def assert_user_names(msg: str, *names: str) -> None:
    for name in names:
        assert name in msg, f"{name!r} not in: {msg}"
    found = INTERNAL.search(msg)
    assert found is None, f"internal name {found.group()!r} in: {msg}"


def trace(fn, *inputs, out=((M, N), F32), grid=(1,), num_pes=2):
    k = ts.kernel(fn, out_shape=SDS(*out), grid=grid)
    return k.trace(*(SDS(s, d) for s, d in inputs), mesh_axes=("x",), num_pes=num_pes)


def run_on(npes: int, kern, *inputs: np.ndarray) -> list[jax.Array]:
    """Runs `kern` on `npes` simulated devices and waits for it: an interpreter error is raised in the
    main thread before the results are ready (lowering/cpu.py), so inside the caller's pytest.raises."""
    return jax.block_until_ready(shard_run(kern, mesh_of((npes,)), *inputs))


# ---- each kind of message ------------------------------------------------------------------------


def test_verifier_errors_name_parameters_and_allocations():
    def get_into_input(tokens, gathered):
        T.getmem_block(tokens, gathered, pe=0)

    with pytest.raises(KernelTraceError) as info:
        trace(get_into_input, ((M, N), F32))
    assert_user_names(str(info.value), "the destination tokens is a input buffer")

    def get_from_shared(tokens, gathered):
        staging = T.alloc_shared((M, N), F32)
        T.getmem_block(gathered, staging, pe=0)

    with pytest.raises(KernelTraceError) as info:
        trace(get_from_shared, ((M, N), F32))
    assert_user_names(str(info.value), "the source staging is a shared buffer")

    def past_the_end(tokens, gathered):
        staging = T.alloc_shared((M, N), F32)
        T.copy(tokens[0:M, :], staging[0:M, :])
        T.copy(staging[M // 2:M + M // 2, :], gathered[0:M, :])

    with pytest.raises(KernelTraceError) as info:
        trace(past_the_end, ((M, N), F32))
    assert_user_names(str(info.value), "of staging")


def test_ir_text_names_parameters_and_allocations():
    def exchange(tokens, counts, gathered):
        staging = T.alloc_shared((M, N), F32)
        ready = T.alloc_signal(4)
        acc = T.alloc_fragment((M, N), F32)
        n_seen = T.alloc_var("int32", init=0)
        T.copy(tokens, staging)
        T.putmem_signal_nbi_block(gathered, staging, sig=ready[T.get_pe()], value=1, op=T.SignalOp.SET,
                                  pe=(T.get_pe() + 1) % T.get_pe_num())
        T.signal_wait_until(ready[(T.get_pe() + 1) % T.get_pe_num()], T.Cmp.EQ, 1)
        T.copy(gathered, acc)
        n_seen[0] = counts[0]

    text = ts.kernel(exchange, out_shape=SDS((M, N), F32), grid=(1,)).ir_text(
        SDS((M, N), F32), SDS((2,), np.int32), mesh_axes=("x",), num_pes=2)
    for line in ("param tokens: input float32[16, 8]", "param counts: input int32[2]",
                 "param gathered: output float32[16, 8]", "alloc staging: shared float32[16, 8]",
                 "alloc ready: signal uint64[4]", "alloc acc: fragment float32[16, 8]",
                 "putmem_signal_nbi_block(gathered[:, :] <- staging[:, :], pe=((pe + 1) % 2), sig ready[pe] SET 1)",
                 "signal_wait_until(ready[((pe + 1) % 2)] == 1)", "n_seen[:] = counts[0]"):
        assert line in text, text
    assert_user_names(text)


def test_a_race_names_the_output_parameter():
    @ts.kernel(out_shape=SDS((M, N), F32), grid=(2,))
    def overlapping(tokens, gathered):
        bx = T.program_id(0)
        T.copy(tokens[T.ds(bx * 4, 8), :], gathered[T.ds(bx * 4, 8), :])  # blocks 0 and 1 share rows 4..7

    with pytest.raises(ts.RaceError) as info:
        run_on(1, overlapping, random_rows(np.random.default_rng(1), 1, (M, N)))
    assert_user_names(str(info.value), "output buffer gathered", "elements gathered[4:8, 0:8]")


def test_a_race_names_the_shared_tile_its_variable_is_called():
    @ts.kernel(out_shape=SDS((M, N), F32), grid=(1,))
    def reuse(tokens, gathered):
        staging = T.alloc_shared((M, N), F32)
        T.copy(tokens, staging)
        T.putmem_nbi_block(gathered, staging, pe=(T.get_pe() + 1) % T.get_pe_num())
        T.fill(staging, -1.0)  # the put may still read it
        T.quiet()

    with pytest.raises(ts.RaceError) as info:
        run_on(2, reuse, random_rows(np.random.default_rng(2), 2, (M, N)))
    assert_user_names(str(info.value), "the shared tile staging of PE", "write of staging[0:16, 0:8]")


def test_a_deadlock_names_the_signal_array_and_index():
    @ts.kernel(out_shape=SDS((M, N), F32), grid=(1,))
    def lonely(tokens, gathered):
        ready = T.alloc_signal(4)
        T.copy(tokens, gathered)
        T.signal_wait_until(ready[3], T.Cmp.EQ, 1)  # nobody signals

    with pytest.raises(ts.DeadlockError) as info:
        run_on(2, lonely, random_rows(np.random.default_rng(3), 2, (M, N)))
    assert_user_names(str(info.value), "signal_wait_until(ready[3] == 1): ready[3] is 0")


def test_a_timeout_names_the_word_a_pe_waits_on():
    def slow_peer(tokens, gathered):
        ready = T.alloc_signal(4)
        scratch = T.alloc_shared((M, N), F32)
        T.copy(tokens, gathered)
        with T.If(T.get_pe() == 1):
            for _ in T.serial(10**9):  # PE 1 keeps computing: slow, not blocked
                T.fill(scratch, 1.0)
            T.signal_op(ready[3], 1, T.SignalOp.SET, pe=0)
        with T.If(T.get_pe() == 0):
            T.signal_wait_until(ready[3], T.Cmp.EQ, 1)

    kernel = build(slow_peer, inputs=[((M, N), F32)], outputs=[((M, N), F32)], grid=(1,), num_pes=2)
    res = launch(session(kernel, timeout_s=0.5), [[x] for x in random_inputs(np.random.default_rng(4), 2, (M, N))])
    assert all(isinstance(e, InterpreterTimeoutError) for e in res.errors), res.errors
    assert_user_names(str(res.errors[0]), "PE 0 block (0,) waits for signal_wait_until(ready[3] == 1): ready[3] is 0",
                      "running, at fill")


def test_run_time_errors_name_parameters():
    @ts.kernel(out_shape=SDS((M, N), F32), grid=(1,))
    def half(tokens, gathered):
        T.copy(tokens[0:M // 2, :], gathered[0:M // 2, :])  # the other half never written

    with pytest.raises(ts.KernelRuntimeError) as info:
        run_on(1, half, random_rows(np.random.default_rng(5), 1, (M, N)))
    assert_user_names(str(info.value), "output gathered (float32[16, 8]) of PE 0")

    @ts.kernel(out_shape=SDS((M, N), F32), grid=(1,))
    def bad_row(tokens, row_of_pe, gathered):
        T.copy(tokens, gathered)
        T.copy(tokens[T.ds(row_of_pe[(T.get_pe() * 3) % 5], 1), :], gathered[0:1, :])

    counts = np.zeros(4 * 2, np.int32)  # two rows per PE: [2] each
    with pytest.raises(ts.KernelRuntimeError) as info:
        run_on(4, bad_row, random_rows(np.random.default_rng(6), 4, (M, N)), counts)
    assert_user_names(str(info.value), "T.load row_of_pe[", "of row_of_pe (extent 2)")


def test_gpu_wait_records_name_the_word_polled():
    """What a wait that gives up on the GPU reports is compiled into the CUDA (TsWaitFault.op): the
    statement and the word, by the user's names."""
    def waits(tokens, gathered):
        ready = T.alloc_signal(4)
        flags = T.alloc_symmetric((4,), np.int32)
        T.copy(tokens, gathered)
        T.signal_wait_until(ready[3], T.Cmp.EQ, 1)
        T.wait_ge(flags[T.get_pe()], 1, pe=(T.get_pe() + 1) % T.get_pe_num())

    source = generate_cuda(trace(waits, ((M, N), F32))).source
    assert '"T.signal_wait_until on ready[3]"' in source and '"T.wait_ge on flags[pe]"' in source
    assert "p_ready = ts_scratch + " in source and "p_flags = ts_scratch + " in source
    fault = {"kernel": "ts_waits", "launch_id": 1, "pe": 0, "npes": 2, "peer": -1, "cmp": 0, "bits": 64,
             "is_signed": False, "seen": 0, "expected": 1, "waited_ns": 2_000_000_000, "block": (0, 0, 0),
             "thread": 0, "op": "T.signal_wait_until on ready[3]", "where": "job.py:7"}
    assert_user_names(wt.format_fault(fault), "T.signal_wait_until on ready[3] at job.py:7 gave up")

    long_name = "words_every_peer_sets_once_it_has_sent_its_rows"

    def long_word(tokens, gathered):
        words = T.alloc_signal(2, name=long_name)
        T.copy(tokens, gathered)
        T.signal_wait_until(words[1], T.Cmp.EQ, 1)

    ops = re.findall(r'ts_wait<[^;]*ts_where, "([^"]*)"\);', generate_cuda(trace(long_word, ((M, N), F32))).source)
    assert ops and all(len(op) < abi.DEFINES["TS_WAIT_OP_BYTES"] for op in ops)  # fits the record whole


# ---- where names come from -----------------------------------------------------------------------


def _names(ir) -> list[str]:
    return [b.name for b in (*ir.inputs, *ir.outputs, *ir.allocs)]


def _make_tile():
    return T.alloc_shared((M, N), F32)  # a helper: named by what its caller assigns the result to


def test_allocations_take_the_name_they_are_assigned_to_or_a_derived_one():
    class Holder:
        pass

    def k(tokens, gathered):
        staging = _make_tile()
        for _ in range(2):
            t = T.alloc_shared((M, N), F32)  # two allocations, one name: t, t_1
        scores: object = T.alloc_fragment((M, N), F32)
        a = b = T.alloc_symmetric((4,), F32)
        (w := T.alloc_symmetric((4,), F32))
        holder = Holder()
        holder.inbox = T.alloc_symmetric((4,), F32)
        a_sig, b_sig = T.alloc_signal(2), T.alloc_signal(2)  # found by the calls' source positions
        unnamed = [T.alloc_symmetric((2,), F32) for _ in range(2)]  # no name at the call: derived ones
        T.copy(T.alloc_shared((M, N), F32, name="given"), gathered)  # name= wins
        named_anyway = T.alloc_shared((M, N), F32, name="chosen")
        del staging, t, scores, a, b, w, a_sig, b_sig, unnamed, named_anyway

    ir = trace(k, ((M, N), F32))
    assert _names(ir) == ["tokens", "gathered", "staging", "t", "t_1", "scores", "a", "w", "inbox", "a_sig",
                          "b_sig", "sym", "sym_1", "given", "chosen"]


def test_a_kernel_the_decorator_recompiles_names_its_tuple_assignments_too():
    """An `if` on a kernel value makes @ts.kernel recompile the function from its dedented source:
    the calls' positions are then the file's less the indentation."""
    def make():
        @ts.kernel(out_shape=SDS((M, N), F32), grid=(1,))
        def k(tokens, gathered):
            send, recv = T.alloc_shared((M, N), F32), T.alloc_shared((M, N), F32)
            if T.get_pe() == 0:
                T.copy(tokens, send)
            T.copy(tokens, recv)
            T.copy(recv, gathered)

        return k

    ir = make().trace(SDS((M, N), F32), mesh_axes=("x",), num_pes=2)
    assert _names(ir) == ["tokens", "gathered", "send", "recv"]


def test_registers_take_their_names_too():
    def k(tokens, gathered):
        count = T.alloc_var("int32", init=0)
        slots = T.alloc_local((2,), "int32")
        slots[0] = count + 1
        count = slots[0] * 2  # a store into the register, not a new one
        T.copy(tokens, gathered)

    text = ts.kernel(k, out_shape=SDS((M, N), F32), grid=(1,)).ir_text(SDS((M, N), F32), mesh_axes=("x",),
                                                                        num_pes=1)
    assert "count[:] = 0" in text and "slots[0] = (count[0] + 1)" in text and "count[:] = (slots[0] * 2)" in text


def test_parameter_names_that_clash_are_made_unique_and_c_safe():
    """A parameter called `int` (a C keyword) and one called `signal` next to an unnamed signal
    array, an allocation named like a parameter, and a name the code generator reserves."""
    def k(int, signal, ts_where):
        T.copy(int, ts_where)
        T.signal_wait_until(T.alloc_signal(2)[1], T.Cmp.EQ, 0)
        signal = T.alloc_shared((M, N), F32)
        T.copy(int, signal)

    ir = trace(k, ((M, N), F32), ((M, N), F32))
    assert _names(ir) == ["int_", "signal", "ts_where_", "signal_1", "signal_2"]
    source = generate_cuda(ir).source
    for pointer in ("p_int_", "p_signal", "p_ts_where_", "p_signal_1", "p_signal_2"):
        assert re.search(rf"\b{pointer}\b", source), pointer


def test_star_args_kernels_number_their_refs():
    def k(*refs):
        T.copy(refs[0], refs[2])
        T.copy(refs[1], refs[3])

    ir = ts.kernel(k, out_shape=(SDS((M, N), F32), SDS((M, N), F32)), grid=(1,)).trace(
        SDS((M, N), F32), SDS((M, N), F32), mesh_axes=("x",), num_pes=1)
    assert _names(ir) == ["refs_0", "refs_1", "refs_2", "refs_3"]


def test_name_must_be_a_string():
    def k(tokens, gathered):
        T.alloc_shared((M, N), F32, name=3)

    with pytest.raises(KernelTraceError, match=r"T.alloc_shared: name must be a string, got 3") as info:
        trace(k, ((M, N), F32))
    assert "test_user_names.py" in str(info.value)


@pytest.mark.parametrize("raw,safe", [
    ("acc", "acc"), ("int", "int_"), ("float", "float_"), ("threadIdx", "threadIdx_"), ("ts_where", "ts_where_"),
    ("TsLaunchArgs", "TsLaunchArgs_"), ("nvshmem_ptr", "nvshmem_ptr_"), ("2nd", "_2nd"), ("my tile", "my_tile"),
    ("r\u00e9sum\u00e9", "ru00e9sumu00e9"), ("", "smem"), ("_", "smem"), ("Tscale", "Tscale"),
])
def test_names_are_valid_c_identifiers_clear_of_keywords_and_generated_ones(raw, safe):
    from jax_tilescale.language.naming import c_safe_name

    assert c_safe_name(raw, "smem") == safe


def test_unique_names_number_repeats():
    from jax_tilescale.language.naming import unique_name

    taken: set[str] = {"t", "t_1"}
    assert [unique_name("t", taken), unique_name("t", taken), unique_name("u", taken)] == ["t_2", "t_3", "u"]
