"""Running a kernel on simulated CPU devices through jax.jit(jax.shard_map(...)), as users do."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jax
import numpy as np
from jax.sharding import PartitionSpec as P

import jax_tilescale as ts

F32 = np.float32


def mesh_of(shape: tuple[int, ...], names: tuple[str, ...] = ("x",)) -> jax.sharding.Mesh:
    n = int(np.prod(shape))
    return jax.make_mesh(shape, names, devices=jax.devices()[:n])


def shard_run(
    kern: Callable[..., object],
    mesh: jax.sharding.Mesh,
    *inputs: np.ndarray,
    spec: P | None = None,
) -> list[jax.Array]:
    """Runs `kern` under shard_map with every input and output split along all mesh axes (one
    block of rows per device); returns the outputs, global arrays [devices * rows, ...]. Every
    process passes the same global inputs (the GPU suite runs one process per GPU)."""
    spec = P(tuple(mesh.axis_names)) if spec is None else spec
    f = jax.jit(jax.shard_map(kern, mesh=mesh, in_specs=(spec,) * len(inputs), out_specs=spec))
    placed = [ts.testing.place(x, mesh, spec) for x in inputs]  # no transfer between processes
    out = f(*placed)
    return list(out) if isinstance(out, (tuple, list)) else [out]


def assert_equal(got: jax.Array, want: np.ndarray) -> None:
    """Every shard this process holds equals its part of `want` (all of it on CPU)."""
    assert got.shape == want.shape, (got.shape, want.shape)
    for shard in got.addressable_shards:
        np.testing.assert_array_equal(np.asarray(shard.data), want[shard.index])


def per_device(x: np.ndarray, devices: int) -> np.ndarray:
    """[devices * rows, ...] -> [devices, rows, ...]."""
    return x.reshape(devices, -1, *x.shape[1:])


def random_rows(rng: np.random.Generator, devices: int, shape: Sequence[int], dtype: object = F32) -> np.ndarray:
    """Random data for `devices` devices, each `shape`, stacked along rows; no zeros (a zero
    could hide an element nobody wrote)."""
    x = rng.standard_normal((devices, *shape))
    x = np.where(np.abs(x) < 0.1, x + 0.5, x).astype(dtype)
    return x.reshape(devices * shape[0], *shape[1:])
