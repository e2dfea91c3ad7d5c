"""Trace-time and verifier errors of `T.load` of memory that changes while the kernel runs
(symmetric scratch, outputs, signal words): what is statically wrong is refused at the user's line,
what is right is accepted and printed."""

from __future__ import annotations

import numpy as np
import pytest

from jax_tilescale import KernelTraceError
from jax_tilescale import language as T
from jax_tilescale.ir import format_kernel, verify_kernel
from jax_tilescale.ir.expr import Const, Load
from jax_tilescale.language.tracing import trace_kernel

F32, I32 = np.dtype(np.float32), np.dtype(np.int32)
M, N = 16, 8


def build(fn, outputs=(((M, N), F32), ((4,), I32))):
    return verify_kernel(
        trace_kernel(fn, name="k", inputs=[((M, N), F32), ((4,), I32)], outputs=list(outputs), grid=(2,),
                     threads=128, mesh_axes=("x",), num_pes=4)
    )


def raises_here(fn, match) -> str:
    with pytest.raises(KernelTraceError, match=match) as info:
        build(fn)
    assert "test_load_checks.py:" in str(info.value), str(info.value)
    return str(info.value)


def test_loads_of_symmetric_outputs_and_signals_are_accepted_and_printed():
    def loads_everywhere(a, c, b, n):
        sym = T.alloc_symmetric((4,), np.int64)
        sig = T.alloc_signal(2)
        T.signal_wait_until(sig[0], T.Cmp.GE, T.load(sym[1]))  # a wait value
        rows = T.load(sym[0])
        T.putmem_nbi_block(b[T.load(n[1]), :], a[0, :], rows * N * 4, pe=T.load(sig[1]) % 4)  # size, offset, PE

    kernel = build(loads_everywhere)
    text = format_kernel(kernel)
    assert "sym" in text and "signal" in text


def test_tiles_fragments_and_registers_cannot_be_loaded():
    def load_shared(a, c, b, n):
        tile = T.alloc_shared((4,), I32)
        T.putmem_nbi_block(b, a, pe=T.load(tile[0]))

    def load_fragment(a, c, b, n):
        frag = T.alloc_fragment((4,), I32)
        T.putmem_nbi_block(b, a, pe=T.load(frag[1]))

    raises_here(load_shared, r"T.load reads global memory .* is a shared buffer, on chip")
    raises_here(load_fragment, r"T.load reads global memory .* is a fragment buffer, on chip")


def test_non_integer_and_multi_element_loads_are_refused():
    def float_size(a, c, b, n):
        sym = T.alloc_symmetric((4,), np.float32)
        T.putmem_nbi_block(b[0, :], a[0, :], T.load(sym[0]), pe=1)

    def two_words(a, c, b, n):
        sym = T.alloc_symmetric((4,), np.int32)
        T.putmem_nbi_block(b, a, pe=T.load(sym[0:2]))

    raises_here(float_size, "T.load reads integers up to 32 bits and int64 .* is float32")
    raises_here(two_words, "T.load reads one element")


def test_changing_memory_needs_an_explicit_load():
    """`sym[0]` used as an index value without T.load: refused, saying where the load belongs."""

    def implicit(a, c, b, n):
        sym = T.alloc_symmetric((4,), np.int32)
        T.putmem_nbi_block(b, a, pe=sym[0])

    msg = raises_here(implicit, "only kernel inputs can be read as values without T.load")
    assert "write T.load(" in msg and "after the wait that delivered it" in msg


def test_verifier_refuses_a_load_of_a_tile_built_by_hand():
    """The verifier holds the rule too (IR not made by T.load): a Load of a shared tile."""

    def by_hand(a, c, b, n):
        tile = T.alloc_shared((4,), I32)
        T.putmem_nbi_block(b, a, pe=Load(tile.buffer, (Const(0),)))

    msg = raises_here(by_hand, r"putmem_nbi_block: T.load reads global memory")
    assert "shared buffer" in msg
