"""Bad input to a kernel (CPU, interpreter): a KernelTraceError naming the input and the user's line, and
correct kernels still run afterwards in the same process."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import jax_tilescale as ts
from jax_tilescale import language as T
from jax_tilescale.lowering import CallSpec, tilescale_call_p
from tests.conftest import load_example

allgather = load_example("allgather")

ROWS, COLS = 64, 8


def copy_kernel() -> ts.TileKernel:
    @ts.kernel(out_shape=jax.ShapeDtypeStruct((ROWS, COLS), jnp.float32), grid=(1,))
    def local_copy(src, dst):
        T.copy(src[0:ROWS, :], dst[0:ROWS, :])

    return local_copy


GOOD = np.arange(ROWS * COLS, dtype=np.float32).reshape(ROWS, COLS)


def runs_correctly(k: ts.TileKernel) -> None:
    np.testing.assert_array_equal(np.asarray(jax.jit(k)(GOOD)), GOOD)


@pytest.mark.parametrize("bad,match", [
    (np.ones((32, COLS), np.float32), r"slice \[0:64\] is out of bounds for dimension 0 of src \(extent 32\)"),
    (np.ones((ROWS, COLS), np.float16), r"dtypes differ: src is float16, dst is float32"),
    (np.ones((ROWS,), np.float32), r"too many indices for src"),
])
def test_input_that_does_not_fit_the_kernel(bad, match):
    k = copy_kernel()
    runs_correctly(k)  # traced for the right shape first: a new shape is a new trace, checked again
    with pytest.raises(ts.KernelTraceError, match=match) as info:
        jax.jit(k)(bad)
    assert "test_bad_input.py" in str(info.value)  # the user's line
    runs_correctly(k)


@pytest.mark.parametrize("args", [(GOOD, GOOD), ()])
def test_wrong_number_of_inputs(args):
    k = copy_kernel()
    with pytest.raises(ts.KernelTraceError, match=rf"called with {len(args)} input array\(s\), but its function "
                       r"local_copy\(src, dst\) takes 1 input ref\(s\) followed by 1 output ref\(s\)"):
        jax.jit(k)(*args)
    runs_correctly(k)


@pytest.mark.parametrize("out_shape,match", [
    ((ROWS, COLS), "out_shape entries must be jax.ShapeDtypeStruct, got 64"),
    (np.zeros((ROWS, COLS)).shape, "out_shape entries must be jax.ShapeDtypeStruct"),
    ((), "out_shape must name at least one output"),
])
def test_out_shape_must_be_shape_dtype_structs(out_shape, match):
    with pytest.raises(ts.KernelTraceError, match=match):
        ts.kernel(lambda a, b: None, out_shape=out_shape, grid=(1,))


def test_binding_with_arrays_unlike_the_traced_ones():
    """The primitive's abstract evaluation re-checks what reaches it (e.g. a kernel IR reused by hand)."""
    k = copy_kernel()
    ir = k.trace(jax.ShapeDtypeStruct((ROWS, COLS), jnp.float32))
    call = CallSpec(ir, (), None)
    pe_info = jnp.zeros((2,), jnp.int32)
    with pytest.raises(ts.KernelTraceError, match=r"input src was traced as float32\[64, 8\], got float32\[32, 8\]"):
        jax.jit(lambda x: tilescale_call_p.bind(pe_info, x, call=call))(jnp.ones((32, COLS), jnp.float32))
    with pytest.raises(ts.KernelTraceError, match="takes 1 inputs, got 2"):
        jax.jit(lambda x: tilescale_call_p.bind(pe_info, x, x, call=call))(GOOD)
    runs_correctly(k)


def test_errors_do_not_spoil_later_runs():
    """Every kind of kernel error in a row -- trace-time, verify-time and a run-time failure inside the
    interpreter on 4 simulated devices -- then the same jitted all-gather gives the same exact result."""
    mesh = jax.make_mesh((4,), ("x",), devices=jax.devices()[:4])
    x = jax.device_put(jnp.arange(4 * 64 * 16, dtype=jnp.float32).reshape(4 * 64, 16), NamedSharding(mesh, P("x")))
    gather = allgather.gather_fn(mesh, 64, 16, jnp.float32)
    before = np.asarray(gather(x))
    sdt = jax.ShapeDtypeStruct((64, 16), jnp.float32)

    def shard(k):
        return jax.jit(jax.shard_map(k, mesh=mesh, in_specs=P("x"), out_specs=P("x")))

    @ts.kernel(out_shape=sdt, grid=(1,))
    def static_pe_out_of_range(a, b):
        T.putmem_nbi_block(b, a, pe=T.get_pe() + 1)

    @ts.kernel(out_shape=sdt, grid=(1,))
    def dynamic_pe_out_of_range(a, b):
        T.putmem_nbi_block(b, a, pe=(T.get_pe() * 3) % 5)

    @ts.kernel(out_shape=sdt, grid=(1,))
    def waits_forever(a, b):
        sig = T.alloc_signal()
        T.signal_wait_until(sig, T.Cmp.EQ, 1)

    outside = ts.kernel(lambda a, b: None, out_shape=sdt, grid=(1,), mesh_axes="x")
    unknown_axis = ts.kernel(lambda a, b: None, out_shape=sdt, grid=(1,), mesh_axes="y")
    failures = [
        (lambda: jax.jit(copy_kernel())(np.ones((32, COLS), np.float32)), ts.KernelTraceError, "out of bounds"),
        (lambda: jax.jit(copy_kernel())(GOOD, GOOD), ts.KernelTraceError, "called with 2 input"),
        (lambda: shard(static_pe_out_of_range)(x), ts.KernelTraceError, "PE out of range"),
        (lambda: shard(unknown_axis)(x), ts.KernelTraceError, r"\['y'\] are not axes"),
        (lambda: jax.jit(outside)(x), ts.KernelTraceError, "outside jax.shard_map"),
        # run time, inside the interpreter's threads (JAX wraps the callback's error)
        (lambda: jax.block_until_ready(shard(dynamic_pe_out_of_range)(x)), Exception, "target PE 4"),
        (lambda: jax.block_until_ready(shard(waits_forever)(x)), Exception, "deadlock in kernel 'waits_forever'"),
    ]
    for fail, kind, match in failures:
        with pytest.raises(kind, match=match):
            fail()
    np.testing.assert_array_equal(np.asarray(gather(x)), before)
    np.testing.assert_array_equal(np.asarray(allgather.gather_fn(mesh, 64, 16, jnp.float32)(x)), before)
    runs_correctly(copy_kernel())
