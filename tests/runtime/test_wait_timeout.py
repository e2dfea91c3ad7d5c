"""Waits that give up (issue 5), without a GPU: the timeout setting and its path to the handler, the
message, and the watcher that turns a record (filled here as a kernel would) into a WaitTimeoutError in
the main thread. The generated waits: tests/codegen (source, nvcc); on GPUs: tests/gpu/test_faults_gpu.py."""

from __future__ import annotations

import re
import threading
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_tilescale as ts
from jax_tilescale import abi
from jax_tilescale import language as T
from jax_tilescale.errors import KernelTraceError, LaunchError, WaitTimeoutError
from jax_tilescale.runtime import wait_timeout as wt
from tests.conftest import needs_extension, needs_toolchain

FAULT = {
    "kernel": "ts_wait_for_peer", "launch_id": 7, "pe": 0, "npes": 2, "peer": -1, "cmp": 0, "bits": 64,
    "is_signed": False, "seen": 0, "expected": 1, "waited_ns": 2_000_123_456, "block": (0, 0, 0), "thread": 0,
    "op": "T.signal_wait_until", "where": "/home/me/job.py:42",
}


# ---- the setting ------------------------------------------------------------------------------------


def test_default_is_60_seconds_and_the_variable_overrides_it(monkeypatch):
    monkeypatch.delenv(wt.TIMEOUT_VAR, raising=False)
    assert wt.timeout_seconds() == 60.0 and wt.timeout_ns() == 60_000_000_000
    monkeypatch.setenv(wt.TIMEOUT_VAR, "2.5")
    assert wt.timeout_ns() == 2_500_000_000
    monkeypatch.setenv(wt.TIMEOUT_VAR, "0")
    assert wt.timeout_ns() == 0  # off
    assert wt.timeout_ns(3) == 3_000_000_000  # the kernel's own setting wins


@pytest.mark.parametrize("raw", ["soon", "-1", "inf", "nan"])
def test_a_bad_variable_is_a_launch_error_naming_it(monkeypatch, raw):
    monkeypatch.setenv(wt.TIMEOUT_VAR, raw)
    with pytest.raises(LaunchError, match=wt.TIMEOUT_VAR):
        wt.timeout_ns()


@pytest.mark.parametrize("bad", [-1, float("inf"), "2", True])
def test_a_bad_kernel_setting_is_a_trace_error(bad):
    with pytest.raises(KernelTraceError, match="wait_timeout_s must be a number of seconds >= 0"):
        ts.kernel(out_shape=jax.ShapeDtypeStruct((8,), jnp.float32), grid=(1,), wait_timeout_s=bad)(lambda a, b: None)


def test_the_kernel_setting_reaches_the_primitive():
    @ts.kernel(out_shape=jax.ShapeDtypeStruct((64, 8), jnp.float32), grid=(1,), wait_timeout_s=2)
    def timed(src, dst):
        T.copy(src[0:64, :], dst[0:64, :])

    assert timed.spec.wait_timeout_s == 2.0
    jaxpr = jax.make_jaxpr(timed)(np.zeros((64, 8), np.float32))
    (eqn,) = [e for e in jaxpr.eqns if e.primitive.name == "tilescale_call"]
    assert eqn.params["call"].wait_timeout_s == 2.0


@needs_extension
@needs_toolchain
def test_the_cuda_lowering_passes_the_timeout_to_the_handler(monkeypatch, tmp_path):
    monkeypatch.setenv("TILESCALE_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv(wt.TIMEOUT_VAR, "7")

    def make(**kw):
        @ts.kernel(out_shape=jax.ShapeDtypeStruct((64, 8), jnp.float32), grid=(1,), **kw)
        def lowered(src, dst):
            T.copy(src[0:64, :], dst[0:64, :])

        x = np.zeros((64, 8), np.float32)
        return jax.jit(lowered).trace(x).lower(lowering_platforms=("cuda",)).as_text()

    assert re.search(r"wait_timeout_ns = 7000000000 : i64", make())
    assert re.search(r"wait_timeout_ns = 1500000000 : i64", make(wait_timeout_s=1.5))
    assert re.search(r"wait_timeout_ns = 0 : i64", make(wait_timeout_s=0))
    assert re.search(rf"abi_version = {abi.ABI_VERSION} : i64", make())


# ---- the message ------------------------------------------------------------------------------------


def test_the_message_names_kernel_pe_statement_line_value_and_expectation():
    msg = wt.format_fault(FAULT)
    assert msg.startswith("kernel `wait_for_peer`, PE 0 of 2: T.signal_wait_until at /home/me/job.py:42 gave up")
    assert "after waiting 2.0 s: the word is 0, expected == 1" in msg
    assert "its own word" in msg and "TILESCALE_WAIT_TIMEOUT_S" in msg and "wait_timeout_s" in msg


def test_a_remote_barrier_wait_names_the_polled_pe_and_the_comparison():
    fault = dict(FAULT, peer=1, cmp=3, seen=1, expected=2, op="T.barrier_all (team barrier: every PE)")
    msg = wt.format_fault(fault)
    assert "T.barrier_all (team barrier: every PE) at" in msg and "the word is 1, expected >= 2" in msg
    assert "a word of PE 1" in msg


def test_a_failed_check_of_a_call_free_kernel_reads_as_one():
    """Call-free kernels (codegen/call_free.py) report failed checks through the same record, with cmp
    TS_FAULT_CHECK and "<line>\n<what>" in `where`; the watcher makes a KernelCheckError of it."""
    fault = dict(FAULT, kernel="ts_gemm_rs", cmp=abi.FAULT_CHECK, seen=5, expected=2, block=(3, 1, 0), thread=17,
                 op="kernel check", where="/home/me/rs.py:94\nputmem_signal_nbi_block: target PE outside [0, npes)")
    err = wt.make_error(fault)
    assert isinstance(err, ts.KernelCheckError) and not isinstance(err, WaitTimeoutError)
    assert str(err).startswith("kernel `gemm_rs`, PE 0 of 2: a check failed at /home/me/rs.py:94 (block (3, 1, 0), "
                               "thread 17): putmem_signal_nbi_block: target PE outside [0, npes) (value 5, limit 2)")
    assert "no longer usable" in str(err) and err.fault["seen"] == 5
    assert isinstance(wt.make_error(FAULT), WaitTimeoutError)  # the other codes stay waits


# ---- the record and the watcher ------------------------------------------------------------------------


@pytest.fixture
def ffi():
    from jax_tilescale import _ffi

    _ffi.take_wait_faults()  # nothing left over from another test
    return _ffi


def inject(ffi, launch_id, **kw):
    f = dict(FAULT, **kw)
    ffi.inject_wait_fault_for_test(f["kernel"], launch_id, f["pe"], f["npes"], f["peer"], f["cmp"], f["bits"],
                                   f["is_signed"], f["seen"], f["expected"], f["waited_ns"], f["op"], f["where"])


@needs_extension
def test_a_record_is_returned_once_then_acknowledged(ffi):
    inject(ffi, 11)
    (fault,) = ffi.take_wait_faults()
    assert fault["kernel"] == "ts_wait_for_peer" and fault["launch_id"] == 11 and fault["where"] == "/home/me/job.py:42"
    assert ffi.take_wait_faults() == []  # returned once
    assert ffi.wait_fault_acked_for_test() == 0  # the kernel still waits for the host ...
    ffi.ack_wait_faults()
    assert ffi.wait_fault_acked_for_test() == 11  # ... until the watcher has queued the exception


@needs_extension
def test_signed_words_are_sign_extended(ffi):
    inject(ffi, 12, bits=32, is_signed=True, seen=0xFFFFFFFF, expected=0xFFFFFFFE, cmp=1)
    (fault,) = ffi.take_wait_faults()
    assert (fault["seen"], fault["expected"]) == (-1, -2)
    assert "the word is -1, expected != -2" in wt.format_fault(fault)
    inject(ffi, 13, bits=64, is_signed=False, seen=2**64 - 1)
    assert ffi.take_wait_faults()[0]["seen"] == 2**64 - 1


def test_the_error_is_raised_in_the_main_thread_with_its_record():
    class Ext:
        acked = False

        def ack_wait_faults(self):
            self.acked = True

    ext = Ext()
    helper = threading.Timer(0.05, wt.handle, args=([FAULT], ext))
    with pytest.raises(WaitTimeoutError, match=r"kernel `wait_for_peer`, PE 0 of 2") as info:
        helper.start()
        for _ in range(1000):  # the main thread runs Python: the error arrives at its next instruction
            time.sleep(0.005)
    helper.join()
    assert isinstance(info.value, ts.WaitTimeoutError) and info.value.fault["launch_id"] == 7
    assert ext.acked and wt.last_error() is not None and "job.py:42" in str(wt.last_error())


@needs_extension
def test_the_watcher_raises_a_kernels_report_in_the_main_thread(ffi, capfd):
    wt.stop_watcher()
    assert wt.start_watcher(ffi, poll_s=0.01)
    try:
        with pytest.raises(WaitTimeoutError, match=r"T\.signal_wait_until at /home/me/job\.py:42"):
            inject(ffi, 21)
            for _ in range(1000):
                time.sleep(0.005)
        deadline = time.monotonic() + 2
        while ffi.wait_fault_acked_for_test() != 21 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert ffi.wait_fault_acked_for_test() == 21
    finally:
        wt.stop_watcher()
    assert "[jax_tilescale] WaitTimeoutError: kernel `wait_for_peer`" in capfd.readouterr().err


def test_generated_waits_check_the_clock_off_the_fast_path():
    from jax_tilescale.codegen import generate_cuda

    @ts.kernel(out_shape=jax.ShapeDtypeStruct((64, 8), jnp.float32), grid=(1,))
    def waits_once(src, dst):
        sig = T.alloc_signal()
        T.copy(src[0:64, :], dst[0:64, :])
        T.signal_wait_until(sig, T.Cmp.EQ, 1)

    ir = waits_once.trace(jax.ShapeDtypeStruct((64, 8), jnp.float32), mesh_axes=("x",), num_pes=2)
    source = generate_cuda(ir).source
    assert abi.header_text() in source  # TsLaunchArgs and TsWaitFault (tests/runtime/test_abi.py checks the rest)
    assert "ts_wait<TS_CMP_EQ, false, true, uint64_t>(ts_wait_ctx(args), ts_sig, ts_sig_value, -1, ts_where," in source
    # The header's slow loop: the clock every TS_WAIT_CHECK_EVERY polls, the record, the bounded ack wait.
    assert 'asm volatile("mov.u64 %0, %%globaltimer;"' in source and "n % TS_WAIT_CHECK_EVERY != 0" in source
    assert "f->launch_id = c.launch_id;" in source and "TS_WAIT_ACK_NS" in source
    assert "nvshmem_signal_wait_until" not in source.split("ts_wait_slow", 1)[1].split("extern \"C\"")[-1]
