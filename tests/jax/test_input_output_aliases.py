"""`ts.kernel(input_output_aliases=)`: an output returned in an input's buffer (Pallas's meaning), on
the CPU interpreter: in-place updates equal their jnp reference on fresh random data, XLA is told of
the alias (lowered text, donation), elements the kernel leaves alone keep the input's values, peers
may put into and get from an aliased buffer (against jax.lax.ppermute), and bad maps are refused."""

from __future__ import annotations

import re
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import jax_tilescale as ts
from jax_tilescale import language as T
from jax_tilescale.errors import KernelRuntimeError, KernelTraceError
from tests.conftest import needs_extension, needs_toolchain
from tests.primitives.util import mesh_of

F32 = np.float32
M, N, BM = 64, 8, 16
SDS = jax.ShapeDtypeStruct


def add_one(m: int = M, n: int = N, bm: int = BM, aliases: dict | None = None) -> ts.TileKernel:
    """o = x + 1, one block per `bm` rows, the output returned in x's buffer."""
    @ts.kernel(out_shape=SDS((m, n), F32), grid=(m // bm,),
               input_output_aliases={0: 0} if aliases is None else aliases)
    def add_one_in_place(x, o):
        rows = T.ds(T.program_id(0) * bm, bm)
        tile = T.alloc_fragment((bm, n), F32)
        T.copy(x[rows, :], tile)
        for i, j in T.Parallel(bm, n):
            tile[i, j] = tile[i, j] + 1
        T.copy(tile, o[rows, :])

    return add_one_in_place




def rand(seed: int, shape=(M, N)) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal(shape).astype(F32)
    return np.where(np.abs(x) < 0.1, x + 0.5, x).astype(F32)  # no zeros: they could hide an unwritten element


# ---- one device ----------------------------------------------------------------------------------


def test_in_place_add_one_equals_x_plus_one_and_xla_is_told_of_the_alias() -> None:
    k = add_one()
    x = rand(0)
    np.testing.assert_array_equal(np.asarray(jax.jit(k)(x)), x + 1)
    text = jax.jit(k).lower(x).as_text()
    # operand 0 is pe_info, so the kernel's input 0 is the custom call's operand 1 (the callback has a
    # second, one-byte result: _jax_compat.emit_host_callback says why)
    assert re.search(r"python_cpu_callback.*output_operand_aliases = \[#stablehlo\.output_operand_alias<"
                     r"output_tuple_indices = \[0\], operand_index = 1, operand_tuple_indices = \[\]>\]", text), text


@needs_extension
@needs_toolchain
def test_the_cuda_lowering_tells_xla_of_the_alias(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("TILESCALE_CACHE_DIR", str(tmp_path))
    text = jax.jit(add_one()).trace(rand(10)).lower(lowering_platforms=("cuda",)).as_text()
    # ABI 4: the CUDA call's operands are the kernel's inputs alone (no pe_info), so input 0 is operand 0
    call = re.search(r"custom_call @jax_tilescale_launch\w*\((%[\w#]+)\)", text)
    assert call is not None and "," not in call.group(1), text
    assert re.search(r"custom_call @jax_tilescale_launch\w*\(.*output_operand_aliases = \[#stablehlo\."
                     r"output_operand_alias<output_tuple_indices = \[\], operand_index = 0, "
                     r"operand_tuple_indices = \[\]>\]", text), text
    # a plain kernel: nothing staged; the input's pointer is the output's param (one memory)
    assert re.search(r"staged = dense<0> : tensor<2xi64>", text), text


def test_the_ir_records_the_pair_and_prints_it() -> None:
    k = add_one()
    ir = k.trace(SDS((M, N), F32))
    assert ir.aliases == ((0, 0),)
    assert ir.alias_pairs() == ((ir.inputs[0], ir.outputs[0]),)
    assert "alias x -> o  (input 0's buffer is output 0's)" in k.ir_text(SDS((M, N), F32))


def test_a_kernel_that_writes_half_the_output_returns_the_other_half_unchanged() -> None:
    @ts.kernel(out_shape=SDS((M, N), F32), grid=(M // BM // 2,), input_output_aliases={0: 0})
    def double_top_half(x, o):
        rows = T.ds(T.program_id(0) * BM, BM)
        tile = T.alloc_fragment((BM, N), F32)
        T.copy(x[rows, :], tile)
        for i, j in T.Parallel(BM, N):
            tile[i, j] = tile[i, j] * 2
        T.copy(tile, o[rows, :])

    x = rand(1)
    got = np.asarray(jax.jit(double_top_half)(x))
    np.testing.assert_array_equal(got[: M // 2], x[: M // 2] * 2)
    np.testing.assert_array_equal(got[M // 2:], x[M // 2:])


def test_without_the_alias_the_half_written_output_is_refused() -> None:
    """The same kernel unaliased leaves half its output unwritten: the coverage check says so
    (what the alias exempts, above)."""
    @ts.kernel(out_shape=SDS((M, N), F32), grid=(M // BM // 2,))
    def half(x, o):
        rows = T.ds(T.program_id(0) * BM, BM)
        T.copy(x[rows, :], o[rows, :])

    with pytest.raises(KernelRuntimeError, match="never written"):
        np.asarray(jax.jit(half)(rand(2)))


def test_donation_under_jit_reuses_the_buffer() -> None:
    k = add_one()
    x_host = rand(3)
    x = jnp.asarray(x_host)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "Some donated buffers were not usable" if XLA did not alias
        got = jax.jit(k, donate_argnums=0)(x)
        got.block_until_ready()
    assert x.is_deleted()
    np.testing.assert_array_equal(np.asarray(got), x_host + 1)


def test_a_jitted_loop_of_the_in_place_kernel_equals_the_loop_of_x_plus_one() -> None:
    k = add_one()
    x = rand(4)
    got = jax.jit(lambda a: jax.lax.fori_loop(0, 3, lambda _, c: k(c), a))(x)
    want = jax.jit(lambda a: jax.lax.fori_loop(0, 3, lambda _, c: c + 1, a))(x)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_a_second_output_and_a_second_input_keep_their_places() -> None:
    """{1: 0}: output 0 in input 1's buffer; output 1 is a fresh buffer."""
    @ts.kernel(out_shape=(SDS((M, N), F32), SDS((M, N), F32)), grid=(M // BM,), input_output_aliases={1: 0})
    def acc(a, b, b_out, diff):
        rows = T.ds(T.program_id(0) * BM, BM)
        ta = T.alloc_fragment((BM, N), F32)
        tb = T.alloc_fragment((BM, N), F32)
        T.copy(a[rows, :], ta)
        T.copy(b[rows, :], tb)
        for i, j in T.Parallel(BM, N):
            tb[i, j] = tb[i, j] + ta[i, j]
        T.copy(tb, b_out[rows, :])
        for i, j in T.Parallel(BM, N):
            tb[i, j] = tb[i, j] - ta[i, j] * 3
        T.copy(tb, diff[rows, :])

    a, b = rand(5), rand(6)
    text = jax.jit(acc).lower(a, b).as_text()
    assert re.search(r"output_tuple_indices = \[0\], operand_index = 2,", text), text
    got_b, got_d = jax.jit(acc)(a, b)
    np.testing.assert_allclose(np.asarray(got_b), b + a, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(got_d), b + a - a * 3, rtol=1e-6, atol=1e-6)


# ---- peers and an aliased buffer -----------------------------------------------------------------


def _two_pes(kern, reference, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`kern` and its jax reference, each under shard_map over 2 devices (rows split)."""
    mesh = mesh_of((2,))
    placed = ts.testing.place(x, mesh, P("x"))
    outs = [np.asarray(jax.jit(jax.shard_map(f, mesh=mesh, in_specs=P("x"), out_specs=P("x")))(placed))
            for f in (kern, reference)]
    return outs[0], outs[1]


def test_a_peer_put_into_an_aliased_buffer_matches_ppermute() -> None:
    """Each PE puts the top half of its x into the next PE's bottom half of the aliased output; the
    top half, untouched, keeps x's values."""
    h = M // 2

    @ts.kernel(out_shape=SDS((M, N), F32), grid=(1,), input_output_aliases={0: 0})
    def shift_into_place(x, o):
        tile = T.alloc_shared((h, N), F32)
        T.copy(x[0:h, :], tile)
        T.putmem_block(o[h:M, :], tile, pe=(T.get_pe() + 1) % T.get_pe_num())


    def reference(a):
        return jnp.concatenate([a[:h], jax.lax.ppermute(a[:h], "x", [(0, 1), (1, 0)])])

    got, want = _two_pes(shift_into_place, reference, rand(7, (2 * M, N)))
    np.testing.assert_array_equal(got, want)


def test_a_get_from_a_peers_aliased_input_matches_ppermute() -> None:
    """Each PE gets the top half of the next PE's x (through the input ref) into its own bottom half."""
    h = M // 2

    @ts.kernel(out_shape=SDS((M, N), F32), grid=(1,), input_output_aliases={0: 0})
    def fetch_into_place(x, o):
        T.getmem_block(o[h:M, :], x[0:h, :], pe=(T.get_pe() + 1) % T.get_pe_num())


    def reference(a):
        return jnp.concatenate([a[:h], jax.lax.ppermute(a[:h], "x", [(1, 0), (0, 1)])])

    got, want = _two_pes(fetch_into_place, reference, rand(8, (2 * M, N)))
    np.testing.assert_array_equal(got, want)


# ---- bad maps ------------------------------------------------------------------------------------


def _kernel(aliases, out_shape=None):
    out = SDS((M, N), F32) if out_shape is None else out_shape
    return ts.kernel(out_shape=out, grid=(1,), input_output_aliases=aliases)(lambda x, o: None)


@pytest.mark.parametrize("aliases, message", [
    ({0: 1}, r"input_output_aliases \{0: 1\}: output index 1 is out of range \(the kernel has 1 output"),
    ({-1: 0}, r"input index -1 is negative"),
    ({0: 0, 1: 0}, r"names output 0 twice"),
    ({"0": 0}, r"must map input indices to output indices"),
    ([(0, 0)], r"must be a dict"),
])
def test_bad_maps_are_refused_when_the_kernel_is_made(aliases, message) -> None:
    with pytest.raises(KernelTraceError, match=message) as err:
        _kernel(aliases)
    assert "<lambda>" in str(err.value) or "kernel" in str(err.value)


def test_an_input_index_past_the_inputs_is_refused_at_the_call() -> None:
    k = _kernel({1: 0})
    with pytest.raises(KernelTraceError, match=r"input_output_aliases \{1: 0\}: input index 1 is out of range "
                                               r"\(the kernel was called with 1 input"):
        jax.jit(k).lower(rand(9))


@pytest.mark.parametrize("x_shape, x_dtype, message", [
    ((M, N + 1), F32, r"input 0 is float32\[64, 9\] but output 0 is float32\[64, 8\]"),
    ((M, N), np.int32, r"input 0 is int32\[64, 8\] but output 0 is float32\[64, 8\]"),
])
def test_a_pair_of_other_shape_or_dtype_is_refused(x_shape, x_dtype, message) -> None:
    k = _kernel({0: 0})
    with pytest.raises(KernelTraceError, match=message) as err:
        jax.jit(k).lower(np.zeros(x_shape, x_dtype))
    assert "kernel <lambda>" in str(err.value) and "{0: 0}" in str(err.value)


def test_a_write_through_the_aliased_input_ref_is_refused() -> None:
    """The pair is one memory, written through the output ref; the input ref stays read-only."""
    @ts.kernel(out_shape=SDS((M, N), F32), grid=(1,), input_output_aliases={0: 0})
    def writes_input(x, o):
        t = T.alloc_fragment((M, N), F32)
        T.copy(x, t)
        T.copy(t, x)

    with pytest.raises(KernelTraceError, match="x is a kernel input, which is read-only"):
        jax.jit(writes_input).lower(rand(11))
