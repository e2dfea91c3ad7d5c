"""Kernel values: block index, PE numbering (TileScale and NVSHMEM names), mesh coordinates,
slices of static size, and loads of integers from inputs (the HDA's scales: `scales.py`)."""

from __future__ import annotations

import math
from typing import Any

from ..errors import KernelTraceError
from ..ir.expr import PE_VAR, Const, Expr, IntLike, format_expr, program_id_var
from ..ir.ranges import value_range
from ._common import RefLike, expr, region
from .refs import DynSlice, load_of
from .source import user_source_loc
from .state import TraceState, current_trace


def program_id(axis: int = 0) -> Expr:
    """Index of this block along grid axis `axis` (TileLang's `bx, by = T.Kernel(...)`)."""
    state = current_trace("program_id")
    if not isinstance(axis, int) or not 0 <= axis < len(state.grid):
        raise KernelTraceError(
            f"program_id({axis!r}): the grid {state.grid} has axes 0..{len(state.grid) - 1}", user_source_loc()
        )
    return program_id_var(axis)


def get_pe() -> Expr:
    """This device's PE number: its row-major index along the kernel's `mesh_axes`."""
    current_trace("get_pe")
    return PE_VAR


def get_pe_num() -> Expr:
    """Number of PEs in the kernel's PE space (a static value: the mesh is static)."""
    return Const(current_trace("get_pe_num").num_pes)


def get_rank() -> Expr:
    """TileScale's name for `get_pe()`: the same number, the device's row-major index along the
    kernel's `mesh_axes` (not the process rank when the kernel spans a subset of the mesh)."""
    current_trace("get_rank")
    return PE_VAR


def get_num_ranks() -> Expr:
    """TileScale's name for `get_pe_num()`: the number of PEs in the kernel's PE space."""
    return Const(current_trace("get_num_ranks").num_pes)


def _axis(state: TraceState, name: Any, op: str) -> tuple[int, int]:
    """(size, stride) of mesh axis `name` in the kernel's row-major PE numbering."""
    axes = state.mesh_axes
    if name not in axes:
        raise KernelTraceError(
            f"T.{op}({name!r}): the kernel's PE space is made of the mesh axes {axes}; "
            "name one of them (see the kernel's mesh_axes)",
            user_source_loc(),
        )
    i = axes.index(name)
    return state.mesh_axis_sizes[i], math.prod(state.mesh_axis_sizes[i + 1 :])


def axis_index(name: str) -> Expr:
    """This device's coordinate along mesh axis `name` (one of the kernel's `mesh_axes`):
    `(get_pe() // stride) % size` in the row-major PE numbering (jax.lax.axis_index's value)."""
    state = current_trace("axis_index")
    size, stride = _axis(state, name, "axis_index")
    index = PE_VAR // stride
    # The outermost axis needs no modulo (the PE is below num_pes): the expression stays simpler.
    return index if size * stride == state.num_pes else index % size


def axis_size(name: str) -> Expr:
    """The size of mesh axis `name` (one of the kernel's `mesh_axes`), a static value."""
    state = current_trace("axis_size")
    return Const(_axis(state, name, "axis_size")[0])


def pe_of(**coords: IntLike) -> Expr:
    """The PE at the given mesh coordinates, e.g. `T.pe_of(y=(T.axis_index("y") + 1) % 2)`; axes
    left out keep this PE's coordinate. A coordinate that can leave its axis is an error when it
    is affine in the block index and PE (`(c + 1) % n` is not: keep such coordinates in range)."""
    state = current_trace("pe_of")
    loc = user_source_loc()
    for name in coords:
        _axis(state, name, "pe_of")
    ranges = {program_id_var(i): (0, g - 1) for i, g in enumerate(state.grid)}
    ranges[PE_VAR] = (0, state.num_pes - 1)
    pe: Expr = Const(0)
    for name in state.mesh_axes:
        size, stride = _axis(state, name, "pe_of")
        if name not in coords:
            pe = pe + axis_index(name) * stride
            continue
        coord = expr(coords[name], "pe_of", f"the coordinate {name}=", loc)
        rng = value_range(coord, ranges)
        if rng is not None and (rng[0] < 0 or rng[1] >= size):
            bad = rng[0] if rng[0] < 0 else rng[1]
            raise KernelTraceError(
                f"T.pe_of: the coordinate {name}={format_expr(coord)} can be {bad}, but axis {name!r} has size {size}",
                loc,
            )
        pe = pe + coord * stride
    return pe


def ds(start: IntLike, size: int) -> DynSlice:
    """A slice of static `size` starting at `start` (which may be a run-time value)."""
    if isinstance(size, Expr) or not isinstance(size, int) or size <= 0:
        raise KernelTraceError(f"T.ds size must be a positive int, got {size!r}", user_source_loc())
    return DynSlice(expr(start, "ds", "start", user_source_loc()), size)


def load(ref: RefLike) -> Expr:
    """The value of one integer element of global memory, e.g. `T.load(splits_cumsum[peer])`, as a
    kernel value: a size, an offset, a PE, a wait value, a condition.

    Of an input (which never changes while the kernel runs) indexing it and using the result in
    arithmetic does the same (`splits[p] * 4`). Of an output, a `T.alloc_symmetric` buffer or a
    signal word (uint64, read as int64) that this PE's blocks or its peers write, it reads the
    element where the statement stands, so it must come after the wait that delivered the data
    (`T.signal_wait_until` on the put's signal, `T.wait_*` on a flag, `T.barrier_all`): the
    interpreter reports a load that no such wait orders after the write, or that a `_nbi` put still
    in flight will overwrite, as a RaceError naming both lines."""
    loc = user_source_loc()
    current_trace("load")
    return load_of(region(ref, "load", "the element", loc), loc, explicit=True)


__all__ = [
    "axis_index",
    "axis_size",
    "ds",
    "get_num_ranks",
    "get_pe",
    "get_pe_num",
    "get_rank",
    "load",
    "pe_of",
    "program_id",
]
