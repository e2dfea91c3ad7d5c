"""Kernel outputs are typed as varying over the kernel's mesh axes (shard_map's check_vma, issue 13
item 2): `out_specs=P()` on a per-device result is refused as JAX refuses it for any per-device
value, and correct specs work with the default check_vma=True."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import jax_tilescale as ts
from jax_tilescale import language as T
from jax_tilescale._jax_compat import varying_axes

ROWS, COLS = 8, 4


def mesh_of(shape: tuple[int, ...], names: tuple[str, ...]) -> jax.sharding.Mesh:
    return jax.make_mesh(shape, names, devices=jax.devices()[: int(np.prod(shape))])


def shift_kernel(axes: tuple[str, ...] | None = None) -> ts.TileKernel:
    @ts.kernel(out_shape=jax.ShapeDtypeStruct((ROWS, COLS), jnp.float32), grid=(1,), mesh_axes=axes)
    def shift(a, b):
        T.putmem_block(b, a, pe=(T.get_pe() + 1) % T.get_pe_num())

    return shift


def data(mesh: jax.sharding.Mesh, spec: P, seed: int = 0) -> tuple[np.ndarray, jax.Array]:
    x = np.random.default_rng(seed).standard_normal((ROWS * mesh.size, COLS)).astype(np.float32) + 2.0
    return x, jax.device_put(x, NamedSharding(mesh, spec))


def refusal(f, *args) -> str:
    with pytest.raises(ValueError) as info:
        f(*args)
    return str(info.value)


def test_replicated_out_spec_of_a_per_device_result_is_refused_like_plain_jax() -> None:
    mesh = mesh_of((4,), ("x",))
    _, x = data(mesh, P("x"))
    plain = refusal(jax.jit(jax.shard_map(lambda a: a * 2, mesh=mesh, in_specs=P("x"), out_specs=P())), x)
    ours = refusal(jax.jit(jax.shard_map(shift_kernel(), mesh=mesh, in_specs=P("x"), out_specs=P())), x)
    assert "the corresponding output value is replicated across mesh axis 'x'" in ours
    assert ours.replace("'shift'", "'<lambda>'") == plain  # the very refusal plain JAX gives


def test_correct_specs_run_with_check_vma() -> None:
    mesh = mesh_of((4,), ("x",))
    x, placed = data(mesh, P("x"), seed=1)
    out = jax.jit(jax.shard_map(shift_kernel(), mesh=mesh, in_specs=P("x"), out_specs=P("x")))(placed)
    np.testing.assert_array_equal(np.asarray(out), np.roll(x, ROWS, axis=0))
    assert jax.typeof(out).sharding.spec == P("x", None)


def test_outputs_vary_over_kernel_axes_and_the_inputs_axes() -> None:
    """A kernel over "y" on a (2, 4) mesh: its output varies over "y" (the kernel) and over "x" when
    the input does; an input replicated over "x" gives an output replicated over "x"."""
    mesh = mesh_of((2, 4), ("x", "y"))
    kern = shift_kernel(("y",))
    types = {}

    def body(a):
        out = kern(a)
        types["in"], types["out"] = jax.typeof(a), jax.typeof(out)
        return out

    x, placed = data(mesh, P(("x", "y")), seed=2)
    out = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P(("x", "y")), out_specs=P(("x", "y"))))(placed)
    assert varying_axes(types["out"]) == {"x", "y"}
    want = np.concatenate([np.roll(half, ROWS, axis=0) for half in np.split(x, 2)])
    np.testing.assert_array_equal(np.asarray(out), want)

    # Replicated over "x": the kernel's result is too, so out_specs=P("y") is accepted (and "x" refused as varying).
    y_only = np.random.default_rng(3).standard_normal((ROWS * 4, COLS)).astype(np.float32) + 2.0
    placed = jax.device_put(y_only, NamedSharding(mesh, P("y")))
    out = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("y"), out_specs=P("y")))(placed)
    assert varying_axes(types["out"]) == {"y"}
    np.testing.assert_array_equal(np.asarray(out), np.roll(y_only, ROWS, axis=0))
    assert "out_specs" in refusal(jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("y"), out_specs=P())), placed)


def test_check_vma_false_still_works() -> None:
    mesh = mesh_of((4,), ("x",))
    x, placed = data(mesh, P("x"), seed=4)
    f = jax.jit(jax.shard_map(shift_kernel(), mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False))
    np.testing.assert_array_equal(np.asarray(f(placed)), np.roll(x, ROWS, axis=0))


def gather_kernel(replicated, poison_pe: int | None = None) -> ts.TileKernel:
    """A ring all-gather: every PE ends with every shard, so its output is the same on every PE
    (unless `poison_pe` writes one element of its own differently)."""

    @ts.kernel(out_shape=jax.ShapeDtypeStruct((ROWS * 4, COLS), jnp.float32), grid=(4,), replicated=replicated)
    def gather(a, out):
        src = T.program_id(0)
        T.putmem_block(out[T.ds(T.get_pe() * ROWS, ROWS), :], a, pe=src)
        if poison_pe is not None:
            T.barrier_all()
            if T.get_pe() == poison_pe:
                if src == 0:
                    out[0, 0] = -1.0

    return gather


def test_replicated_outputs_take_a_replicated_out_spec_with_check_vma() -> None:
    mesh = mesh_of((4,), ("x",))
    x, placed = data(mesh, P("x"), seed=4)
    f = jax.jit(jax.shard_map(gather_kernel(True), mesh=mesh, in_specs=P("x"), out_specs=P()))
    np.testing.assert_array_equal(np.asarray(f(placed)), x)
    # jax.lax.all_gather's own result is typed varying in JAX 0.10, hence check_vma=False for the reference only.
    xla = jax.jit(jax.shard_map(lambda a: jax.lax.all_gather(a, "x", tiled=True), mesh=mesh, in_specs=P("x"),
                                out_specs=P(), check_vma=False))
    np.testing.assert_array_equal(np.asarray(f(placed)), np.asarray(xla(placed)))
    # Not declared replicated: the same kernel's output is per device, and P() is refused.
    assert "replicated across mesh axis 'x'" in refusal(
        jax.jit(jax.shard_map(gather_kernel(False), mesh=mesh, in_specs=P("x"), out_specs=P())), placed)


def test_a_broken_replication_promise_is_reported_by_the_interpreter() -> None:
    mesh = mesh_of((4,), ("x",))
    _, placed = data(mesh, P("x"), seed=5)
    f = jax.jit(jax.shard_map(gather_kernel([0], poison_pe=2), mesh=mesh, in_specs=P("x"), out_specs=P()))
    with pytest.raises(ts.KernelRuntimeError, match=r"declared replicated .* PE 2 and PE 0 hold different values "
                       r"at 1 of its 128 elements, first at index \(0, 0\)"):
        jax.block_until_ready(f(placed))


@pytest.mark.parametrize("bad", [[1], [-1], ["0"], [True]])
def test_replicated_names_existing_outputs(bad) -> None:
    with pytest.raises(ts.KernelTraceError, match=r"replicated must be True, False or output indices in 0\.\.0"):
        gather_kernel(bad)
