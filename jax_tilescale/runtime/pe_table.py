"""Mesh -> NVSHMEM PE tables (pure Python; the reference for xla_ffi/pe_map.cc, which must agree with it).

A kernel's PE space is the row-major numbering of its mesh axes (``kernel_axes``); peers share this device's
coordinates on the other axes. NVSHMEM numbers one PE per process, and the bootstrap makes a process's PE
its ``jax.process_index()``, so the table holds each mesh device's ``process_index``.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import Any

from ..errors import LaunchError

_ONE_GPU_PER_PROCESS = (
    "NVSHMEM has one PE per process, so a mesh for GPU kernels needs one device per process; "
    "launch one process per GPU with `python -m jax_tilescale.launch -n N script.py`"
)


def mesh_pe_table(mesh: Any) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(NVSHMEM PE of each mesh device in row-major order, mesh shape) for a concrete ``jax.sharding.Mesh``."""
    devices = getattr(mesh, "devices", None)
    if devices is None or not hasattr(devices, "shape"):
        raise LaunchError(f"GPU kernels need a concrete device mesh, got {type(mesh).__name__}")
    flat = list(devices.flat)  # numpy order: row-major over the mesh axes
    pes = tuple(int(d.process_index) for d in flat)
    shared = sorted(pe for pe, n in Counter(pes).items() if n > 1)
    if shared:
        raise LaunchError(f"process {shared[0]} holds several devices of the mesh; {_ONE_GPU_PER_PROCESS}")
    return pes, tuple(int(n) for n in devices.shape)


def kernel_axis_indices(mesh_axis_names: Sequence[str], kernel_axis_names: Sequence[str]) -> tuple[int, ...]:
    """Indices of the kernel's mesh axes (the ``kernel_axes`` attribute), in the kernel's order."""
    names = tuple(mesh_axis_names)
    missing = [a for a in kernel_axis_names if a not in names]
    if missing:
        raise LaunchError(f"kernel mesh axes {missing} are not axes of the mesh {names}")
    return tuple(names.index(a) for a in kernel_axis_names)


def validate_mesh(pe_table: Sequence[int], mesh_shape: Sequence[int], kernel_axes: Sequence[int]) -> None:
    """Raises ValueError unless the three attributes describe a consistent mesh (as the handler checks)."""
    if any(n < 1 for n in mesh_shape):
        raise ValueError(f"mesh_shape {tuple(mesh_shape)} has an axis of size < 1")
    if len(pe_table) != math.prod(mesh_shape):
        raise ValueError(
            f"pe_table has {len(pe_table)} entries but mesh_shape {tuple(mesh_shape)} has "
            f"{math.prod(mesh_shape)} devices"
        )
    if any(pe < 0 for pe in pe_table):
        raise ValueError(f"pe_table holds an invalid PE: {tuple(pe_table)}")
    for axis in kernel_axes:
        if not 0 <= axis < len(mesh_shape):
            raise ValueError(f"kernel_axes {tuple(kernel_axes)} names axis {axis} of a mesh of rank {len(mesh_shape)}")
    if len(set(kernel_axes)) != len(kernel_axes):
        raise ValueError(f"kernel_axes {tuple(kernel_axes)} repeats an axis")


def _unravel(index: int, shape: Sequence[int]) -> list[int]:
    coords = [0] * len(shape)
    for a in reversed(range(len(shape))):
        index, coords[a] = divmod(index, shape[a])
    return coords


def _ravel(coords: Sequence[int], shape: Sequence[int]) -> int:
    flat = 0
    for c, n in zip(coords, shape, strict=True):
        flat = flat * n + c
    return flat


def kernel_pe_map(
    pe_table: Sequence[int], mesh_shape: Sequence[int], kernel_axes: Sequence[int], my_nvshmem_pe: int
) -> tuple[int, tuple[int, ...]]:
    """(this process's kernel PE, kernel PE -> NVSHMEM PE for each kernel PE), as the handler computes them.

    A one-device table stands for this process whatever PE it names (what a call outside shard_map passes).
    """
    validate_mesh(pe_table, mesh_shape, kernel_axes)
    if len(pe_table) == 1:
        return 0, (int(my_nvshmem_pe),)
    where = [d for d, pe in enumerate(pe_table) if pe == my_nvshmem_pe]
    if len(where) > 1:
        raise ValueError(f"NVSHMEM PE {my_nvshmem_pe} holds several devices of the mesh; {_ONE_GPU_PER_PROCESS}")
    if not where:
        raise ValueError(
            f"this process (NVSHMEM PE {my_nvshmem_pe}) holds no device of the mesh (pe_table {tuple(pe_table)})"
        )
    coords = _unravel(where[0], mesh_shape)
    sizes = [mesh_shape[a] for a in kernel_axes]
    my_kernel_pe = _ravel([coords[a] for a in kernel_axes], sizes)
    pe_map = []
    for k in range(math.prod(sizes)):
        peer = list(coords)
        for axis, c in zip(kernel_axes, _unravel(k, sizes), strict=True):
            peer[axis] = c
        pe_map.append(int(pe_table[_ravel(peer, mesh_shape)]))
    return my_kernel_pe, tuple(pe_map)
