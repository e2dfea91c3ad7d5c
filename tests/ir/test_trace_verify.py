"""Tracing and verification: correct kernels give the expected IR, broken ones a clear error."""

from __future__ import annotations

import numpy as np
import pytest

from jax_tilescale import KernelTraceError
from jax_tilescale import language as T
from jax_tilescale.ir import format_kernel, verify_kernel
from jax_tilescale.ir.evaluate import evaluate
from jax_tilescale.ir.expr import Const, Var, VarKind, affine_form, static_value
from jax_tilescale.ir.nodes import Copy, Put
from jax_tilescale.ir.ranges import value_range
from jax_tilescale.language.tracing import trace_kernel

F16 = np.dtype(np.float16)


def build(fn, inputs=(((256, 64), F16),), outputs=(((1024, 64), F16),), grid=(4, 4), threads=128, num_pes=4):
    return verify_kernel(
        trace_kernel(fn, name="k", inputs=list(inputs), outputs=list(outputs), grid=grid, threads=threads,
                     mesh_axes=("x",), num_pes=num_pes)
    )


def raises_here(fn, match, **kw):
    with pytest.raises(KernelTraceError, match=match) as info:
        build(fn, **kw)
    assert "test_trace_verify.py:" in str(info.value), str(info.value)
    return str(info.value)


def allgather_body(a, b):
    bx, by = T.program_id(0), T.program_id(1)
    me, n = T.get_pe(), T.get_pe_num()
    tile = T.alloc_shared((64, 64), F16)
    T.copy(a[bx * 64:(bx + 1) * 64, :], tile)
    T.putmem_nbi_block(b[T.ds(me * 256 + bx * 64, 64), :], tile, pe=(me + by) % n)


def test_allgather_traces_to_expected_ir():
    ir = build(allgather_body)
    assert [type(s) for s in ir.body] == [Copy, Put]
    put = ir.body[1]
    assert put.dst.sizes == (64, 64) and put.src.buffer.name == "tile"
    assert put.op_name == "putmem_nbi_block"
    env = {Var(VarKind.PE): 3, Var(VarKind.PROGRAM_ID, 0): 2, Var(VarKind.PROGRAM_ID, 1): 2}
    assert evaluate(put.pe, env) == (3 + 2) % 4
    assert evaluate(put.dst.starts[0], env) == 3 * 256 + 2 * 64
    text = format_kernel(ir, with_locs=True)
    assert "putmem_nbi_block(b[" in text and "test_trace_verify.py" in text
    assert hash(ir) == hash(build(allgather_body))  # stable: usable as a cache key


def test_expression_analyses():
    pe = Var(VarKind.PE)
    e = (pe * 4 + 3) - pe * 2
    assert affine_form(e) == ({pe: 2}, 3)
    assert value_range(e, {pe: (0, 3)}) == (3, 9)
    assert static_value(Const(5) * 3 + 1) == 16
    assert value_range((pe + 1) % 4, {pe: (0, 3)}) is None  # not affine: not claimed
    assert evaluate(Const(-7) // 2 + pe % 3, {pe: -1}) == -4 + 2  # Python floor semantics


def test_static_out_of_bounds_slice():
    def k(a, b):
        bx = T.program_id(0)
        T.copy(a[T.ds(bx * 64 + 8, 64), :], b[T.ds(bx * 64, 64), :])

    msg = raises_here(k, "out of bounds|leaves")
    assert "the slice of a along dimension 0" in msg


def test_pe_out_of_range_names_pe_and_op():
    def k(a, b):
        T.putmem_nbi_block(b[0:256, :], a, pe=T.get_pe() + 1)

    msg = raises_here(k, "PE out of range")
    assert "putmem_nbi_block" in msg and "can be 4" in msg and "4 PEs" in msg


def test_shape_and_dtype_mismatch():
    def shape_bad(a, b):
        T.copy(a[0:64, :], b[0:32, :])

    raises_here(shape_bad, "shapes differ")

    def dtype_bad(a, b):
        t = T.alloc_shared((64, 64), np.float32)
        T.copy(a[0:64, :], t)

    raises_here(dtype_bad, "dtypes differ")


def test_write_to_input_and_put_to_shared():
    def into_input(a, b):
        T.copy(b[0:256, :], a)

    raises_here(into_input, "read-only")

    def into_shared(a, b):
        t = T.alloc_shared((64, 64), F16)
        T.putmem_nbi_block(t, a[0:64, :], pe=0)

    raises_here(into_shared, "peers cannot address")


def test_signal_rules():
    def not_a_signal(a, b):
        T.putmem_signal_nbi_block(b[0:256, :], a, sig=b[0:1, 0:1], value=1, op=T.SignalOp.SET, pe=0)

    raises_here(not_a_signal, "alloc_signal")

    def two_words(a, b):
        s = T.alloc_signal(2)
        T.signal_wait_until(s, T.Cmp.EQ, 1)

    raises_here(two_words, "one word")

    def magic_number_op(a, b):
        s = T.alloc_signal(1)
        T.putmem_signal_nbi_block(b[0:256, :], a, sig=s[0], value=1, op=0, pe=0)

    raises_here(magic_number_op, "SignalOp")

    def magic_number_cmp(a, b):
        s = T.alloc_signal(1)
        T.signal_wait_until(s[0], 0, 1)

    raises_here(magic_number_cmp, "T.Cmp")


def test_size_argument_must_agree():
    def ok(a, b):
        T.putmem_nbi_block(b[0:256, :], a, 256 * 64 * 2, T.get_pe())

    build(ok)

    def bad(a, b):
        T.putmem_nbi_block(b[0:256, :], a, 1000, T.get_pe())

    raises_here(bad, "size=1000 bytes")


def test_dynamic_slice_size_and_grid_axis_and_threads():
    def dyn(a, b):
        bx = T.program_id(0)
        T.copy(a[bx:bx * 2, :], b[0:1, :])

    raises_here(dyn, "static sizes")

    def axis(a, b):
        T.program_id(2)

    raises_here(axis, "grid")

    def fine(a, b):
        pass

    with pytest.raises(KernelTraceError, match="threads"):
        build(fine, threads=100)


def test_language_outside_kernel_and_return_value():
    with pytest.raises(KernelTraceError, match="inside a function decorated"):
        T.get_pe()

    def returns(a, b):
        return 1

    with pytest.raises(KernelTraceError, match="must return None"):
        build(returns)


def test_python_if_on_runtime_value_is_refused():
    def k(a, b):
        if T.get_pe():
            pass

    with pytest.raises(TypeError, match="run time"):
        build(k)
