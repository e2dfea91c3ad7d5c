"""`jax_tilescale.kernel`: a traced tile kernel as a JAX primitive.

`@kernel(...)` returns a `TileKernel`. Calling it (inside `jax.jit`, usually inside
`jax.shard_map`) traces the Python kernel into IR for the argument shapes, verifies it, and
binds `tilescale_call_p`. The primitive has one abstract evaluation (the declared outputs) and
two lowerings: on CPU (or with `interpret=True`) the IR runs in the interpreter through an
`io_callback`, one call per simulated device; on CUDA it is compiled to a cubin and launched by
the `jax_tilescale_launch` FFI handler (docs/calling_convention.md).
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax._src import callback as jax_callback  # the host-callback lowering (see _lower_interpret)
from jax._src import mesh as mesh_lib
from jax.extend.core import Primitive
from jax.interpreters import mlir

from .ast_rewrite import rewrite_kernel_function
from .errors import KernelTraceError, LaunchError
from .interpret.options import InterpretOptions
from .ir import KernelIR, format_kernel, verify_kernel
from .ir.nodes import BufferKind, SourceLoc
from .language import control as _control
from .language.tracing import trace_kernel

ABI_VERSION = 2


@dataclass(frozen=True)
class KernelSpec:
    """What `@kernel(...)` was given, normalised and checked once."""

    out_shape: tuple[jax.ShapeDtypeStruct, ...]
    out_is_tuple: bool
    grid: tuple[int, ...]
    threads: int
    mesh_axes: tuple[str, ...] | None  # None: every axis of the enclosing shard_map
    interpret: bool | InterpretOptions | None  # None: interpret on CPU; options imply True
    name: str
    wait_timeout_s: float | None = None  # None: $TILESCALE_WAIT_TIMEOUT_S, else 60 s (runtime/wait_timeout.py)

    @staticmethod
    def make(fn: Callable[..., Any], out_shape: Any, grid: Any, threads: int, mesh_axes: Any,
             interpret: bool | InterpretOptions | None, name: str | None,
             wait_timeout_s: float | None = None) -> KernelSpec:
        loc = _fn_loc(fn)
        is_tuple = isinstance(out_shape, (tuple, list))
        outs = tuple(out_shape) if is_tuple else (out_shape,)
        if not outs:
            raise KernelTraceError("out_shape must name at least one output", loc)
        for o in outs:
            if not hasattr(o, "shape") or not hasattr(o, "dtype"):
                raise KernelTraceError(f"out_shape entries must be jax.ShapeDtypeStruct, got {o!r}", loc)
        norm = tuple(jax.ShapeDtypeStruct(tuple(int(d) for d in o.shape), np.dtype(o.dtype)) for o in outs)
        grid_t = (grid,) if isinstance(grid, int) else tuple(grid)
        if isinstance(mesh_axes, str):
            mesh_axes = (mesh_axes,)
        axes = None if mesh_axes is None else tuple(mesh_axes)
        if axes is not None and len(set(axes)) != len(axes):
            raise KernelTraceError(f"mesh_axes {axes} names an axis twice", loc)
        if wait_timeout_s is not None and (
            isinstance(wait_timeout_s, bool) or not isinstance(wait_timeout_s, (int, float))
            or not math.isfinite(wait_timeout_s) or wait_timeout_s < 0
        ):
            raise KernelTraceError(
                f"wait_timeout_s must be a number of seconds >= 0 (0: waits never time out), got {wait_timeout_s!r}",
                loc,
            )
        wait = None if wait_timeout_s is None else float(wait_timeout_s)
        return KernelSpec(norm, is_tuple, grid_t, threads, axes, interpret, name or fn.__name__, wait)


@dataclass(frozen=True)
class CallSpec:
    """Static parameters of one primitive binding (hashable: part of JAX's caches)."""

    kernel: KernelIR
    mesh_axis_names: tuple[str, ...]  # every manual axis of the enclosing shard_map, mesh order
    interpret: bool | InterpretOptions | None
    wait_timeout_s: float | None = None  # the GPU's wait timeout (KernelSpec.wait_timeout_s)


def _fn_loc(fn: Callable[..., Any]) -> SourceLoc | None:
    code = getattr(fn, "__code__", None)
    return SourceLoc(code.co_filename, code.co_firstlineno, code.co_name) if code else None


def _enclosing_axes() -> tuple[tuple[str, ...], dict[str, int]]:
    """Manual (shard_map) axes in scope and their sizes; empty outside shard_map."""
    am = mesh_lib.get_abstract_mesh()
    if am is None or am.empty:
        return (), {}
    manual = tuple(n for n in am.axis_names if n in am.manual_axes)
    return manual, dict(zip(am.axis_names, am.axis_sizes))


class TileKernel:
    """A user kernel; call it like a JAX function on arrays (one per kernel input)."""

    def __init__(self, fn: Callable[..., Any], spec: KernelSpec):
        self.fn = fn
        # What is traced: fn with `if`/`and`/`or`/`not` on kernel values made kernel conditionals.
        self.traced_fn = rewrite_kernel_function(fn, _control)
        self.spec = spec
        functools.update_wrapper(self, fn)

    def trace(
        self,
        *args: Any,
        mesh_axes: tuple[str, ...] | None = None,
        num_pes: int = 1,
        mesh_axis_sizes: tuple[int, ...] | None = None,
    ) -> KernelIR:
        """The verified IR for arguments of these shapes (arrays or ShapeDtypeStructs).

        `mesh_axis_sizes` (the size of each mesh axis) may be left out with at most one axis."""
        axes = tuple((self.spec.mesh_axes if mesh_axes is None else mesh_axes) or ())
        self._check_arity(len(args))
        if mesh_axis_sizes is None:
            if len(axes) > 1:
                raise KernelTraceError(
                    f"kernel {self.spec.name}: give mesh_axis_sizes= for the mesh axes {axes}", _fn_loc(self.fn)
                )
            mesh_axis_sizes = (num_pes,) if axes else ()
        avals = tuple((tuple(a.shape), np.dtype(a.dtype)) for a in args)
        return _trace_cached(self, avals, axes, num_pes, tuple(int(n) for n in mesh_axis_sizes))

    def _check_arity(self, n_inputs: int) -> None:
        """A KernelTraceError (not Python's TypeError from inside the trace) when the arrays do not fit `fn`."""
        try:
            params = list(inspect.signature(self.fn).parameters.values())
        except (TypeError, ValueError):
            return
        if any(p.kind is p.VAR_POSITIONAL for p in params):
            return
        positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        required = [p for p in positional if p.default is p.empty]
        n_out = len(self.spec.out_shape)
        if not len(required) <= n_inputs + n_out <= len(positional):
            names = ", ".join(p.name for p in positional)
            raise KernelTraceError(
                f"kernel {self.spec.name} was called with {n_inputs} input array(s), but its function "
                f"{self.fn.__name__}({names}) takes {len(positional) - n_out} input ref(s) followed by {n_out} "
                "output ref(s) (one per out_shape entry)",
                _fn_loc(self.fn),
            )

    def ir_text(self, *args: Any, **kw: Any) -> str:
        return format_kernel(self.trace(*args, **kw), with_locs=True)

    def __call__(self, *args: Any) -> Any:
        loc = _fn_loc(self.fn)
        manual, sizes = _enclosing_axes()
        axes = self.spec.mesh_axes
        if axes is None:
            axes = manual
        elif axes and not manual:
            raise KernelTraceError(
                f"kernel {self.spec.name} has mesh_axes={axes} but is called outside jax.shard_map; call it "
                "inside shard_map over a mesh with those axes",
                loc,
            )
        missing = [a for a in axes if a not in manual]
        if missing:
            raise KernelTraceError(
                f"kernel {self.spec.name}: mesh axes {missing} are not axes of the enclosing shard_map "
                f"(its axes: {list(manual)})",
                loc,
            )
        axes = tuple(a for a in manual if a in axes)  # mesh order defines PE numbering
        axis_sizes = tuple(sizes[a] for a in axes)
        num_pes = math.prod(axis_sizes)
        arrays = [jnp.asarray(a) for a in args]
        kernel_ir = self.trace(*arrays, mesh_axes=axes, num_pes=num_pes, mesh_axis_sizes=axis_sizes)
        others = tuple(a for a in manual if a not in axes)
        pe = jax.lax.axis_index(axes) if axes else jnp.int32(0)
        team = jax.lax.axis_index(others) if others else jnp.int32(0)
        pe_info = jnp.stack([jnp.asarray(pe, jnp.int32), jnp.asarray(team, jnp.int32)])
        call = CallSpec(kernel_ir, manual, self.spec.interpret, self.spec.wait_timeout_s)
        outs = tilescale_call_p.bind(pe_info, *arrays, call=call)
        return tuple(outs) if self.spec.out_is_tuple else outs[0]


@functools.lru_cache(maxsize=256)
def _trace_cached(
    k: TileKernel, in_avals: tuple, axes: tuple[str, ...], num_pes: int, axis_sizes: tuple[int, ...]
) -> KernelIR:
    spec = k.spec
    ir = trace_kernel(
        k.traced_fn,
        name=spec.name,
        inputs=in_avals,
        outputs=[(o.shape, o.dtype) for o in spec.out_shape],
        grid=spec.grid,
        threads=spec.threads,
        mesh_axes=axes,
        num_pes=num_pes,
        mesh_axis_sizes=axis_sizes,
    )
    return verify_kernel(ir)


def kernel(
    fn: Callable[..., Any] | None = None,
    *,
    out_shape: Any,
    grid: int | Sequence[int],
    threads: int = 128,
    mesh_axes: str | Sequence[str] | None = None,
    interpret: bool | InterpretOptions | None = None,
    name: str | None = None,
    wait_timeout_s: float | None = None,
) -> Any:
    """Decorator: `fn(*input_refs, *output_refs)` becomes a JAX-callable tile kernel.

    out_shape: a `jax.ShapeDtypeStruct` (or a tuple of them) per output, per device.
    grid: blocks along up to 3 axes; `T.program_id(i)` is the index along axis i.
    threads: threads per block.
    mesh_axes: the shard_map mesh axes whose devices form the kernel's PE space (row-major);
      default: all axes of the enclosing shard_map.
    interpret: True runs the CPU interpreter on any backend; default: on CPU only. An
      `InterpretOptions` (delivery schedule, timeout, race and coverage checks) implies True.
    wait_timeout_s: on the GPU, a wait (signal_wait_until, wait_*, barriers, collectives) not
      satisfied after this many seconds gives up and the call raises `WaitTimeoutError` naming the
      kernel, the PE, the statement and its line; 0: never. Default: $TILESCALE_WAIT_TIMEOUT_S, else
      60 s (read when the kernel is compiled). The interpreter has its own (InterpretOptions.timeout_s).
    """

    def wrap(f: Callable[..., Any]) -> TileKernel:
        return TileKernel(f, KernelSpec.make(f, out_shape, grid, threads, mesh_axes, interpret, name,
                                                  wait_timeout_s))

    return wrap(fn) if fn is not None else wrap


# --- the primitive --------------------------------------------------------------------------------

tilescale_call_p = Primitive("tilescale_call")
tilescale_call_p.multiple_results = True


@tilescale_call_p.def_abstract_eval
def _abstract_eval(pe_info: Any, *args: Any, call: CallSpec) -> list[jax.core.ShapedArray]:
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
    return [jax.core.ShapedArray(b.shape, b.dtype) for b in k.outputs]


def _lower_interpret(ctx: mlir.LoweringRuleContext, pe_info: Any, *args: Any, call: CallSpec) -> Any:
    """One host callback per device, each with that device's numpy inputs.

    Built on the callback lowering that `io_callback` itself uses, but without `io_callback`'s
    first step, which copies every argument onto CPU device 0: that copy waits for device 0,
    whose thread may be blocked in its own callback waiting for this one (a deadlock seen with
    two executions in flight).
    """
    from .interpret import InterpreterSession

    options = call.interpret if isinstance(call.interpret, InterpretOptions) else InterpretOptions()
    session = InterpreterSession(call.kernel, options)

    def callback(info: np.ndarray, *arrays: np.ndarray) -> tuple[np.ndarray, ...]:
        return tuple(session.run(int(info[0]), int(info[1]), [np.asarray(a) for a in arrays]))

    sharding = jax_callback._callback_op_sharding(ctx.module_context.axis_context, None, ctx.avals_out)
    results, _, _ = jax_callback.emit_python_callback(
        ctx, callback, None, [pe_info, *args], ctx.avals_in, ctx.avals_out,
        has_side_effect=True, returns_token=False, sharding=sharding,
    )
    return results


def _lower_cuda(ctx: mlir.LoweringRuleContext, pe_info: Any, *args: Any, call: CallSpec) -> Any:
    if call.interpret:
        return _lower_interpret(ctx, pe_info, *args, call=call)
    from .codegen import generate_cuda
    from .compiler import compile_cubin
    from .runtime import ensure_initialized, ensure_registered, mesh_pe_table
    from .runtime.wait_timeout import timeout_ns as wait_timeout_ns

    k = call.kernel
    mesh = getattr(ctx.module_context.axis_context, "mesh", None)
    if k.mesh_axes and not hasattr(mesh, "devices"):
        raise LaunchError(f"kernel {k.name}: cannot find the concrete device mesh of the enclosing shard_map")
    ensure_registered()
    if k.uses_nvshmem():
        ensure_initialized()
    if mesh is not None and hasattr(mesh, "devices"):
        pe_table, mesh_shape = mesh_pe_table(mesh)
        names = tuple(mesh.axis_names)
        kernel_axes = [names.index(a) for a in k.mesh_axes]
    else:
        pe_table, mesh_shape, kernel_axes = (jax.process_index(),), (1,), []
    module = generate_cuda(k, arch=_cuda_arch())
    cubin = compile_cubin(module.source, arch=module.arch, entry=module.entry, nvshmem=module.uses_nvshmem)
    staged = staged_flags(k)
    grid3 = tuple(module.grid) + (1,) * (3 - len(module.grid))
    rule = jax.ffi.ffi_lowering("jax_tilescale_launch", has_side_effect=True)
    return rule(
        ctx,
        pe_info,
        *args,
        abi_version=np.int64(ABI_VERSION),
        cubin=str(cubin),
        entry=module.entry,
        grid=np.asarray(grid3, np.int64),
        threads=np.int64(module.threads),
        smem_bytes=np.int64(module.smem_bytes),
        scratch_bytes=np.int64(module.scratch_bytes),
        staged=np.asarray(staged, np.int64),
        pe_table=np.asarray(pe_table, np.int64),
        mesh_shape=np.asarray(mesh_shape, np.int64),
        kernel_axes=np.asarray(kernel_axes, np.int64),
        uses_nvshmem=bool(module.uses_nvshmem),
        grid_barrier=bool(module.grid_barrier),
        wait_timeout_ns=np.int64(wait_timeout_ns(call.wait_timeout_s)),
        tensor_maps=np.asarray(module.tensor_maps, np.int64),
    )


STAGE_COPY_OUT = 1  # the buffer lives in symmetric memory during the launch; copied out after
STAGE_COPY_IN = 2  # the buffer lives in symmetric memory during the launch; copied in before


def staged_flags(k: KernelIR) -> list[int]:
    """The handler's `staged` attribute, one flag per param (docs/calling_convention.md).

    Every global buffer that peers touch must be symmetric during the launch. Outputs that peers
    write or read are staged and copied out afterwards (1): XLA must get what the kernel and its
    peers wrote, and an output has no contents to copy in. Inputs that peers read (gets, loads
    through nvshmem_ptr, remote waits) are staged and copied in before (2). 3 (both) would be an
    input peers also write, which the verifier rejects; the handler accepts it for aliased buffers.
    """
    written, read = k.remote_written(), k.remote_read()
    flags = []
    for b in k.params:
        flag = 0
        if b.kind is BufferKind.OUTPUT and (b in written or b in read):
            flag |= STAGE_COPY_OUT
        if b.kind is BufferKind.INPUT and b in read:
            flag |= STAGE_COPY_IN
        flags.append(flag)
    return flags


@functools.cache
def _cuda_arch() -> str:
    gpus = [d for d in jax.local_devices() if d.platform == "gpu"]
    cc = getattr(gpus[0], "compute_capability", "9.0") if gpus else "9.0"
    return "sm_" + str(cc).replace(".", "")


mlir.register_lowering(tilescale_call_p, _lower_interpret, platform="cpu")
mlir.register_lowering(tilescale_call_p, _lower_cuda, platform="cuda")
