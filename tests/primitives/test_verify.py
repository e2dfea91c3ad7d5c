"""Trace-time errors of issue 3's primitives: each names the op, the problem and the user's line."""

from __future__ import annotations

import numpy as np
import pytest

from jax_tilescale import KernelTraceError
from jax_tilescale import language as T
from jax_tilescale.ir import format_kernel, verify_kernel
from jax_tilescale.language.tracing import trace_kernel

F32 = np.dtype(np.float32)
M, N = 16, 8


def build(fn, inputs=(((M, N), F32), ((4,), np.int32)), outputs=(((M, N), F32),), num_pes=4, grid=(2,)):
    return verify_kernel(
        trace_kernel(fn, name="k", inputs=list(inputs), outputs=list(outputs), grid=grid, threads=128,
                     mesh_axes=("x",), num_pes=num_pes)
    )


def raises_here(fn, match, **kw) -> str:
    with pytest.raises(KernelTraceError, match=match) as info:
        build(fn, **kw)
    assert "test_verify.py:" in str(info.value), str(info.value)
    return str(info.value)


def test_destinations_and_sources_must_be_addressable():
    def get_from_shared(a, c, b):
        tile = T.alloc_shared((M, N), F32)
        T.getmem_block(b, tile, pe=0)

    def get_into_input(a, c, b):
        T.getmem_block(a, b, pe=0)

    def put_block_into_shared(a, c, b):
        tile = T.alloc_shared((M, N), F32)
        T.put_block(a, tile, dst_pe=1)

    def get_block_from_shared(a, c, b):
        tile = T.alloc_shared((M, N), F32)
        T.get_block(tile, b, src_pe=1)

    def broadcast_into_shared(a, c, b):
        tile = T.alloc_shared((M, N), F32)
        T.broadcast(tile, a, 0)

    raises_here(get_from_shared, "getmem_block: the source tile is a shared buffer")
    raises_here(get_into_input, "getmem_block: the destination a is a input buffer")
    raises_here(put_block_into_shared, "put_block: the destination tile is a shared buffer")
    raises_here(get_block_from_shared, "get_block: the source tile is a shared buffer")
    raises_here(broadcast_into_shared, "broadcast: the destination tile is a shared buffer")


def test_words_signals_and_waits():
    def wait_on_float(a, c, b):
        sym = T.alloc_symmetric((4,), np.float32)
        T.wait_eq(sym[0], 1)

    def wait_on_input(a, c, b):
        T.wait_ge(c[0], 1)

    def signal_op_on_data(a, c, b):
        sym = T.alloc_symmetric((4,), np.uint64)
        T.signal_op(sym[0], 1, T.SignalOp.ADD, 1)

    def wait_on_two_words(a, c, b):
        sym = T.alloc_symmetric((4,), np.int32)
        T.wait_eq(sym[0:2], 1)

    raises_here(wait_on_float, "wait_eq: the word must be a 32- or 64-bit integer")
    raises_here(wait_on_input, "wait_ge: the word c is a input buffer")
    raises_here(signal_op_on_data, "signal_op: the signal must be a word of T.alloc_signal")
    raises_here(wait_on_two_words, "waits for one word")


def test_pe_and_root_ranges_are_checked_where_affine():
    def bad_root(a, c, b):
        T.broadcast(b, a, T.get_pe() + 1)

    def bad_signal_pe(a, c, b):
        sig = T.alloc_signal(1)
        T.signal_op(sig[0], 1, T.SignalOp.SET, T.program_id(0) + 3)

    def bad_peer(a, c, b):
        T.put_block(a, b, dst_pe=-2)

    assert "can be 4" in raises_here(bad_root, "broadcast: Root out of range")
    assert "can be 4" in raises_here(bad_signal_pe, "signal_op: PE out of range")
    raises_here(bad_peer, "put_block: PE out of range")


def test_sizes_must_agree_or_be_whole_rows():
    def wrong_static(a, c, b):
        T.putmem_nbi_block(b, a, M * N * 2, 1)

    def wrong_elements(a, c, b):
        T.put_block(a, b, M * N - 1, 1)

    def dynamic_not_rows(a, c, b):
        T.putmem_nbi_block(b[0:2, :], a[0:2, :], c[0] * 4, 1)

    def fcollect_shape(a, c, b):
        T.fcollect(b, a[0:8, :])

    raises_here(wrong_static, r"size=256 bytes but the source slice a\[:, :\] holds 512 bytes")
    raises_here(wrong_elements, "size=127 elements but the source slice")
    raises_here(dynamic_not_rows, "with a run-time size the source says where the transfer starts: one whole row")
    raises_here(fcollect_shape, r"needs \[32, 8\]")


def test_loads_are_integer_inputs_in_bounds():
    def load_output(a, c, b):
        T.putmem_nbi_block(b, a, pe=b[0, 0])

    def load_float(a, c, b):
        T.putmem_nbi_block(b, a, pe=T.load(a[0, 0]))

    def load_out_of_bounds(a, c, b):
        T.putmem_nbi_block(b, a, pe=c[T.program_id(0) + 3])

    def load_slice(a, c, b):
        T.putmem_nbi_block(b, a, pe=T.load(c[0:2]))

    raises_here(load_output, "only kernel inputs can be read as values")
    raises_here(load_float, "T.load reads integers")
    raises_here(load_out_of_bounds, r"T.load c\[\(program_id\(0\) \+ 3\)\] is out of bounds: .* can be 4")
    raises_here(load_slice, "T.load reads one element")


def test_printer_shows_the_new_statements():
    def everything(a, c, b):
        sig = T.alloc_signal(2)
        sym = T.alloc_symmetric((M, N), F32)
        T.getmem_nbi_warp(sym, a, pe=1)
        T.put_warp(a, b, dst_pe=c[1])
        T.signal_op(sig[0], 3, T.SignalOp.SET, 2)
        T.wait_ne(sig[0], 0, pe=3)
        T.sync_all_block()
        T.fcollect_block(b, a[0:4, :])
        T.broadcast_warp(b, a, 2)

    text = format_kernel(build(everything))
    for line in [
        "alloc sig: signal uint64[2]",
        "alloc sym: symmetric float32[16, 8]",
        "getmem_nbi_warp(sym[:, :] <- a[:, :], pe=1)",
        "put_warp(b[:, :] <- a[:, :], dst_pe=c[1])",
        "signal_op(sig[0] SET 3, pe=2)",
        "wait_ne(sig[0] != 0, pe=3)",
        "sync_all_block()",
        "fcollect_block(b[:, :] <- a[0 +: 4, :] of every PE)",
        "broadcast_warp(b[:, :] <- a[:, :], root=2)",
    ]:
        assert line in text, text


def test_every_name_of_issue_3_is_in_the_language():
    names = """get_pe get_pe_num get_rank get_num_ranks axis_index axis_size pe_of Scale load ds
    putmem putmem_nbi putmem_warp putmem_nbi_warp putmem_block putmem_nbi_block
    putmem_signal putmem_signal_nbi putmem_signal_warp putmem_signal_nbi_warp putmem_signal_block
    putmem_signal_nbi_block getmem getmem_nbi getmem_warp getmem_nbi_warp getmem_block getmem_nbi_block
    put_block get_block put_warp get_warp signal_op signal_wait_until wait_eq wait_ne wait_ge wait_le wait_gt
    wait_lt fence quiet barrier_all barrier_all_block barrier_all_warp sync_all sync_all_block sync_all_warp
    broadcast broadcast_warp broadcast_block fcollect fcollect_warp fcollect_block alloc_symmetric alloc_signal
    SignalOp Cmp Scope""".split()
    missing = [n for n in names if n not in T.__all__ or not hasattr(T, n)]
    assert not missing
    for n in names:
        obj = getattr(T, n)
        assert callable(obj) and (obj.__doc__ or "").strip(), f"T.{n} needs a docstring"
        if callable(obj) and hasattr(obj, "__name__") and not isinstance(obj, type):
            assert obj.__name__ == n
