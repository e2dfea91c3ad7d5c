"""The harness every example and many tests share: random inputs that every process can build,
references computed on the host, shard-by-shard checks, and the `main` an example ends with.

Nothing here runs an XLA collective across devices, so an example checks itself the same way on
simulated CPU devices, on one GPU per process, and with two processes (PEs) sharing one GPU (where
NCCL refuses to run): every process builds the same global inputs on the host from a seed, places
only its own shards (`place`), computes the global reference on its host CPU (`on_host`,
`lax_on_host`: jax.lax collectives under nested `jax.vmap`, which mean what they mean under
`shard_map`), and compares each of its shards with the same window of the reference (`compare`).

An example ends like this (examples/allgather.py, shortened):

    def check(mesh, m: int = 256, n: int = 128, dtype: str = "float16", seed: int = 0) -> ts.testing.Verdict:
        x = ts.testing.random_array(seed, (mesh.size * m, n), dtype)
        got = gather_fn(mesh, m, n, dtype)(ts.testing.place(x, mesh, P("x")))
        (want,) = ts.testing.lax_on_host(lambda a: jax.lax.all_gather(a, "x", tiled=True), mesh, P("x"), P(None))(x)
        return ts.testing.compare(got, want, "every element equal to jax.lax.all_gather")

    if __name__ == "__main__":
        ts.testing.main(check, mesh=ts.platform.line(min_devices=2))  # options --m --n --dtype --seed
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import inspect
import itertools
import math
import sys
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from . import platform as _platform
from .errors import LaunchError

EXIT_CHECK_FAILED = 1  # a check compared and found a difference
EXIT_CANNOT_RUN = 2  # the run cannot be made as asked (devices, mesh, arguments): nothing was checked

# `jax.jit(..., compiler_options=LOOP_GRAPH_OPTIONS)`: XLA's default command-buffer kinds plus WHILE and
# CONDITIONAL, and no minimum size, so that a whole `fori_loop` of graph-safe launches is recorded as one CUDA
# graph with a conditional node and replayed without returning to the host every iteration (a per-jit option
# sets the whole list; it does not add to XLA's). Tests of replayed launches and benchmarks/bench_gemm.py's
# "graph" column use it.
LOOP_GRAPH_OPTIONS = {
    "xla_gpu_enable_command_buffer": "FUSION,CUBLAS,CUBLASLT,CUSTOM_CALL,CUDNN,DYNAMIC_SLICE_FUSION,WHILE,CONDITIONAL",
    "xla_gpu_graph_min_graph_size": 1,
}


# --- examples -------------------------------------------------------------------------------------
def sibling(script: str, name: str) -> types.ModuleType:
    """The example `name`.py next to the script `script` (a caller's `__file__`), imported once as the module
    `examples_<name>` (examples are scripts, not a package; tests/conftest.load_example names them the same way, so
    a test and an example share one module)."""
    key = f"examples_{name}"
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, Path(script).with_name(f"{name}.py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[key] = module
        spec.loader.exec_module(module)
    return sys.modules[key]


# --- inputs ---------------------------------------------------------------------------------------
def random_array(seed: int | np.random.Generator, shape: Sequence[int], dtype: Any, scale: float = 1.0) -> np.ndarray:
    """Standard normal values times `scale`, rounded to `dtype`, from numpy's generator: the same
    array in every process for the same seed (pass one Generator to draw several arrays)."""
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    return (scale * rng.standard_normal(tuple(shape), dtype=np.float32)).astype(jnp.dtype(dtype))


def place(host: np.ndarray, mesh: jax.sharding.Mesh, spec: PartitionSpec) -> jax.Array:
    """`host` (the global array, the same in every process) as a jax.Array sharded by `spec` over
    `mesh`. Each process places only the shards of its own devices: no transfer between processes."""
    host = np.asarray(host)
    return jax.make_array_from_callback(host.shape, NamedSharding(mesh, spec), lambda index: host[index])


# --- references -----------------------------------------------------------------------------------
def ring(n: int, shift: int = 1) -> list[tuple[int, int]]:
    """jax.lax.ppermute's pairs for "every PE sends to the PE `shift` further along a ring of n"."""
    return [(i, (i + shift) % n) for i in range(n)]


def on_host(fn: Callable[..., Any], *arrays: np.ndarray) -> tuple[np.ndarray, ...]:
    """`fn` (a JAX function) applied to numpy arrays on this process's CPU, results as numpy arrays."""
    cpu = jax.local_devices(backend="cpu")[0]
    outs = jax.jit(fn)(*(jax.device_put(np.asarray(a), cpu) for a in arrays))
    return tuple(np.asarray(o) for o in (outs if isinstance(outs, (tuple, list)) else (outs,)))


def lax_on_host(
    body: Callable[..., Any],
    mesh: jax.sharding.Mesh,
    in_specs: PartitionSpec | Sequence[PartitionSpec],
    out_specs: PartitionSpec | Sequence[PartitionSpec],
) -> Callable[..., tuple[np.ndarray, ...]]:
    """`jax.shard_map(body, mesh, in_specs, out_specs)` computed on this process's CPU: global numpy
    inputs in, global numpy outputs out (always a tuple). Each mesh axis becomes a `jax.vmap` axis
    of the same name, so the jax.lax collectives and axis_index in `body` keep their meaning; an
    output replicated over an axis is taken from that axis's first device, as shard_map does."""
    axes = tuple(mesh.axis_names)
    sizes = tuple(int(mesh.shape[a]) for a in axes)
    ins = (in_specs,) if isinstance(in_specs, PartitionSpec) else tuple(in_specs)
    outs = (out_specs,) if isinstance(out_specs, PartitionSpec) else tuple(out_specs)
    per_device = body
    for name in reversed(axes):  # the first axis outermost, as the stacked blocks are laid out
        per_device = jax.vmap(per_device, axis_name=name)

    def run(*arrays: np.ndarray) -> tuple[np.ndarray, ...]:
        if len(arrays) != len(ins):
            raise TypeError(f"lax_on_host: {len(arrays)} arrays for {len(ins)} in_specs")
        blocks = [_split(np.asarray(a), spec, axes, sizes) for a, spec in zip(arrays, ins)]
        results = on_host(per_device, *blocks)
        if len(results) != len(outs):
            raise TypeError(f"lax_on_host: the body returned {len(results)} arrays for {len(outs)} out_specs")
        return tuple(_join(r, spec, axes, sizes) for r, spec in zip(results, outs))

    return run


def ppermute_on_host(x: np.ndarray, mesh: jax.sharding.Mesh, spec: PartitionSpec, axis: str,
                     shift: int = 1) -> np.ndarray:
    """jax.lax.ppermute of `x` (sharded by `spec`) to the PE `shift` further along a ring of mesh
    axis `axis`, computed on the host (lax_on_host)."""
    ring_pairs = ring(int(mesh.shape[axis]), shift)
    (out,) = lax_on_host(lambda a: jax.lax.ppermute(a, axis, ring_pairs), mesh, spec, spec)(x)
    return out


def _spec_axes(spec: PartitionSpec, ndim: int) -> list[tuple[str, ...]]:
    """The mesh axes that split each of `ndim` dimensions (empty: not split)."""
    entries = list(spec) + [None] * (ndim - len(spec))
    return [() if e is None else ((e,) if isinstance(e, str) else tuple(e)) for e in entries]


def _block_slices(shape: Sequence[int], spec: PartitionSpec, coord: dict[str, int], sizes: dict[str, int],
                  per_block: bool) -> tuple[slice, ...]:
    """The window of the device at `coord` in an array of `shape` (global, or one block's if per_block)."""
    out = []
    for dim, names in zip(shape, _spec_axes(spec, len(shape))):
        count = math.prod(sizes[a] for a in names)
        index = 0
        for a in names:  # row-major over the axes of this dimension, as shard_map numbers blocks
            index = index * sizes[a] + coord[a]
        if not per_block and dim % count:
            raise ValueError(f"dimension {dim} does not split into {count} blocks ({spec})")
        size = dim if per_block else dim // count
        out.append(slice(index * size, (index + 1) * size))
    return tuple(out)


def _split(array: np.ndarray, spec: PartitionSpec, axes: tuple[str, ...], sizes: tuple[int, ...]) -> np.ndarray:
    """[*mesh sizes, *block]: each device's block of the global `array`."""
    named = dict(zip(axes, sizes))
    blocks = [array[_block_slices(array.shape, spec, dict(zip(axes, c)), named, False)]
              for c in itertools.product(*(range(s) for s in sizes))]
    return np.stack(blocks).reshape(*sizes, *blocks[0].shape)


def _join(stacked: np.ndarray, spec: PartitionSpec, axes: tuple[str, ...], sizes: tuple[int, ...]) -> np.ndarray:
    """The global array from [*mesh sizes, *block] (the inverse of _split)."""
    named = dict(zip(axes, sizes))
    block_shape = stacked.shape[len(axes):]
    split = _spec_axes(spec, len(block_shape))
    used = {a for names in split for a in names}
    glob = np.empty([d * math.prod(named[a] for a in names) for d, names in zip(block_shape, split)], stacked.dtype)
    for c in itertools.product(*(range(s) for s in sizes)):
        coord = dict(zip(axes, c))
        if any(coord[a] for a in axes if a not in used):
            continue  # replicated over this axis: its first device's block stands for all
        starts = _block_slices(block_shape, spec, coord, named, True)
        glob[starts] = stacked[c]
    return glob


# --- checks ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Verdict:
    """The outcome of a check: what was compared, whether it held, and the numbers behind it.
    True in a boolean context when it held, so tests `assert example.check(...)`; `a & b` holds
    when both do and reports each."""

    what: str
    ok: bool
    detail: str = ""
    parts: tuple[Verdict, ...] = ()  # the checks a combined verdict is made of

    def __bool__(self) -> bool:
        return self.ok

    def __and__(self, other: Verdict) -> Verdict:
        parts = (*(self.parts or (self,)), *(other.parts or (other,)))
        return Verdict(" and ".join(p.what for p in parts), all(p.ok for p in parts), parts=parts)

    def __str__(self) -> str:
        if self.parts:
            return "\n".join(str(p) for p in self.parts)
        return f"{self.what}: {self.ok}" + (f" ({self.detail})" if self.detail else "")


def local_shards(x: jax.Array) -> list[np.ndarray]:
    """This process's shards of `x`, as float64 numpy arrays, in device order."""
    shards = sorted(x.addressable_shards, key=lambda s: s.device.id)
    return [np.asarray(s.data).astype(np.float64) for s in shards]


def compare(
    got: jax.Array | Sequence[jax.Array],
    want: np.ndarray | Sequence[np.ndarray],
    what: str,
    *,
    atol: float = 0.0,
    rtol: float = 0.0,
    atol_of_max: float = 0.0,
) -> Verdict:
    """Every shard this process holds of each `got` against the same window of the global host
    reference `want` (exact by default: data movement is exact). Element-wise |got - want| <=
    atol + atol_of_max * max|want| + rtol * |want|, in float64; NaN never passes, so an unwritten
    (poisoned) output element is caught."""
    gots = [got] if isinstance(got, jax.Array) else list(got)
    wants = [want] if isinstance(want, np.ndarray) else list(want)
    if len(gots) != len(wants):
        raise ValueError(f"compare: {len(gots)} results for {len(wants)} references")
    ok, shards, elements, worst = True, 0, 0, 0.0
    for g, w in zip(gots, wants):
        w = np.asarray(w).astype(np.float64)
        if tuple(g.shape) != w.shape:
            return Verdict(what, False, f"shape {tuple(g.shape)}, reference {w.shape}")
        bound = atol + atol_of_max * (float(np.max(np.abs(w))) if w.size else 0.0)
        for shard in g.addressable_shards:
            data = np.asarray(shard.data).astype(np.float64)
            ref = w[shard.index]
            err = np.abs(data - ref)
            ok &= bool(np.all(err <= bound + rtol * np.abs(ref)))  # False on NaN
            worst = max(worst, float(np.nanmax(err)) if err.size else 0.0)
            if np.isnan(err).any():
                worst = math.nan
            shards, elements = shards + 1, elements + data.size
    procs = jax.process_count()
    where = f"{shards} shard{'s' if shards != 1 else ''}" + (f" of process {jax.process_index()}" if procs > 1 else "")
    allowed = (f", allowed {bound:.3g}" if bound else "") + (f" + {rtol:g} |reference|" if rtol else "")
    return Verdict(what, ok, f"{where}, {elements} elements, max |error| {worst:.3g}{allowed}")


def check_shift(run: Callable[[jax.Array], Any], mesh: jax.sharding.Mesh, rows: int, cols: int, dtype: Any,
                seed: int, axis: str = "x") -> Verdict:
    """`run`, a jitted program over mesh axis `axis` whose input is sharded by rows (`rows` x `cols`
    per PE), on random data: each of its outputs must equal jax.lax.ppermute of the input to the
    next PE along `axis` (computed on the host), every element."""
    x = random_array(seed, (mesh.size * rows, cols), dtype)
    got = run(place(x, mesh, PartitionSpec(axis)))
    outs = tuple(got) if isinstance(got, (tuple, list)) else (got,)
    want = ppermute_on_host(x, mesh, PartitionSpec(axis), axis)
    what = "every element" + (f" of the {len(outs)} outputs" if len(outs) > 1 else "")
    return compare(outs, (want,) * len(outs), f"{what} equal to jax.lax.ppermute")


def allclose(got: Any, want: Any, rtol: float = 0.0, atol: float = 0.0) -> bool:
    """Two jax.Arrays of the same sharding compared shard by shard (exact by default); NaN never passes."""
    ok = True
    for g, w in zip(local_shards(got), local_shards(want)):
        ok &= g.shape == w.shape and bool(np.all(np.abs(g - w) <= atol + rtol * np.abs(w)))
    return ok


# --- the entry point of an example ----------------------------------------------------------------
MeshChoice = _platform.MeshPlan | Mapping[str, _platform.MeshPlan] | None


def main(
    check: Callable[..., Verdict],
    *,
    mesh: MeshChoice,
    defaults: Mapping[str, Any] | None = None,
    gpu_defaults: Mapping[str, Any] | None = None,
    option_help: Mapping[str, str] | None = None,
    argv: Sequence[str] | None = None,
) -> NoReturn:
    """Runs an example from the command line and exits: 0 when its check held, 1 when it did not,
    2 when it cannot run as asked (too few devices, a mesh they do not make), with a message.

    Options come from `check`'s keyword parameters (`--name`, typed by their annotations: int,
    float, str, bool, Literal[...] choices), with the check's defaults, else `defaults`, overridden
    on GPUs by `gpu_defaults`; `option_help` gives them a sentence. `mesh` is what the check runs on:
    a MeshPlan (built from every device, or refused with what it needs), several by name (a
    `--mesh` choice), or None for a check that takes no mesh (it runs on one device). Every
    example also takes `--cpu-devices N`: the simulated devices when there is no GPU (default 4,
    1 without a mesh, or XLA_FLAGS' --xla_force_host_platform_device_count when set).
    The lead process prints where it ran, the arguments and the verdict; each process checks the
    shards it holds, and any process whose check fails exits non-zero (the launcher reports it).
    """
    name = _script_name(check)
    args, fallback = _parse(check, mesh, defaults or {}, gpu_defaults or {}, option_help or {}, argv)
    try:
        # a check without a mesh uses one device: simulate only that one unless asked otherwise
        cpu_devices = args.cpu_devices or (1 if mesh is None else _platform.DEFAULT_CPU_DEVICES)
        plat = _platform.setup(cpu_devices=cpu_devices, replace=args.cpu_devices is not None)
    except LaunchError as e:
        _cannot_run(name, str(e))
    # what the user gave, else the GPU default on GPUs, else the check's (or `defaults`')
    chosen = {**fallback, **((gpu_defaults or {}) if plat.kind == "gpu" else {})}
    values = {p: chosen.get(p) if getattr(args, p) is None else getattr(args, p) for p in fallback}
    missing = [p for p, v in values.items() if v is None]
    if missing:
        _cannot_run(name, f"no value for {', '.join('--' + p.replace('_', '-') for p in missing)}")
    plan = mesh[args.mesh] if isinstance(mesh, Mapping) else mesh
    if plan is None:
        where, run = plat.describe(used=1), check
    else:
        try:
            grid = plan.make(jax.devices())
        except LaunchError as e:
            hint = ("launch one process per GPU: python -m jax_tilescale.launch -n N " + " ".join(sys.argv)
                    if plat.kind == "gpu" else "change the simulated devices with --cpu-devices N")
            _cannot_run(name, f"{e} ({plat.describe()}); {hint}")
        where, run = f"{plat.describe(used=grid.size)}, mesh {dict(grid.shape)}", functools.partial(check, grid)
    verdict = run(**values)
    if plat.is_lead:
        print(f"{name}: ran on {where}")
        print(f"{name}: " + " ".join(f"{k}={v}" for k, v in values.items()))
        for line in str(verdict).splitlines():
            print(f"{name}: {line}")
    if not verdict:
        if not plat.is_lead:
            print(f"{name}: process {plat.process_index}: {verdict}", file=sys.stderr)
        raise SystemExit(EXIT_CHECK_FAILED)
    raise SystemExit(0)


def _script_name(check: Callable[..., Any]) -> str:
    module = sys.modules.get(check.__module__)
    path = getattr(module, "__file__", None) or check.__module__
    return path.rsplit("/", 1)[-1].removesuffix(".py")


def _cannot_run(name: str, why: str) -> NoReturn:
    print(f"{name}: cannot run: {why}", file=sys.stderr)
    raise SystemExit(EXIT_CANNOT_RUN)


def _parse(check: Callable[..., Any], mesh: MeshChoice, defaults: Mapping[str, Any],
           gpu_defaults: Mapping[str, Any], option_help: Mapping[str, str],
           argv: Sequence[str] | None) -> tuple[argparse.Namespace, dict[str, Any]]:
    """The command line (one option per keyword parameter of `check`, plus --mesh and --cpu-devices)
    and each parameter's default when the option is not given (None: no default)."""
    module = sys.modules.get(check.__module__)
    ap = argparse.ArgumentParser(description=getattr(module, "__doc__", None),
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    try:
        hints = typing.get_type_hints(check)
    except NameError:  # an annotation that does not resolve: types from the defaults
        hints = {}
    fallback: dict[str, Any] = {}
    for p in inspect.signature(check).parameters.values():
        if p.name == "mesh" or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        default = p.default if p.default is not p.empty else defaults.get(p.name)
        kind = hints.get(p.name, type(default) if default is not None else str)
        text = option_help.get(p.name, "")
        text += f" (default: {default}" + (f"; on GPUs {gpu_defaults[p.name]}" if p.name in gpu_defaults else "") + ")"
        flag = "--" + p.name.replace("_", "-")
        if typing.get_origin(kind) is typing.Literal:  # None: not given (the default is applied after set-up)
            ap.add_argument(flag, dest=p.name, choices=typing.get_args(kind), default=None, help=text)
        elif kind is bool:
            ap.add_argument(flag, dest=p.name, action=argparse.BooleanOptionalAction, default=None, help=text)
        else:
            ap.add_argument(flag, dest=p.name, type=kind, default=None, help=text)
        fallback[p.name] = default
    if isinstance(mesh, Mapping):
        ap.add_argument("--mesh", choices=list(mesh), default=next(iter(mesh)),
                        help="; ".join(f"{k}: axes {v.axes}, {v.needs}" for k, v in mesh.items()))
    else:
        ap.set_defaults(mesh=None)
        ap.epilog = "Runs on one device." if mesh is None else f"Needs {mesh.needs} (mesh axes {mesh.axes})."
    ap.add_argument("--cpu-devices", type=int, default=None,
                    help=f"simulated CPU devices when there is no GPU (default {_platform.DEFAULT_CPU_DEVICES}, or "
                    "XLA_FLAGS' --xla_force_host_platform_device_count when set)")
    return ap.parse_args(argv), fallback
