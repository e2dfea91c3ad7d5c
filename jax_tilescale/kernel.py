"""`jax_tilescale.kernel`: a traced tile kernel as a JAX operation.

`@kernel(...)` returns a `TileKernel`. Calling it (inside `jax.jit`, usually inside
`jax.shard_map`) traces the Python kernel into IR for the argument shapes, verifies it, and
binds the `tilescale_call` primitive (`lowering/`: its abstract evaluation, the CPU interpreter
lowering and the CUDA launch lowering).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec

from . import _jax_compat
from .ast_rewrite import rewrite_kernel_function
from .errors import KernelTraceError
from .interpret.options import InterpretOptions
from .ir import KernelIR, format_kernel, verify_kernel
from .ir.nodes import SourceLoc
from .language import control as _control
from .language.tracing import trace_kernel
from .lowering import CallSpec, tilescale_call_p


@dataclass(frozen=True)
class KernelSpec:
    """What `@kernel(...)` was given, normalised (`make`); its invariants are checked here, once."""

    out_shape: tuple[jax.ShapeDtypeStruct, ...]
    out_is_tuple: bool
    grid: tuple[int, ...]
    threads: int
    mesh_axes: tuple[str, ...] | None  # None: every axis of the enclosing shard_map, mesh order
    interpret: bool | InterpretOptions | None  # None: interpret on CPU; options imply True
    name: str
    wait_timeout_s: float | None = None  # None: $TILESCALE_WAIT_TIMEOUT_S, else 60 s (runtime/wait_timeout.py)
    loc: SourceLoc | None = None  # the kernel function's `def` line, for errors
    # Outputs that are the same on every PE of the kernel's PE space (an all-gather's): typed as
    # invariant over its mesh axes, so shard_map accepts `out_specs=P()` for them under check_vma.
    replicated: tuple[int, ...] = ()
    blocks_per_sm: int = 1  # checked with the traced kernel (ir/verify.py)
    pingpong: bool = False  # the Hopper plan's consumer schedule of a persistent tile loop (KernelIR.pingpong)
    cluster: tuple[int, ...] = ()  # blocks per cluster along each grid axis (KernelIR.cluster; () none)
    # input_output_aliases as sorted (input index, output index) pairs; the inputs' range, shapes and
    # dtypes are checked with the arguments (`check_aliases`), the rest here.
    aliases: tuple[tuple[int, int], ...] = ()

    def __post_init__(self) -> None:
        def bad(message: str) -> KernelTraceError:
            return KernelTraceError(message, self.loc)

        if not self.out_shape:
            raise bad("out_shape must name at least one output")
        for o in self.out_shape:
            if not isinstance(o, jax.ShapeDtypeStruct):
                raise bad(f"out_shape entries must be jax.ShapeDtypeStruct, got {o!r}")
        if self.mesh_axes is not None:
            if not all(isinstance(a, str) for a in self.mesh_axes):
                raise bad(f"mesh_axes must be mesh axis names (strings), got {self.mesh_axes!r}")
            if len(set(self.mesh_axes)) != len(self.mesh_axes):
                raise bad(f"mesh_axes {self.mesh_axes} names an axis twice")
        if self.interpret is not None and not isinstance(self.interpret, (bool, InterpretOptions)):
            raise bad(f"interpret must be True, False or a ts.InterpretOptions, got {self.interpret!r}")
        for i in self.replicated:
            if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < len(self.out_shape):
                raise bad(f"replicated must be True, False or output indices in 0..{len(self.out_shape) - 1}, got "
                          f"{self.replicated!r}")
        seen_in: set[int] = set()
        seen_out: set[int] = set()
        for pair in self.aliases:
            if not (isinstance(pair, tuple) and len(pair) == 2 and all(
                    isinstance(x, int) and not isinstance(x, bool) for x in pair)):
                raise bad(f"kernel {self.name}: input_output_aliases must map input indices to output indices "
                          f"(a dict of ints), got the entry {pair!r}")
            i, j = pair
            if i < 0:
                raise bad(f"kernel {self.name}: input_output_aliases {{{i}: {j}}}: input index {i} is negative")
            if not 0 <= j < len(self.out_shape):
                raise bad(f"kernel {self.name}: input_output_aliases {{{i}: {j}}}: output index {j} is out of range "
                          f"(the kernel has {len(self.out_shape)} output(s))")
            if j in seen_out:
                raise bad(f"kernel {self.name}: input_output_aliases names output {j} twice (an output can be "
                          "returned in one input's buffer only)")
            if i in seen_in:  # a dict cannot repeat a key; a list of pairs can
                raise bad(f"kernel {self.name}: input_output_aliases names input {i} twice")
            seen_in.add(i)
            seen_out.add(j)
        t = self.wait_timeout_s
        if t is not None and (isinstance(t, bool) or not isinstance(t, float) or not math.isfinite(t) or t < 0):
            raise bad(f"wait_timeout_s must be a number of seconds >= 0 (0: waits never time out), got {t!r}")

    def check_aliases(self, in_avals: Sequence[tuple[tuple[int, ...], np.dtype]]) -> None:
        """The aliases against the inputs of a call: each input index in range, each pair the same
        shape and dtype (the output is returned in the input's buffer)."""
        for i, j in self.aliases:
            if i >= len(in_avals):
                raise KernelTraceError(
                    f"kernel {self.name}: input_output_aliases {{{i}: {j}}}: input index {i} is out of range "
                    f"(the kernel was called with {len(in_avals)} input(s))", self.loc)
            shape, dtype = in_avals[i]
            out = self.out_shape[j]
            if tuple(shape) != tuple(out.shape) or np.dtype(dtype) != np.dtype(out.dtype):
                raise KernelTraceError(
                    f"kernel {self.name}: input_output_aliases {{{i}: {j}}}: input {i} is "
                    f"{np.dtype(dtype).name}{list(shape)} but output {j} is {np.dtype(out.dtype).name}"
                    f"{list(out.shape)}; an output returned in an input's buffer must have its shape and dtype",
                    self.loc)

    @staticmethod
    def make(fn: Callable[..., Any], out_shape: Any, grid: Any, threads: int, mesh_axes: Any,
             interpret: bool | InterpretOptions | None, name: str | None,
             wait_timeout_s: float | None = None, replicated: bool | Sequence[int] = False,
             blocks_per_sm: int = 1, input_output_aliases: Mapping[int, int] | None = None,
             pingpong: bool = False, cluster: int | Sequence[int] | None = None) -> KernelSpec:
        """The spec of `@kernel(...)`'s arguments: one output or a tuple of them, an int or a tuple grid,
        one axis name or several. The grid and threads are checked with the traced kernel (ir/verify.py)."""
        loc = _fn_loc(fn)
        is_tuple = isinstance(out_shape, (tuple, list))
        outs = tuple(out_shape) if is_tuple else (out_shape,)
        for o in outs:
            if not hasattr(o, "shape") or not hasattr(o, "dtype"):
                raise KernelTraceError(f"out_shape entries must be jax.ShapeDtypeStruct, got {o!r}", loc)
        norm = tuple(jax.ShapeDtypeStruct(tuple(int(d) for d in o.shape), np.dtype(o.dtype)) for o in outs)
        grid_t = (grid,) if isinstance(grid, int) else tuple(grid)
        axes = (mesh_axes,) if isinstance(mesh_axes, str) else None if mesh_axes is None else tuple(mesh_axes)
        wait = wait_timeout_s
        if isinstance(wait, int) and not isinstance(wait, bool):
            wait = float(wait)
        if isinstance(replicated, bool):
            which = tuple(range(len(norm))) if replicated else ()
        elif isinstance(replicated, int):
            which = (replicated,)
        else:
            which = tuple(replicated)
        kernel_name = name or fn.__name__
        aliases = input_output_aliases or {}
        if not isinstance(aliases, Mapping):
            raise KernelTraceError(f"kernel {kernel_name}: input_output_aliases must be a dict {{input index: "
                                   f"output index}}, got {aliases!r}", loc)
        pairs = tuple(aliases.items())
        if not isinstance(pingpong, bool):
            raise KernelTraceError(f"kernel {kernel_name}: pingpong must be True or False, got {pingpong!r}", loc)
        if all(isinstance(x, int) for p in pairs for x in p):
            pairs = tuple(sorted(pairs))  # one spec (and one IR) however the dict was ordered
        return KernelSpec(norm, is_tuple, grid_t, threads, axes, interpret, kernel_name, wait, loc, which,
                          blocks_per_sm, pingpong, _cluster_shape(cluster, grid_t, kernel_name, loc), pairs)


def _cluster_shape(cluster: Any, grid: tuple[int, ...], name: str, loc: SourceLoc | None) -> tuple[int, ...]:
    """`cluster=` as one int per grid axis: an int is the cluster along axis 0, a shorter sequence
    is padded with 1s; no cluster (None, or every axis 1) is (). The grid is checked with the traced
    kernel (ir/verify_cluster.py)."""
    if cluster is None:
        return ()
    shape = (cluster,) if isinstance(cluster, int) and not isinstance(cluster, bool) else cluster
    if not isinstance(shape, (tuple, list)) or not all(
            isinstance(c, int) and not isinstance(c, bool) and c >= 1 for c in shape) or len(shape) > len(grid):
        raise KernelTraceError(f"kernel {name}: cluster must be a positive int or one positive int per grid axis "
                               f"(at most {len(grid)} for the grid {grid}), got {cluster!r}", loc)
    shape = tuple(shape) + (1,) * (len(grid) - len(shape))
    return () if all(c == 1 for c in shape) else shape


def _fn_loc(fn: Callable[..., Any]) -> SourceLoc | None:
    code = getattr(fn, "__code__", None)
    return SourceLoc(code.co_filename, code.co_firstlineno, code.co_name) if code else None


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
        input_vma: tuple[frozenset[str] | None, ...] | None = None,
    ) -> KernelIR:
        """The verified IR for arguments of these shapes (arrays or ShapeDtypeStructs).

        `mesh_axis_sizes` (the size of each mesh axis) may be left out with at most one axis;
        `input_vma` (per input, the mesh axes it varies over, when shard_map checks it) lets `T.view`
        check its layouts against the in_specs."""
        axes = tuple((self.spec.mesh_axes if mesh_axes is None else mesh_axes) or ())
        self._check_arity(len(args))
        if mesh_axis_sizes is None:
            if len(axes) > 1:
                raise KernelTraceError(
                    f"kernel {self.spec.name}: give mesh_axis_sizes= for the mesh axes {axes}", self.spec.loc
                )
            mesh_axis_sizes = (num_pes,) if axes else ()
        avals = tuple((tuple(a.shape), np.dtype(a.dtype)) for a in args)
        self.spec.check_aliases(avals)
        vma = None if input_vma is None else tuple(input_vma)
        return _trace_cached(self, avals, axes, num_pes, tuple(int(n) for n in mesh_axis_sizes), vma)

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
                self.spec.loc,
            )

    def ir_text(self, *args: Any, **kw: Any) -> str:
        return format_kernel(self.trace(*args, **kw), with_locs=True)

    def __call__(self, *args: Any) -> Any:
        scope = _jax_compat.mesh_scope()
        axes = self._kernel_axes(scope)
        arrays = [jnp.asarray(a) for a in args]
        if scope.manual and scope.automatic:
            outs = self._bind_fully_manual(scope, axes, arrays)
        else:
            outs = self._bind(scope, axes, arrays)
        return tuple(outs) if self.spec.out_is_tuple else outs[0]

    def _kernel_axes(self, scope: _jax_compat.MeshScope) -> tuple[str, ...]:
        """The mesh axes of the kernel's PE space, in the order that numbers it (row-major)."""
        axes = self.spec.mesh_axes
        if axes is None:
            return scope.manual
        if axes and not scope.manual:
            raise KernelTraceError(
                f"kernel {self.spec.name} has mesh_axes={axes} but is called outside jax.shard_map; call it "
                "inside shard_map over a mesh with those axes",
                self.spec.loc,
            )
        missing = [a for a in axes if a not in scope.manual]
        if missing:
            raise KernelTraceError(
                f"kernel {self.spec.name}: mesh axes {missing} are not axes of the enclosing shard_map "
                f"(its axes: {list(scope.manual)})",
                self.spec.loc,
            )
        return axes

    def _bind(self, scope: _jax_compat.MeshScope, axes: tuple[str, ...], arrays: list[jax.Array]) -> list[Any]:
        """Traces the kernel for PE space `axes` and binds the primitive (every axis in scope manual)."""
        axis_sizes = tuple(scope.axis_sizes[a] for a in axes)
        # What shard_map's typing says of the inputs' in_specs (only when it checks them).
        vma = tuple(_jax_compat.varying_axes(jax.typeof(a)) & set(axes) for a in arrays) \
            if axes and _jax_compat.check_vma_enabled() else None
        kernel_ir = self.trace(*arrays, mesh_axes=axes, num_pes=math.prod(axis_sizes), mesh_axis_sizes=axis_sizes,
                               input_vma=vma)
        others = tuple(a for a in scope.manual if a not in axes)
        # Row-major over `axes` in the kernel's order, like the interpreter, T.axis_index and the GPU's PE map.
        pe = jax.lax.axis_index(axes) if axes else jnp.int32(0)
        team = jax.lax.axis_index(others) if others else jnp.int32(0)
        pe_info = jnp.stack([jnp.asarray(pe, jnp.int32), jnp.asarray(team, jnp.int32)])
        call = CallSpec(kernel_ir, scope.manual, self.spec.interpret, self.spec.wait_timeout_s, self.spec.replicated)
        return list(tilescale_call_p.bind(pe_info, *arrays, call=call))

    def _bind_fully_manual(
        self, scope: _jax_compat.MeshScope, axes: tuple[str, ...], arrays: list[jax.Array]
    ) -> list[Any]:
        """A call inside a partially manual shard_map (`axis_names=` a subset of the mesh): the kernel's
        PE space is over the manual axes (`axes`); the automatic axes are left to JAX, which gives every
        device the whole array along them. A shard_map over those axes makes the call fully manual
        (what host callbacks and the launch handler need): each of their coordinates runs the kernel
        as its own team, on the same inputs, so the outputs are the same along them."""
        def body(*xs: jax.Array) -> tuple[Any, ...]:
            return tuple(self._bind(_jax_compat.mesh_scope(), axes, list(xs)))

        n_out = len(self.spec.out_shape)
        inner = jax.shard_map(
            body,
            in_specs=(PartitionSpec(),) * len(arrays),
            out_specs=(PartitionSpec(),) * n_out,
            axis_names=set(scope.automatic),
            check_vma=_jax_compat.check_vma_enabled(),
        )
        return list(inner(*arrays))


@functools.lru_cache(maxsize=256)
def _trace_cached(
    k: TileKernel, in_avals: tuple, axes: tuple[str, ...], num_pes: int, axis_sizes: tuple[int, ...],
    input_vma: tuple[frozenset[str] | None, ...] | None = None,
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
        input_vma=input_vma,
        blocks_per_sm=spec.blocks_per_sm,
        pingpong=spec.pingpong,
        cluster=spec.cluster,
    )
    return verify_kernel(dataclasses.replace(ir, aliases=spec.aliases) if spec.aliases else ir)


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
    replicated: bool | Sequence[int] = False,
    blocks_per_sm: int = 1,
    input_output_aliases: Mapping[int, int] | None = None,
    pingpong: bool = False,
    cluster: int | Sequence[int] | None = None,
) -> Any:
    """Decorator: `fn(*input_refs, *output_refs)` becomes a JAX-callable tile kernel.

    out_shape: a `jax.ShapeDtypeStruct` (or a tuple of them) per output, per device.
    grid: blocks along up to 3 axes; `T.program_id(i)` is the index along axis i.
    threads: threads per block.
    mesh_axes: the shard_map mesh axes whose devices form the kernel's PE space, numbered row-major
      in the order given (as `jax.lax.axis_index(mesh_axes)`); default: all manual axes of the
      enclosing shard_map, in mesh order. In a partially manual shard_map (`axis_names=`), only its
      manual axes; each coordinate of the automatic axes runs the kernel on the whole array (on the
      GPU, call it under `with jax.set_mesh(mesh):` so that the launch finds the concrete mesh).
    interpret: True runs the CPU interpreter on any backend; default: on CPU only. An
      `InterpretOptions` (delivery schedule, timeout, race and coverage checks) implies True.
      Errors the interpreter finds are raised in the main thread (lowering/cpu.py).
    wait_timeout_s: on the GPU, a wait (signal_wait_until, wait_*, barriers, collectives) not
      satisfied after this many seconds gives up and the call raises `WaitTimeoutError` naming the
      kernel, the PE, the statement and its line; 0: never. Default: $TILESCALE_WAIT_TIMEOUT_S, else
      60 s (read when the kernel is compiled). The interpreter has its own (InterpretOptions.timeout_s).
    replicated: outputs that hold the same value on every PE of the kernel's PE space when the call
      returns (True: all of them; or their indices), e.g. an all-gather's. Outputs otherwise vary
      over the kernel's mesh axes, as each device's own result (shard_map's check_vma then refuses
      `out_specs=P()` for them, as for any per-device value); replicated ones are typed as invariant
      over those axes, so `out_specs=P()` takes them. The interpreter checks the promise (every PE's
      output bit for bit equal to PE 0's, else KernelRuntimeError); the GPU trusts it.
    blocks_per_sm: on the GPU, how many blocks of this kernel one SM must be able to run at once
      (CUDA's minimum blocks per multiprocessor): the compiler keeps each thread's registers to
      1/blocks_per_sm of the SM's register file over `threads` (the Hopper GEMM plan splits that
      share between its producer and consumers), and the kernel is refused if its shared memory
      does not fit blocks_per_sm times in an SM. 2 lets one block's epilogue overlap another's
      main loop (examples/gemm.py's 128x128 tiles at one-wave shapes). The interpreter ignores it.
    input_output_aliases: `{input index: output index}`, as Pallas's: output j is returned in input
      i's buffer (same shape and dtype), so XLA updates it in place (with the input donated, e.g.
      `jax.jit(..., donate_argnums=)` or a loop carry, without a copy). Inside the kernel the input
      ref and the output ref name the same memory: the output starts with the input's contents,
      elements the kernel does not write keep them, and a read through the input ref sees what was
      written through the output ref (ordered like any other access: the interpreter's race check
      treats the two refs as one buffer). Write through the output ref; the input ref stays
      read-only. Peers may put into or get from either, as for any output or input.
    pingpong: on Hopper, a persistent GEMM whose body is a tile loop (examples/gemm.py's
      `persistent_kernel`) runs its two consumer warpgroups on alternate tiles, each storing its tile
      while the other's main loop keeps the tensor cores busy, instead of both sharing every tile
      (jax_tilescale/codegen/gemm_sm90_pingpong.py says which loops qualify; one that does not is
      built the shared way and the generated source's header says why). A whole tile must fit one
      warpgroup's registers: block_m x block_n at most 128 x 192. The interpreter ignores it.
    cluster: Hopper's thread-block clusters: blocks per cluster along each grid axis (an int: along
      axis 0), at most 8 in all, dividing the grid. A cluster's blocks run at once, each on its own
      SM, and may read and write each other's shared tiles (`T.cluster_tile`, ordered by
      `T.cluster_sync()`; `T.cluster_rank()` is the block's rank in its cluster). The interpreter
      runs them the same way and reports races between them. Needs sm_90 on the GPU.
    """

    def wrap(f: Callable[..., Any]) -> TileKernel:
        return TileKernel(f, KernelSpec.make(f, out_shape, grid, threads, mesh_axes, interpret, name,
                                             wait_timeout_s, replicated, blocks_per_sm, input_output_aliases,
                                             pingpong, cluster))

    return wrap(fn) if fn is not None else wrap
