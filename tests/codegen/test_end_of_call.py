"""Which communicating kernels end without the end-of-call meeting (codegen/end_of_call.py): those whose
every remote write is a once-per-block put with a signal, to a permutation of the PEs, into an output,
on a word of its own that the receiver awaits, and whose memory no peer reads. Every other kernel keeps
the meeting, and the generated comment names the reason. Whether the generated code is right is the
GPU's to show: tests/gpu/test_command_buffers_gpu.py's `push` kernel is one that ends without the
meeting, checked against numpy on one and two PEs, replayed and in loops."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

import jax_tilescale as ts
from jax_tilescale import language as T
from jax_tilescale.codegen import generate_cuda
from jax_tilescale.codegen.end_of_call import end_of_call

F32 = jnp.float32
ROWS, COLS, BM = 128, 64, 32
NB = ROWS // BM


def _kernel(variant: str, num_pes: int = 2):
    """A ring shift by signalled puts, or one of its variants that must keep the meeting."""

    @ts.kernel(out_shape=jax.ShapeDtypeStruct((ROWS, COLS), F32), grid=(NB,))
    def shift(src, dst):
        arrived = T.alloc_signal(NB)
        pid = T.program_id(0)
        rows = T.ds(pid * BM, BM)
        me, n = T.get_pe(), T.get_pe_num()
        pe = {"to_zero": 0, "by_block": (me + pid) % n}.get(variant, (me + 1) % n)
        word = 0 if variant == "shared_word" else pid
        value = {"zero_value": 0}.get(variant, 1)
        if variant == "no_signal":
            T.putmem_nbi_block(dst[rows, :], src[rows, :], pe=pe)
        elif variant == "in_branch":
            with T.If(pid > 0):
                T.putmem_signal_nbi_block(dst[rows, :], src[rows, :], sig=arrived[word], value=1,
                                          op=T.SignalOp.SET, pe=pe)
        else:
            T.putmem_signal_nbi_block(dst[rows, :], src[rows, :], sig=arrived[word], value=value,
                                      op=T.SignalOp.SET, pe=pe)
        if variant != "not_awaited":
            T.signal_wait_until(arrived[word], T.Cmp.EQ, 2 if variant == "other_value" else 1)
        if variant == "with_get":
            T.getmem_block(dst[rows, :], src[rows, :], pe=pe)

    return shift.trace(jax.ShapeDtypeStruct((ROWS, COLS), F32), mesh_axes=("x",), num_pes=num_pes)


def _ring_allgather(num_pes: int, wait_value: int = 1):
    """All-gather over a ring in a loop: at step k each PE forwards slab (pe - k) to the next PE with the
    signal word of that slab, then waits for the slab the previous PE sends it (word k + 1's)."""

    @ts.kernel(out_shape=jax.ShapeDtypeStruct((num_pes * BM, COLS), F32), grid=(1,))
    def ring(src, dst):
        got = T.alloc_signal(num_pes)
        me, n = T.get_pe(), T.get_pe_num()
        T.copy(src[:, :], dst[T.ds(me * BM, BM), :])
        for k in T.serial(n - 1):
            slab = T.ds(((me - k + n) % n) * BM, BM)
            T.putmem_signal_nbi_block(dst[slab, :], dst[slab, :], sig=got[(me - k + n) % n], value=1,
                                      op=T.SignalOp.SET, pe=(me + 1) % n)
            T.signal_wait_until(got[(me - k - 1 + n) % n], T.Cmp.EQ, wait_value)

    return ring.trace(jax.ShapeDtypeStruct((BM, COLS), F32), mesh_axes=("x",), num_pes=num_pes)


@pytest.mark.parametrize("num_pes", [2, 4])
@pytest.mark.parametrize("variant", ["ring", "by_block"])
def test_a_signalled_ring_shift_proves_completion_itself(num_pes, variant):
    """Each block to the next PE, or block b to PE + b: at every block the targets are a permutation."""
    kernel = _kernel(variant, num_pes)
    ending = end_of_call(kernel, call_free=True)
    assert not ending.meet, ending.why
    body = generate_cuda(kernel, "sm_90", p2p_peers=True).source.split("__global__", 1)[1]
    assert "// end of call without the meeting: every remote write into this PE is a put whose signal" in body
    assert body.count(", false);") == 1 and "ts_call_end(args, " in body


@pytest.mark.parametrize(("variant", "reason"), [
    ("no_signal", "has no signal"),
    ("in_branch", "communication inside a branch"),
    ("to_zero", "does not target each PE exactly once"),
    ("shared_word", "signal the same word"),
    ("zero_value", "not a static positive number"),
    ("not_awaited", "is not awaited"),
    ("other_value", "is not awaited"),
    ("with_get", "peers read this PE's memory"),
])
def test_anything_else_keeps_the_meeting_and_says_why(variant, reason):
    kernel = _kernel(variant)
    ending = end_of_call(kernel, call_free=True)
    assert ending.meet and reason in ending.why, ending.why
    body = generate_cuda(kernel, "sm_90", p2p_peers=True).source.split("__global__", 1)[1]
    assert "Not without the meeting: " in body and body.rstrip().rstrip("}").rstrip().endswith(", true);")


def test_nvshmem_calls_and_a_one_pe_space_keep_it():
    assert end_of_call(_kernel("ring"), call_free=False).meet
    assert end_of_call(_kernel("ring", num_pes=1), call_free=True).meet


def test_a_word_that_depends_on_the_pe_keeps_the_meeting():
    """The ring all-gather's words name slabs by PE: which word a receiver gets is not the same on every
    PE, which the proof does not follow (it keeps the meeting, and says so)."""
    ending = end_of_call(_ring_allgather(4), call_free=True)
    assert ending.meet and "depends on more than the block and the loops" in ending.why


def _stepped_ring(num_pes: int, wait_value: int = 1, put_scope: str = "block"):
    """A ring in a loop whose words name the step: at step k each PE sends its slab to PE + k + 1 with
    word k and waits for word k, which PE - k - 1 sets."""

    @ts.kernel(out_shape=jax.ShapeDtypeStruct((num_pes * BM, COLS), F32), grid=(2,))
    def stepped(src, dst):
        got = T.alloc_signal(2 * num_pes)
        me, n, b = T.get_pe(), T.get_pe_num(), T.program_id(0)
        half = T.ds(b * (BM // 2), BM // 2)
        for k in T.serial(n - 1):
            rows = T.ds(me * BM + b * (BM // 2), BM // 2)
            word = got[b * n + k]
            if put_scope == "block":
                T.putmem_signal_nbi_block(dst[rows, :], src[half, :], sig=word, value=1, op=T.SignalOp.SET,
                                          pe=(me + k + 1) % n)
            else:
                T.putmem_signal_nbi_warp(dst[rows, :], src[half, :], sig=word, value=1, op=T.SignalOp.SET,
                                         pe=(me + k + 1) % n)
            T.signal_wait_until(word, T.Cmp.GE, wait_value)

    return stepped.trace(jax.ShapeDtypeStruct((BM, COLS), F32), mesh_axes=("x",), num_pes=num_pes)


@pytest.mark.parametrize("num_pes", [2, 3, 4])
def test_a_ring_in_a_loop_with_a_word_per_step_and_block_proves_completion(num_pes):
    ending = end_of_call(_stepped_ring(num_pes), call_free=True)
    assert not ending.meet, ending.why


@pytest.mark.parametrize(("kwargs", "reason"), [
    (dict(wait_value=2), "is not awaited with its value"),
    (dict(put_scope="warp"), "is not block-wide"),
])
def test_a_ring_in_a_loop_that_does_not_await_its_words_keeps_the_meeting(kwargs, reason):
    ending = end_of_call(_stepped_ring(3, **kwargs), call_free=True)
    assert ending.meet and reason in ending.why, ending.why


def test_a_target_read_from_memory_keeps_the_meeting():
    """A PE read at run time (`T.load`) cannot be checked for a permutation here."""

    @ts.kernel(out_shape=jax.ShapeDtypeStruct((ROWS, COLS), F32), grid=(NB,))
    def hop(src, hops, dst):
        arrived = T.alloc_signal(NB)
        pid = T.program_id(0)
        rows = T.ds(pid * BM, BM)
        n = T.get_pe_num()
        T.putmem_signal_nbi_block(dst[rows, :], src[rows, :], sig=arrived[pid], value=1, op=T.SignalOp.SET,
                                  pe=(T.get_pe() + T.load(hops[0])) % n)
        T.signal_wait_until(arrived[pid], T.Cmp.EQ, 1)

    kernel = hop.trace(jax.ShapeDtypeStruct((ROWS, COLS), F32), jax.ShapeDtypeStruct((1,), jnp.int32),
                       mesh_axes=("x",), num_pes=2)
    ending = end_of_call(kernel, call_free=True)
    assert ending.meet and "targets a PE that depends on more than" in ending.why, ending.why
