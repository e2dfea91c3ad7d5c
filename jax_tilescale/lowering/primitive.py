"""The `tilescale_call` primitive: its parameters and its abstract evaluation.

`TileKernel.__call__` binds it with `pe_info` (this device's kernel PE and team, computed by
XLA) followed by the kernel inputs; its results are the kernel outputs. The lowerings live in
`lowering/cpu.py` (interpreter) and `lowering/cuda.py` (FFI launch).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any

import jax
import jaxlib
import numpy as np
from jax.extend.core import Primitive

from .. import _jax_compat
from ..errors import KernelTraceError
from ..interpret.options import InterpretOptions
from ..ir import KernelIR
from ..ir.nodes import SourceLoc


@dataclass(frozen=True)
class CallSpec:
    """Static parameters of one primitive binding (hashable: part of JAX's caches)."""

    kernel: KernelIR
    mesh_axis_names: tuple[str, ...]  # every manual axis of the enclosing shard_map, mesh order
    interpret: bool | InterpretOptions | None
    wait_timeout_s: float | None = None  # the GPU's wait timeout (KernelSpec.wait_timeout_s)
    replicated: tuple[int, ...] = ()  # outputs the same on every PE (KernelSpec.replicated)


tilescale_call_p = Primitive("tilescale_call")
tilescale_call_p.multiple_results = True


@tilescale_call_p.def_abstract_eval
def _abstract_eval(pe_info: Any, *args: Any, call: CallSpec) -> list[jax.core.ShapedArray]:
    """The declared outputs, typed as varying over the kernel's mesh axes and every axis an input
    varies over (shard_map's check_vma): each device computes its own result, so `out_specs=P()`
    on it is refused as for any per-device value. Outputs declared replicated (`ts.kernel(replicated=)`)
    are the same on every PE, so they vary only over the other axes the inputs vary over. `pe_info`
    does not count: it only names the device, and a team's outputs depend on its inputs alone."""
    k = call.kernel
    if len(args) != len(k.inputs):
        raise KernelTraceError(f"kernel {k.name} takes {len(k.inputs)} inputs, got {len(args)}", k.loc)
    for a, b in zip(args, k.inputs):
        if tuple(a.shape) != b.shape or np.dtype(a.dtype) != b.dtype:
            raise KernelTraceError(
                f"kernel {k.name}: input {b.name} was traced as {b.dtype.name}{list(b.shape)}, "
                f"got {np.dtype(a.dtype).name}{list(a.shape)}",
                k.loc,
            )
    varying: frozenset[str] = frozenset()
    if _jax_compat.check_vma_enabled():
        varying = frozenset(k.mesh_axes).union(*(_jax_compat.varying_axes(a) for a in args))
    same = varying - frozenset(k.mesh_axes)
    return [_jax_compat.shaped_array(b.shape, b.dtype, same if i in call.replicated else varying)
            for i, b in enumerate(k.outputs)]


@tilescale_call_p.def_impl
def _eager_call(pe_info: Any, *args: Any, call: CallSpec) -> Any:
    """Reached only when a kernel is called outside `jax.jit` (eagerly): say how to call it."""
    k = call.kernel
    raise KernelTraceError(
        f"kernel {k.name} was called outside jax.jit; a tile kernel runs as part of a compiled JAX "
        f"computation: call it inside jax.jit, e.g. `jax.jit({k.name})(x)`, and a kernel that communicates "
        f"(or names mesh_axes) inside jax.jit(jax.shard_map({k.name}, mesh=mesh, in_specs=..., out_specs=...))",
        call_site(),
    )


_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_LIBRARY_DIRS = tuple(os.path.dirname(os.path.abspath(m.__file__)) for m in (jax, jaxlib, np))


def call_site() -> SourceLoc | None:
    """The innermost frame outside jax_tilescale, JAX and numpy: the user's line that made the call."""
    skip = (_PACKAGE_DIR, *_LIBRARY_DIRS)
    frame = sys._getframe(1)
    while frame is not None:
        filename = os.path.abspath(frame.f_code.co_filename)
        if not any(filename.startswith(d + os.sep) for d in skip):
            return SourceLoc(frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name)
        frame = frame.f_back
    return None
