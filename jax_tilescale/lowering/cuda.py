"""The CUDA lowering: the kernel is compiled to a cubin and launched by the `jax_tilescale_launch`
FFI handler; this module fills the call's attributes (docs/calling_convention.md, "The FFI call").
"""

from __future__ import annotations

import functools
import os
import warnings
from typing import Any

import jax
import numpy as np

from .. import _jax_compat, abi
from ..codegen.staging import staged_flags
from ..errors import LaunchError, PerformanceWarning
from ..ir import KernelIR
from .primitive import CallSpec

__all__ = ["aliased_tensor_maps", "cuda_arch", "lower_cuda", "mesh_attributes", "staged_flags", "warn_slower_paths"]


def lower_cuda(ctx: Any, pe_info: Any, *args: Any, call: CallSpec) -> Any:
    """MLIR for `tilescale_call` on CUDA: a custom call of the launch handler with the attributes of
    docs/calling_convention.md."""
    from ..codegen import generate_cuda
    from ..compiler import compile_cubin, kernel_resources
    from ..runtime import ensure_initialized, ensure_registered
    from ..runtime.ffi_registry import GRAPH_TARGET_NAME, TARGET_NAME
    from ..runtime.wait_timeout import timeout_ns as wait_timeout_ns

    k = call.kernel
    mesh = _jax_compat.lowering_mesh(ctx)
    if k.mesh_axes and mesh is None:
        raise LaunchError(
            f"kernel {k.name}: the GPU launch needs the concrete device mesh of the enclosing shard_map, but its "
            "lowering only knows the abstract mesh (a kernel called in a partially manual shard_map, axis_names=..., "
            "runs in a shard_map nested over the other axes); run the jitted call under `with jax.set_mesh(mesh):`"
        )
    ensure_registered()
    if k.uses_nvshmem():
        ensure_initialized()
    pe_table, mesh_shape, kernel_axes = mesh_attributes(mesh, k.mesh_axes)
    module = generate_cuda(k, arch=cuda_arch(), p2p_peers=not k.uses_nvshmem() or _one_machine())
    cubin = compile_cubin(module.source, arch=module.arch, entry=module.entry, nvshmem=module.uses_nvshmem)
    compiled = kernel_resources(cubin, module.entry)  # ptxas's spills and serialized wgmma, in the same warning
    warn_slower_paths(k, module.notes + (compiled.notes() if compiled is not None else ()))
    grid3 = tuple(module.grid) + (1,) * (3 - len(module.grid))
    # A launch with no per-call host work may be captured in XLA's command buffers (CUDA graphs): see
    # command_buffer_ok. Only a graph-safe kernel is a pure function of its inputs, which XLA may schedule
    # as one; a communicating kernel keeps its side effect (its peers' writes) either way.
    target = GRAPH_TARGET_NAME if command_buffer_ok(module, k.num_pes)[0] else TARGET_NAME
    # Aliased outputs are returned in their inputs' buffers: XLA hands the handler one pointer for both.
    aliases = dict(k.aliases) or None
    rule = jax.ffi.ffi_lowering(target, has_side_effect=not module.graph_safe, operand_output_aliases=aliases)
    # pe_info (the interpreter's operand) is left out: the generated code takes its PE from the handler's
    # PE map, and inside shard_map XLA would otherwise compute axis_index for it on every call.
    ctx = ctx.replace(avals_in=ctx.avals_in[1:])
    return rule(
        ctx,
        *args,
        abi_version=np.int64(abi.ABI_VERSION),
        cubin=str(cubin),
        entry=module.entry,
        grid=np.asarray(grid3, np.int64),
        threads=np.int64(module.threads),
        smem_bytes=np.int64(module.smem_bytes),
        scratch_bytes=np.int64(module.scratch_bytes),
        staged=np.asarray(module.staged, np.int64),
        pe_table=np.asarray(pe_table, np.int64),
        mesh_shape=np.asarray(mesh_shape, np.int64),
        kernel_axes=np.asarray(kernel_axes, np.int64),
        uses_nvshmem=bool(module.uses_nvshmem),
        grid_barrier=bool(module.grid_barrier),
        dependent_launch=bool(module.dependent_launch),
        wait_timeout_ns=np.int64(wait_timeout_ns(call.wait_timeout_s)),
        tensor_maps=np.asarray(aliased_tensor_maps(k, module.tensor_maps), np.int64),
    )


def warn_slower_paths(kernel: KernelIR, notes: tuple[str, ...]) -> None:
    """A PerformanceWarning naming the kernel and each GEMM loop the code generator lowered in a slower form
    than asked or possible (`CudaModule.notes`), and what ptxas reported costing speed (spills, serialized wgmma:
    compiler/ptxas.py); nothing when there are none."""
    if notes:
        lines = "\n".join(f"  - {note}" for note in notes)
        warnings.warn(PerformanceWarning(f"kernel {kernel.name} ({kernel.loc}) runs in a slower form on the GPU:\n"
                                         f"{lines}"), stacklevel=2)


def mesh_attributes(
    mesh: Any, kernel_mesh_axes: tuple[str, ...]
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """The `pe_table`, `mesh_shape` and `kernel_axes` attributes: the mesh's devices as NVSHMEM PEs
    (row-major), its shape, and the indices of the kernel's mesh axes in the kernel's order (which
    numbers its PE space row-major, as `jax.lax.axis_index(mesh_axes)` does). Without a mesh (plain
    jit) a one-device table that stands for this process."""
    from ..runtime import kernel_axis_indices, mesh_pe_table

    if mesh is None:
        return (jax.process_index(),), (1,), ()
    pe_table, mesh_shape = mesh_pe_table(mesh)
    return pe_table, mesh_shape, kernel_axis_indices(tuple(mesh.axis_names), kernel_mesh_axes)


def aliased_tensor_maps(k: KernelIR, fields: tuple[int, ...]) -> list[int]:
    """The `tensor_maps` attribute with each map of an aliased input encoded for its output's param:
    the kernel addresses the pair through that pointer (the staged copy when peers touch it), so a
    TMA load must read the same memory (docs/calling_convention.md)."""
    from ..codegen.gemm_sm90_load import TENSOR_MAP_FIELDS

    out = list(fields)
    for at in range(0, len(out), TENSOR_MAP_FIELDS):  # each map's first field is its buffer's param index
        out[at] = k.params.index(k.memory_of(k.params[out[at]]))
    return out


COMMAND_BUFFERS_VAR = "TILESCALE_COMMAND_BUFFERS"


def command_buffer_ok(module: Any, kernel_pes: int) -> tuple[bool, str]:
    """Whether the launch of `module` (a CudaModule) may be recorded into XLA's command buffers (CUDA graphs) and
    replayed with the same arguments, and why not. A plain kernel without scratch, or whose scratch it leaves
    zero itself (`left_zero`), needs nothing per call. A call-free kernel takes its launch number and scratch
    half from its launch-control words (ts_abi.h, TS_CTL_ENDED), so a replay is a new launch, as long as the
    handler stages nothing: every param peers touch must go over zero-copy, which needs the processes' pools
    mapped (runtime/peer_memory.py; a buffer outside them under capture is a clear error naming
    $TILESCALE_COMMAND_BUFFERS), or the kernel's PE space must be this PE alone (`kernel_pes` 1: every param is
    its own). A kernel with NVSHMEM's calls (several machines) stages through the handler, so it stays out."""
    from ..runtime import peer_memory  # lazily, like lower_cuda's runtime imports

    if module.graph_safe:
        return True, ""
    if not module.uses_nvshmem:
        return False, "a plain kernel with scratch it does not promise to leave zero (left_zero)"
    if os.environ.get(COMMAND_BUFFERS_VAR, "1") == "0":
        return False, f"${COMMAND_BUFFERS_VAR}=0"
    if not module.call_free:
        return False, "the kernel keeps NVSHMEM's calls, so the handler stages the buffers its peers touch"
    if kernel_pes > 1 and any(flag & abi.STAGE_P2P for flag in module.staged) and not peer_memory.status().on:
        return False, f"zero-copy is off ({peer_memory.status().reason}), so the handler stages buffers"
    return True, ""


def _one_machine() -> bool:
    """Whether every process of the job runs on this machine, so that every peer is load/store
    reachable (NVLink or the same GPU): what a call-free kernel needs (codegen/call_free.py)."""
    from ..runtime.distributed import process_layout

    return process_layout().hosts == 1


@functools.cache
def cuda_arch() -> str:
    """The sm_XX of this process's first GPU (sm_90 without one: codegen tests)."""
    gpus = [d for d in jax.local_devices() if d.platform == "gpu"]
    cc = getattr(gpus[0], "compute_capability", "9.0") if gpus else "9.0"
    return "sm_" + str(cc).replace(".", "")
