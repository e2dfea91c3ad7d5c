"""The examples on real GPUs (NVSHMEM), compared element by element with jax.lax collectives
(evaluated on the host, so that two PEs sharing one GPU can run them too), and once alongside
XLA's own collectives on the devices."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import jax_tilescale as ts
from tests.conftest import load_example

shift = load_example("simple_shift")
allgather = load_example("allgather")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("m,n", [(64, 64), (512, 1024)])
def test_simple_shift(gpu_mesh, dtype, m, n):
    assert shift.check(gpu_mesh, m=m, n=n, dtype=dtype, seed=m + n)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("m,n,block_m", [(64, 64, 64), (1024, 512, 128)])
@pytest.mark.parametrize("pull", [False, True])
def test_allgather(gpu_mesh, dtype, m, n, block_m, pull):
    x = ts.testing.random_array(m + pull, (gpu_mesh.size * m, n), dtype)
    (want,) = ts.testing.lax_on_host(allgather.gather_reference, gpu_mesh, P("x"), P(None))(x)
    placed = ts.testing.place(x, gpu_mesh, P("x"))
    got = allgather.gather_fn(gpu_mesh, m, n, jnp.dtype(dtype), block_m, pull=pull)(placed)
    assert ts.testing.compare(got, want, "every element equal to jax.lax.all_gather")


@pytest.mark.own_gpu
def test_repeated_calls_and_xla_collective_alongside(gpu_mesh):
    """Many calls in one jitted program, interleaved with XLA's own psum: nothing stale, no hang."""
    m, n = 256, 256
    kern = allgather.allgather(m, n, gpu_mesh.size, jnp.float32, 64)

    def body(a):
        acc = jnp.zeros((gpu_mesh.size * m, n), jnp.float32)
        for i in range(4):
            acc = acc + kern(a + i) * (i + 1)
            a = a + jax.lax.psum(a[0, 0], "x")
        return acc

    def ref(a):
        acc = jnp.zeros((gpu_mesh.size * m, n), jnp.float32)
        for i in range(4):
            acc = acc + jax.lax.all_gather(a + i, "x", tiled=True) * (i + 1)
            a = a + jax.lax.psum(a[0, 0], "x")
        return acc

    f = jax.jit(jax.shard_map(body, mesh=gpu_mesh, in_specs=P("x"), out_specs=P(None)))
    # JAX types all_gather's result as varying over "x": the reference needs check_vma=False for out_specs=P(None).
    r = jax.jit(jax.shard_map(ref, mesh=gpu_mesh, in_specs=P("x"), out_specs=P(None), check_vma=False))
    x = jax.device_put(jax.random.normal(jax.random.key(7), (gpu_mesh.size * m, n), jnp.float32),
                       NamedSharding(gpu_mesh, P("x")))
    for _ in range(3):
        got, want = f(x), r(x)
        for g, w in zip(got.addressable_shards, want.addressable_shards):
            np.testing.assert_allclose(np.asarray(g.data), np.asarray(w.data), rtol=1e-6, atol=1e-5)
