"""`trace_kernel`: running the user's kernel function once, with symbolic refs, to build a KernelIR."""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..errors import KernelTraceError
from ..ir.buffers import Buffer, BufferKind
from ..ir.kernel_ir import KernelIR
from ..ir.nodes import UNKNOWN_LOC, SourceLoc
from .refs import Ref
from .state import TraceState, tracing


def trace_kernel(
    fn: Callable[..., Any],
    *,
    name: str,
    inputs: Sequence[tuple[tuple[int, ...], np.dtype]],
    outputs: Sequence[tuple[tuple[int, ...], np.dtype]],
    grid: tuple[int, ...],
    threads: int,
    mesh_axes: tuple[str, ...],
    num_pes: int,
    mesh_axis_sizes: Sequence[int] | None = None,
    input_vma: Sequence[frozenset[str] | None] | None = None,
    blocks_per_sm: int = 1,
    pingpong: bool = False,
    cluster: tuple[int, ...] = (),
) -> KernelIR:
    """Calls `fn(*input_refs, *output_refs)` under a fresh trace and returns its IR.

    `mesh_axis_sizes` gives the size of each of `mesh_axes` (for `T.axis_index` and `T.pe_of`);
    it may be left out when there is at most one axis (its size is then `num_pes`). `input_vma`:
    per input, the mesh axes shard_map types it as varying over (None: not known). `blocks_per_sm`:
    `ts.kernel`'s, recorded in the IR for the code generator, as `pingpong`; `cluster` as normalised by
    `ts.kernel` (one int per grid axis, or () for none).
    """
    sizes = _axis_sizes(mesh_axes, num_pes, mesh_axis_sizes)
    state = TraceState(grid=grid, threads=threads, num_pes=num_pes, mesh_axes=tuple(mesh_axes), mesh_axis_sizes=sizes,
                       cluster=tuple(cluster))
    names = _parameter_names(fn, len(inputs) + len(outputs))
    in_bufs = tuple(
        Buffer(state.fresh_name(names[i], f"in{i}"), tuple(shape), np.dtype(dtype), BufferKind.INPUT)
        for i, (shape, dtype) in enumerate(inputs)
    )
    out_bufs = tuple(
        Buffer(state.fresh_name(names[len(inputs) + i], f"out{i}"), tuple(shape), np.dtype(dtype), BufferKind.OUTPUT)
        for i, (shape, dtype) in enumerate(outputs)
    )
    try:
        code = fn.__code__
        loc = SourceLoc(code.co_filename, code.co_firstlineno, code.co_name)
    except AttributeError:
        loc = UNKNOWN_LOC
    for buf, vma in zip(in_bufs, input_vma or ()):
        if vma is not None:
            state.input_vma[buf.name] = vma
    with tracing(state):
        result = fn(*(Ref(b) for b in in_bufs + out_bufs))
    if state.open_bodies:
        raise KernelTraceError(
            "a T.serial/T.Pipelined loop was left early (`break` or `return` inside it); kernel loops run all "
            "their iterations",
            loc,
        )
    if result is not None:
        raise KernelTraceError(
            "a kernel function writes its outputs through its output refs and must return None", loc
        )
    return KernelIR(
        name=name,
        inputs=in_bufs,
        outputs=out_bufs,
        allocs=tuple(state.allocs),
        body=tuple(state.body),
        grid=grid,
        threads=threads,
        mesh_axes=mesh_axes,
        num_pes=num_pes,
        mesh_axis_sizes=sizes,
        loc=loc,
        blocks_per_sm=blocks_per_sm,
        pingpong=pingpong,
        cluster=tuple(cluster),
    )


def _parameter_names(fn: Callable[..., Any], n: int) -> list[str | None]:
    """The names of the `n` refs `fn` is called with: its positional parameters in order, then its
    `*args` name numbered (`refs_0`, `refs_1`, ...); None where `fn` has no signature to read."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return [None] * n
    names: list[str | None] = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    star = next((p.name for p in params if p.kind is p.VAR_POSITIONAL), None)
    names = names[:n]
    names += [None if star is None else f"{star}_{i}" for i in range(n - len(names))]
    return names


def _axis_sizes(mesh_axes: Sequence[str], num_pes: int, given: Sequence[int] | None) -> tuple[int, ...]:
    if given is None:
        if len(mesh_axes) > 1:
            raise ValueError(f"trace_kernel: mesh_axis_sizes is required with several mesh axes {tuple(mesh_axes)}")
        return (num_pes,) if mesh_axes else ()
    sizes = tuple(int(n) for n in given)
    if len(sizes) != len(mesh_axes) or math.prod(sizes) != num_pes:
        raise ValueError(
            f"trace_kernel: mesh_axis_sizes {sizes} must give one size per axis of {tuple(mesh_axes)} "
            f"with product num_pes={num_pes}"
        )
    return sizes
