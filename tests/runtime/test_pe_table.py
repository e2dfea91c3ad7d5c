"""Mesh -> PE tables on CPU: the Python reference, and the C++ handler's copy of it when the extension is built."""

from __future__ import annotations

import importlib.util
import itertools
import math
from dataclasses import dataclass

import numpy as np
import pytest

from jax_tilescale.errors import LaunchError
from jax_tilescale.runtime.pe_table import kernel_axis_indices, kernel_pe_map, mesh_pe_table


@dataclass(frozen=True)
class FakeDevice:
    id: int
    process_index: int


class FakeMesh:
    def __init__(self, process_indices: list[int], shape: tuple[int, ...]):
        self.devices = np.array([FakeDevice(i, p) for i, p in enumerate(process_indices)], dtype=object).reshape(shape)


def brute_force(pe_table, mesh_shape, kernel_axes, my_pe):
    """Independent reference: enumerate all coordinates and keep the ones matching ours off the kernel axes."""
    coords = list(itertools.product(*(range(n) for n in mesh_shape)))  # row-major, like the table
    mine = coords[list(pe_table).index(my_pe)]
    others = [a for a in range(len(mesh_shape)) if a not in kernel_axes]
    team = [c for c in coords if all(c[a] == mine[a] for a in others)]
    # Number the team row-major over kernel_axes in the given order.
    team.sort(key=lambda c: tuple(c[a] for a in kernel_axes))
    pe_map = tuple(pe_table[coords.index(c)] for c in team)
    return team.index(mine), pe_map


def test_2x2_row_and_column_teams():
    table, shape = (0, 1, 2, 3), (2, 2)
    # axis 1 ("y"): my row's two devices
    assert kernel_pe_map(table, shape, [1], 0) == (0, (0, 1))
    assert kernel_pe_map(table, shape, [1], 3) == (1, (2, 3))
    # axis 0 ("x"): my column
    assert kernel_pe_map(table, shape, [0], 1) == (0, (1, 3))
    assert kernel_pe_map(table, shape, [0], 2) == (1, (0, 2))
    # both axes, in mesh order and reversed
    assert kernel_pe_map(table, shape, [0, 1], 2) == (2, (0, 1, 2, 3))
    assert kernel_pe_map(table, shape, [1, 0], 2) == (1, (0, 2, 1, 3))


def test_2x3_permuted_device_order():
    # Device d of the row-major mesh lives in process table[d]: any order of the devices must work.
    table, shape = (5, 3, 0, 4, 1, 2), (2, 3)
    assert kernel_pe_map(table, shape, [1], 4) == (0, (4, 1, 2))
    assert kernel_pe_map(table, shape, [1], 2) == (2, (4, 1, 2))
    assert kernel_pe_map(table, shape, [0], 0) == (0, (0, 2))
    assert kernel_pe_map(table, shape, [0, 1], 1) == (4, table)
    assert kernel_pe_map(table, shape, [], 3) == (0, (3,))


@pytest.mark.parametrize("shape", [(2, 2), (2, 3), (3, 2), (2, 2, 2), (4,)])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_brute_force_for_every_axis_subset_and_order(shape, seed):
    table = tuple(int(p) for p in np.random.default_rng(seed).permutation(math.prod(shape)))
    for k in range(len(shape) + 1):
        for axes in itertools.permutations(range(len(shape)), k):
            for pe in table:
                assert kernel_pe_map(table, shape, axes, pe) == brute_force(table, shape, axes, pe), (axes, pe)


def test_one_device_table_is_this_process():
    # What a call outside shard_map passes: the kernel's only peer is this process, whatever its PE.
    assert kernel_pe_map((0,), (1,), [], 3) == (0, (3,))
    assert kernel_pe_map((0,), (1,), [0], 0) == (0, (0,))


@pytest.mark.parametrize(
    "table, shape, axes, pe, match",
    [
        ((0, 1, 2), (2, 2), [0], 0, "4 devices"),
        ((0, 1, 2, 3), (2, 2), [2], 0, "axis 2"),
        ((0, 1, 2, 3), (2, 2), [0, 0], 0, "repeats"),
        ((0, 1, 2, 3), (2, 2), [0], 7, "holds no device"),
        ((0, 0, 1, 1), (2, 2), [0], 0, "one PE per process"),
        ((0, 1), (2, 0), [0], 0, "size < 1"),
    ],
)
def test_invalid_inputs(table, shape, axes, pe, match):
    with pytest.raises(ValueError, match=match):
        kernel_pe_map(table, shape, axes, pe)


def test_mesh_pe_table_row_major_process_indices():
    mesh = FakeMesh([3, 1, 0, 2, 5, 4], (2, 3))
    assert mesh_pe_table(mesh) == ((3, 1, 0, 2, 5, 4), (2, 3))


def test_mesh_pe_table_rejects_two_devices_in_one_process():
    with pytest.raises(LaunchError, match=r"jax_tilescale\.launch"):
        mesh_pe_table(FakeMesh([0, 0, 1, 1], (2, 2)))


def test_mesh_pe_table_rejects_abstract_mesh():
    with pytest.raises(LaunchError, match="concrete device mesh"):
        mesh_pe_table(object())


def test_mesh_pe_table_of_a_real_cpu_mesh():
    import jax

    mesh = jax.make_mesh((1,), ("x",))
    assert mesh_pe_table(mesh) == ((jax.process_index(),), (1,))


def test_kernel_axis_indices():
    assert kernel_axis_indices(("x", "y", "z"), ("z", "x")) == (2, 0)
    with pytest.raises(LaunchError, match="not axes of the mesh"):
        kernel_axis_indices(("x", "y"), ("w",))


@pytest.mark.skipif(importlib.util.find_spec("jax_tilescale._ffi") is None, reason="GPU extension not built")
@pytest.mark.parametrize("shape", [(2, 2), (2, 3), (2, 2, 2)])
def test_cpp_handler_agrees_with_python(shape):
    from jax_tilescale import _ffi

    table = tuple(int(p) for p in np.random.default_rng(7).permutation(math.prod(shape)))
    for k in range(len(shape) + 1):
        for axes in itertools.permutations(range(len(shape)), k):
            for pe in table:
                my_pe, pe_map = _ffi.kernel_pe_map(list(table), list(shape), list(axes), pe)
                assert (my_pe, tuple(pe_map)) == kernel_pe_map(table, shape, axes, pe), (axes, pe)
    assert _ffi.kernel_pe_map([0], [1], [], 5) == (0, [5])
    with pytest.raises(ValueError, match="holds no device"):
        _ffi.kernel_pe_map([0, 1, 2, 3], [2, 2], [0], 9)
    with pytest.raises(ValueError, match="repeats"):
        _ffi.kernel_pe_map([0, 1, 2, 3], [2, 2], [1, 1], 0)


@pytest.mark.parametrize("seed", [0, 1])
def test_named_kernel_axes_number_pes_like_jax_axis_index(seed):
    """kernel_axes from axis names in the kernel's order (what lowering/cuda.py sends): a device's kernel PE
    is jax.lax.axis_index(axes)'s value, row-major over `axes` in that order, for a permuted device order."""
    names, shape = ("a", "b", "c"), (2, 3, 2)
    table = tuple(int(p) for p in np.random.default_rng(seed).permutation(math.prod(shape)))
    for k in range(1, 4):
        for axes in itertools.permutations(names, k):
            kernel_axes = kernel_axis_indices(names, axes)
            sizes = [shape[names.index(a)] for a in axes]
            for device, coords in enumerate(itertools.product(*(range(n) for n in shape))):
                my_pe, pe_map = kernel_pe_map(table, shape, kernel_axes, table[device])
                along = [coords[names.index(a)] for a in axes]
                assert my_pe == np.ravel_multi_index(along, sizes), (axes, coords)
                for peer, peer_along in enumerate(itertools.product(*(range(n) for n in sizes))):
                    peer_coords = list(coords)
                    for a, c in zip(axes, peer_along):
                        peer_coords[names.index(a)] = c
                    assert pe_map[peer] == table[np.ravel_multi_index(peer_coords, shape)], (axes, coords, peer)
