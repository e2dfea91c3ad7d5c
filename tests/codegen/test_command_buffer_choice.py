"""Which launches may be recorded into XLA's command buffers (lowering/cuda.py, command_buffer_ok;
docs/calling_convention.md, "Communicating launches in command buffers"), and that a communicating
kernel's generated code takes its launch number and scratch from the launch-control words (a replayed
launch must be a new one). The replays themselves run on the GPU: tests/gpu/test_command_buffers_gpu.py."""

from __future__ import annotations

import jax
import pytest

import jax_tilescale as ts
from jax_tilescale import language as T
from jax_tilescale.codegen import generate_cuda
from jax_tilescale.lowering.cuda import COMMAND_BUFFERS_VAR, command_buffer_ok
from jax_tilescale.runtime import peer_memory
from tests.primitives.util import F32

ROWS, COLS = 64, 32


@ts.kernel(out_shape=jax.ShapeDtypeStruct((ROWS, COLS), F32), grid=(2,))
def shift(src, dst):
    arrived = T.alloc_signal(2)
    rows = T.ds(T.program_id(0) * 32, 32)
    T.putmem_signal_nbi_block(dst[rows, :], src[rows, :], sig=arrived[T.program_id(0)], value=1,
                              op=T.SignalOp.SET, pe=(T.get_pe() + 1) % T.get_pe_num())
    T.signal_wait_until(arrived[T.program_id(0)], T.Cmp.EQ, 1)


@ts.kernel(out_shape=jax.ShapeDtypeStruct((ROWS, COLS), F32), grid=(1,))
def copy(src, dst):
    T.copy(src, dst)


def _module(kern, pes: int = 2, p2p_peers: bool = True):
    ir = kern.trace(jax.ShapeDtypeStruct((ROWS, COLS), F32), mesh_axes=("x",), num_pes=pes)
    return generate_cuda(ir, "sm_90", p2p_peers=p2p_peers)


@pytest.fixture
def zero_copy(monkeypatch):
    monkeypatch.setattr(peer_memory, "_status", peer_memory.PeerMemoryStatus(True))


def test_a_plain_kernel_without_scratch_is_recorded():
    assert command_buffer_ok(_module(copy), 1) == (True, "")


def test_a_call_free_kernel_is_recorded_when_its_buffers_go_over_zero_copy(zero_copy):
    assert command_buffer_ok(_module(shift), 2) == (True, "")


def test_without_zero_copy_only_a_one_pe_space_is_recorded():
    ok, why = command_buffer_ok(_module(shift), 2)
    assert not ok and "zero-copy is off" in why and "stages" in why
    assert command_buffer_ok(_module(shift, pes=1), 1) == (True, "")


def test_nvshmem_calls_and_the_variable_keep_a_kernel_out(zero_copy, monkeypatch):
    ok, why = command_buffer_ok(_module(shift, p2p_peers=False), 2)
    assert not ok and "NVSHMEM's calls" in why
    monkeypatch.setenv(COMMAND_BUFFERS_VAR, "0")
    assert command_buffer_ok(_module(shift), 2) == (False, f"${COMMAND_BUFFERS_VAR}=0")


def test_the_launch_number_and_scratch_come_from_the_control_words():
    src = _module(shift).source
    body = src[src.index("const TsLaunchArgs args)"):]
    # read once, before anything else, and the scratch picked by it
    assert body.index("const uint64_t ts_seq = ts_launch_seq(args);") < body.index("ts_launch_scratch(args, ts_seq)")
    assert "args.scratch" not in body and body.count("ts_launch_seq(") == 1
    header = src[:src.index("const TsLaunchArgs args)")]
    assert "ld.relaxed.gpu.global.u64 %0, [%1];\" : \"=l\"(ended) : \"l\"(args.ctl + TS_CTL_ENDED)" in header
    assert "args.seq" not in src  # no launch number from the host left anywhere
