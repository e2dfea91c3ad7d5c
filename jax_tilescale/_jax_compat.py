"""Every use of JAX's private modules (`jax._src.*`), behind small named functions.

JAX gives no public API for a few things jax_tilescale needs: typing a primitive's outputs as
varying over manual mesh axes (shard_map's `check_vma`), emitting a host callback from inside a
lowering rule, and the key-value store of `jax.distributed`. Those private names move between JAX
releases, so nothing else in the package (or its tests) imports `jax._src`: it calls these
functions. `CHECKED_JAX_VERSIONS` lists the releases each function was read against and exercised
on (tests/jax/test_jax_compat.py); on a new JAX release, re-read each function's JAX source (named
in its docstring), run that test, then add the version.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import FrameType
from typing import Any

import jax
import numpy as np

# The JAX releases every function below was checked on: 0.10.2 (CPU CI) and 0.11.2 (the GPU machine).
CHECKED_JAX_VERSIONS = ("0.10.2", "0.11.2")


def version_is_checked(version: str | None = None) -> bool:
    """Whether `version` (default: the installed JAX) is one of CHECKED_JAX_VERSIONS."""
    return (jax.__version__ if version is None else version) in CHECKED_JAX_VERSIONS


# --- the mesh and axis types of the code being traced -------------------------------------------


@dataclass(frozen=True)
class MeshScope:
    """The mesh axes in scope where a kernel is called (from `jax.sharding.get_abstract_mesh()`)."""

    axis_names: tuple[str, ...]  # every axis of the mesh, mesh order
    axis_sizes: dict[str, int]
    manual: tuple[str, ...]  # axes an enclosing shard_map made manual, mesh order
    automatic: tuple[str, ...]  # the other axes (a partially manual shard_map), mesh order

    @property
    def empty(self) -> bool:
        return not self.axis_names


def mesh_scope() -> MeshScope:
    """The mesh axes in scope. Outside shard_map (or inside jit without a mesh) every field is empty.

    Public API (`jax.sharding.get_abstract_mesh`, `AbstractMesh.manual_axes`); kept here so that
    the three kinds of axes are read in one place."""
    am = jax.sharding.get_abstract_mesh()
    if am is None or am.empty:
        return MeshScope((), {}, (), ())
    names = tuple(am.axis_names)
    manual = set(am.manual_axes)
    return MeshScope(
        names,
        dict(zip(names, (int(n) for n in am.axis_sizes))),
        tuple(n for n in names if n in manual),
        tuple(n for n in names if n not in manual),
    )


def check_vma_enabled() -> bool:
    """Whether the enclosing shard_map checks how values vary over its manual axes (`check_vma=True`).

    JAX source: `jax._src.config._check_vma` (a context-local flag shard_map sets while tracing)."""
    from jax._src import config

    return bool(config._check_vma.value)


def varying_axes(aval: Any) -> frozenset[str]:
    """The manual mesh axes a traced value varies over (its type's vma; empty without check_vma).

    JAX source: `ShapedArray.manual_axis_type.varying` (`jax._src.core.ManualAxisType`)."""
    mat = getattr(aval, "manual_axis_type", None)
    return frozenset(getattr(mat, "varying", frozenset()))


def shaped_array(shape: Sequence[int], dtype: Any, varying: frozenset[str] = frozenset()) -> jax.core.ShapedArray:
    """A ShapedArray typed as varying over the manual axes `varying` (shard_map's check_vma type).

    With no varying axes (or outside a mesh) it is the plain ShapedArray. JAX source:
    `jax._src.core.ShapedArray(..., sharding=, manual_axis_type=ManualAxisType(varying=))`, as
    `jax._src.lax.utils.standard_multi_result_abstract_eval` builds its outputs."""
    if not varying:
        return jax.core.ShapedArray(tuple(shape), np.dtype(dtype))
    from jax._src import core

    sharding = jax.sharding.NamedSharding(jax.sharding.get_abstract_mesh(), jax.sharding.PartitionSpec())
    mat = core.ManualAxisType(varying=frozenset(varying))
    return jax.core.ShapedArray(tuple(shape), np.dtype(dtype), sharding=sharding, manual_axis_type=mat)


# --- lowering ----------------------------------------------------------------------------------


def emit_host_callback(
    ctx: Any, callback: Callable[..., Sequence[np.ndarray]], operands: Sequence[Any],
    operand_output_aliases: Mapping[int, int] | None = None,
) -> Sequence[Any]:
    """MLIR for a side-effecting call of `callback` on every device, with that device's operands as
    numpy arrays; returns the results (`ctx.avals_out`). Under shard_map every axis must be manual.
    `operand_output_aliases` ({operand index: result index}) tells XLA that a result is returned in
    an operand's buffer, as `jax.ffi.ffi_lowering`'s argument of that name does (the callback's
    results are copied into their buffers after it returns, when it has read its operands).

    JAX source: `jax._src.callback.emit_python_callback` and `_callback_op_sharding`, what
    `io_callback`'s lowering uses. We skip `io_callback` itself because its first step copies every
    argument to CPU device 0, which waits for device 0, whose thread may be blocked in its own
    callback waiting for this one (a deadlock seen with two executions in flight)."""
    import dataclasses

    from jax._src import callback as jax_callback

    avals_out = list(ctx.avals_out)
    padded = bool(operand_output_aliases) and len(avals_out) == 1
    if padded:
        # Shardy's export (jaxlib 0.10.2) turns a one-result callback under shard_map into a
        # one-element tuple but keeps the alias's empty tuple index (XLA's verifier then refuses the
        # alias). With a second, one-byte result the call is a tuple from the start.
        avals_out.append(jax.core.ShapedArray((1,), np.dtype(np.uint8)))
        ctx = dataclasses.replace(ctx, avals_out=avals_out)
        inner = callback

        def callback(*args: Any) -> Sequence[np.ndarray]:
            return (*inner(*args), np.zeros((1,), np.uint8))

    sharding = jax_callback._callback_op_sharding(ctx.module_context.axis_context, None, avals_out)
    results, _, _ = jax_callback.emit_python_callback(
        ctx, callback, None, list(operands), ctx.avals_in, avals_out,
        has_side_effect=True, returns_token=False, sharding=sharding,
    )
    if operand_output_aliases:
        # JAX source: `jax._src.interpreters.mlir.custom_call`'s output_operand_aliases (one result:
        # no tuple index). The callback is the custom call that defines the results.
        from jax._src.lib.mlir import ir
        from jax._src.lib.mlir.dialects import hlo

        op = results[0].owner
        op.attributes["output_operand_aliases"] = ir.ArrayAttr.get([
            hlo.OutputOperandAlias.get(output_tuple_indices=[j] if len(results) > 1 else [], operand_index=i,
                                       operand_tuple_indices=[])
            for i, j in operand_output_aliases.items()
        ])
    return results[:-1] if padded else results


def host_callback_frames(frame: FrameType | None) -> list[FrameType]:
    """The Python frames of the host callback that `frame` runs in, from `frame` up to the outermost
    frame of JAX's callback wrapper (the next one out called into XLA); [] outside a host callback.

    JAX source: `jax._src.callback.emit_python_callback`'s `_wrapped_callback`, the frame XLA's
    callback trampoline calls."""
    from jax._src import callback as jax_callback

    wrapper_file = jax_callback.__file__
    chain: list[FrameType] = []
    outermost = 0
    while frame is not None:
        chain.append(frame)
        if frame.f_code.co_filename == wrapper_file and frame.f_code.co_name == "_wrapped_callback":
            outermost = len(chain)
        frame = frame.f_back
    return chain[:outermost]


def lowering_mesh(ctx: Any) -> jax.sharding.Mesh | None:
    """The concrete `jax.sharding.Mesh` of the shard_map being lowered, or None: plain jit, or a
    shard_map whose lowering only knows its abstract mesh (one nested in another without a mesh
    argument, unless the call runs under `jax.set_mesh(mesh)`).

    JAX source: `jax._src.sharding_impls.SPMDAxisContext.mesh` (`ctx.module_context.axis_context`),
    set by `jax._src.shard_map._get_spmdaxis_ctx_mesh`."""
    mesh = getattr(ctx.module_context.axis_context, "mesh", None)
    return mesh if isinstance(mesh, jax.sharding.Mesh) else None


# --- jax.distributed ---------------------------------------------------------------------------


def distributed_client() -> Any:
    """jax.distributed's client (its key-value store), or None in a single-process run.

    JAX source: `jax._src.distributed.global_state.client` (no public accessor)."""
    from jax._src import distributed

    return distributed.global_state.client


def distributed_rank_and_world() -> tuple[int, int] | None:
    """(process id, number of processes) as given to jax.distributed.initialize, or None before it.
    Reading them does not start XLA's backends (jax.process_index() would).

    JAX source: `jax._src.distributed.global_state.{client, process_id, num_processes}`."""
    from jax._src import distributed

    state = distributed.global_state
    if state.client is None:
        return None
    return int(state.process_id), int(state.num_processes)
