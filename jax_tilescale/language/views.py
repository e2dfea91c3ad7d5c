"""`T.view(ref, layout)`: a shard_map operand seen as the whole logical array, distributed over
the kernel's PE space, indexed in global coordinates.

Views are lowered while the kernel is traced, into the IR statements that already exist (copies,
`PeerCopy` through `nvshmem_ptr` with a getmem/putmem fallback, blocking puts with signals,
signal waits, atomics, loops and ifs), so the interpreter and the code generator need nothing
new and stay exact (docs/architecture.md, "Views"):

- `T.copy(view[region], tile)`: per owner of the region (a region spanning shards is split), a
  local `copy` when the owner is this PE, else a blocking get of the owner's shard
  (`PeerCopy` GET: loads through `nvshmem_ptr`, `getmem` where that is null); complete on return.
- `T.copy(tile, view[region])`: the same, as stores / puts, to every replica of the region (the
  PEs along the mesh axes the layout does not shard); complete on return.
- `T.atomic_add(view[region], tile)` on a view with no sharded dimension (`T.Replica`): a
  collective reduction; see `atomic_add_view`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from jax.sharding import PartitionSpec

from ..errors import KernelTraceError
from ..ir.buffers import Buffer, BufferKind
from ..ir.control import If
from ..ir.evaluate import evaluate
from ..ir.expr import PE_VAR, CompareKind, Const, Expr, Var, VarKind, affine_form, compare, program_id_var, variables
from ..ir.nodes import (
    SIGNAL_DTYPE,
    Cmp,
    Copy,
    Direction,
    Loop,
    PeerCopy,
    Put,
    Region,
    Scope,
    SignalOp,
    SignalUpdate,
    SignalWait,
    SourceLoc,
    Stmt,
)
from ..ir.ranges import value_range
from ..ir.tile_ops import AtomicKind, AtomicRegion
from .refs import Ref, RegionRef, as_region
from .source import user_source_loc
from .state import TraceState, current_trace


@dataclass(frozen=True)
class NamedLayout:
    """TileScale's layouts: `T.FullRow` (rows sharded over every kernel axis), `T.FullCol`
    (columns sharded so), `T.Replica` (every PE holds the whole array)."""

    name: str

    def __repr__(self) -> str:
        return f"T.{self.name}"


FullRow = NamedLayout("FullRow")
FullCol = NamedLayout("FullCol")
Replica = NamedLayout("Replica")
VIEW_KINDS = frozenset({BufferKind.INPUT, BufferKind.OUTPUT, BufferKind.SYMMETRIC})


@dataclass(frozen=True)
class View:
    """A distributed view: `buffer` is this PE's shard; `dims[d]` the mesh axes sharding dimension
    d (major first); `shape` the global shape."""

    buffer: Buffer
    dims: tuple[tuple[str, ...], ...]
    shape: tuple[int, ...]
    layout: str
    loc: SourceLoc

    def __getitem__(self, index: Any) -> ViewRegion:
        loc = user_source_loc()
        phantom = Buffer(f"view({self.buffer.name})", self.shape, self.buffer.dtype, self.buffer.kind)
        sliced = Ref(phantom)[index]
        region = as_region(sliced, f"view {self.buffer.name} ({self.layout})", loc)
        return ViewRegion(self, region.starts, region.sizes, loc)

    def region(self) -> ViewRegion:
        return ViewRegion(self, tuple(Const(0) for _ in self.shape), self.shape, self.loc)

    def __repr__(self) -> str:
        return f"T.view({self.buffer.name}, {self.layout}) of global shape {list(self.shape)}"


@dataclass(frozen=True)
class ViewRegion:
    """A window of a view in global coordinates."""

    view: View
    starts: tuple[Expr, ...]
    sizes: tuple[int, ...]
    loc: SourceLoc


def is_view(value: Any) -> bool:
    return isinstance(value, (View, ViewRegion))


def _as_view_region(value: Any) -> ViewRegion:
    return value.region() if isinstance(value, View) else value


# ---- T.view ----------------------------------------------------------------------------------


def _spec_dims(layout: Any, ndim: int, state: TraceState, loc: SourceLoc) -> tuple[tuple[str, ...], ...]:
    axes = state.mesh_axes
    if layout is FullRow or layout is FullCol:
        d = 0 if layout is FullRow else 1
        if ndim <= d:
            raise KernelTraceError(f"T.view: {layout!r} needs a buffer of at least {d + 1} dimensions", loc)
        return tuple(tuple(axes) if i == d else () for i in range(ndim))
    if layout is Replica:
        return ((),) * ndim
    if not isinstance(layout, PartitionSpec):
        raise KernelTraceError(
            f"T.view: layout must be T.FullRow, T.FullCol, T.Replica or a PartitionSpec over the kernel's mesh "
            f"axes {axes}, got {layout!r}",
            loc,
        )
    if len(layout) > ndim:
        raise KernelTraceError(f"T.view: {layout} has {len(layout)} entries for a {ndim}-dimensional buffer", loc)
    dims: list[tuple[str, ...]] = []
    seen: set[str] = set()
    for entry in (*layout, *(None,) * (ndim - len(layout))):
        names = () if entry is None else (entry,) if isinstance(entry, str) else tuple(entry)
        for name in names:
            if name not in axes:
                raise KernelTraceError(
                    f"T.view: {layout} names {name!r}, which is not one of the kernel's mesh axes {axes}", loc
                )
            if name in seen:
                raise KernelTraceError(f"T.view: {layout} names the axis {name!r} twice", loc)
            seen.add(name)
        dims.append(names)
    return tuple(dims)


def _check_against_specs(buf: Buffer, dims: tuple[tuple[str, ...], ...], layout: str, state: TraceState,
                         loc: SourceLoc) -> None:
    """Where shard_map's typing says how an input varies over the mesh axes (check_vma), a view
    must agree: an axis it shards the input over must be one the input varies over (in_specs
    split the array along it), and a replica must be invariant along the axes it replicates."""
    vma = state.input_vma.get(buf.name)
    if vma is None:
        return
    for d, names in enumerate(dims):
        for a in names:
            if a not in vma:
                raise KernelTraceError(
                    f"T.view({buf.name}, {layout}): dimension {d} is sharded over mesh axis {a!r}, but shard_map's "
                    f"in_specs give every device along {a!r} the same {buf.name} (it does not vary over {a!r})",
                    loc,
                )
    sharded = {a for names in dims for a in names}
    for a in state.mesh_axes:
        if a not in sharded and a in vma:
            raise KernelTraceError(
                f"T.view({buf.name}, {layout}): the layout replicates {buf.name} along mesh axis {a!r}, but "
                f"shard_map's in_specs split it along {a!r} (it varies over {a!r}); shard it in the layout",
                loc,
            )


def view(ref: Ref, layout: Any) -> View:
    """The whole logical array of a shard_map operand (or an output, or a symmetric buffer),
    distributed over the kernel's PE space as `layout` says: `T.FullRow` (dimension 0 sharded over
    the kernel's mesh axes, row-major), `T.FullCol` (dimension 1), `T.Replica` (every PE holds all of
    it) or a `PartitionSpec` over the kernel's mesh axes (`P("x", "y")`: rows over x, columns over
    y; axes left out hold replicas). Its shape is the global one; index it in global coordinates
    and `T.copy` between its regions and local tiles (docs/architecture.md, "Views")."""
    state = current_trace("view")
    loc = user_source_loc()
    if not isinstance(ref, Ref) or ref.buffer.kind not in VIEW_KINDS:
        raise KernelTraceError(
            f"T.view: the first argument must be a whole kernel input, output or T.alloc_symmetric buffer, got {ref!r}",
            loc,
        )
    buf = ref.buffer
    dims = _spec_dims(layout, len(buf.shape), state, loc)
    sizes = dict(zip(state.mesh_axes, state.mesh_axis_sizes))
    shape = tuple(n * math.prod(sizes[a] for a in names) for n, names in zip(buf.shape, dims))
    text = repr(layout) if isinstance(layout, NamedLayout) else str(layout)
    if buf.kind is BufferKind.INPUT:
        _check_against_specs(buf, dims, text, state, loc)
    return View(buf, dims, shape, text, loc)


# ---- lowering ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Piece:
    """The part of a view region held by one owner: per sharded dimension the shard coordinate,
    the start in the owner's shard, the offset in the region and the size."""

    coords: tuple[Expr, ...]
    local_starts: tuple[Expr, ...]
    offsets: tuple[int, ...]
    sizes: tuple[int, ...]


def _dim_pieces(start: Expr, size: int, shard: int, nshards: int, d: int, vr: ViewRegion,
                state: TraceState) -> list[tuple[Expr, Expr, int, int]]:
    """(coordinate, local start, offset, size) of each shard the window [start, start+size) of
    dimension d touches: split statically, or one shard proved for a run-time start."""
    extent = shard * nshards
    rng = value_range(start, state.var_ranges())
    if rng is not None and (rng[0] < 0 or rng[1] + size > extent):
        bad = rng[0] if rng[0] < 0 else rng[1]
        raise KernelTraceError(
            f"the region of view {vr.view.buffer.name} ({vr.view.layout}) can start at {bad} in dimension {d} with "
            f"size {size}, outside its global extent {extent}",
            vr.loc,
        )
    if nshards == 1:
        return [(Const(0), start, 0, size)]
    if isinstance(start, Const):
        out, pos = [], start.value
        while pos < start.value + size:
            coord, local = divmod(pos, shard)
            n = min(shard - local, start.value + size - pos)
            out.append((Const(coord), Const(local), pos - start.value, n))
            pos += n
        return out
    form = affine_form(start)
    g = shard
    if form is not None:
        for c in (*form[0].values(), form[1]):
            g = math.gcd(g, c)
    if form is None or size > g:
        raise KernelTraceError(
            f"the region of view {vr.view.buffer.name} ({vr.view.layout}) in dimension {d} starts at a run-time "
            f"position that may cross the boundary between shards of {shard}; make the start a multiple of the "
            f"region's size {size} and the size a divisor of {shard} (or the start static, which splits it)",
            vr.loc,
        )
    coord = _exact_div(form, shard)
    if coord is None:
        return [(start // shard, start % shard, 0, size)]
    return [(coord, Const(0), 0, size)]  # every term a multiple of the shard: its start


def _exact_div(form: tuple[dict[Expr, int], int], shard: int) -> Expr | None:
    """`start // shard` without the division when every term is a multiple of `shard` (so that
    `axis_index("x") * m` stays `axis_index("x")`), else None."""
    terms, const = form
    if const % shard or any(c % shard for c in terms.values()):
        return None
    out: Expr = Const(const // shard)
    for atom, c in terms.items():
        out = out + atom * (c // shard)
    return out


def _pieces(vr: ViewRegion, state: TraceState) -> list[_Piece]:
    v = vr.view
    sizes = dict(zip(state.mesh_axes, state.mesh_axis_sizes))
    per_dim = []
    for d, (start, size, names) in enumerate(zip(vr.starts, vr.sizes, v.dims)):
        nshards = math.prod(sizes[a] for a in names)
        per_dim.append(_dim_pieces(start, size, v.buffer.shape[d], nshards, d, vr, state))
    out = [_Piece((), (), (), ())]
    for options in per_dim:
        out = [_Piece((*p.coords, c), (*p.local_starts, s), (*p.offsets, o), (*p.sizes, n))
               for p in out for c, s, o, n in options]
    return out


def _my_coord(axis: str, state: TraceState) -> Expr:
    i = state.mesh_axes.index(axis)
    stride = math.prod(state.mesh_axis_sizes[i + 1:])
    index = PE_VAR // stride if stride > 1 else PE_VAR
    return index if i == 0 else index % state.mesh_axis_sizes[i]


def _owner(v: View, coords: Sequence[Expr], replica: dict[str, Expr], state: TraceState) -> Expr:
    """The kernel PE holding shard `coords`; axes the layout does not shard: `replica`'s
    coordinate, else this PE's own (the nearest replica)."""
    if state.num_pes == 1:
        return Const(0)
    axis_coord: dict[str, Expr] = dict(replica)
    for names, coord in zip(v.dims, coords):
        rest = math.prod(state.mesh_axis_sizes[state.mesh_axes.index(a)] for a in names)
        for a in names:
            size = state.mesh_axis_sizes[state.mesh_axes.index(a)]
            rest //= size
            c = coord // rest if rest > 1 else coord
            axis_coord[a] = c % size if a != names[0] else c
    pe: Expr = Const(0)
    for i, a in enumerate(state.mesh_axes):
        stride = math.prod(state.mesh_axis_sizes[i + 1:])
        c = axis_coord.get(a)
        if c is None:
            c = _my_coord(a, state)
        pe = pe + c * stride
    return pe


# Points up to which `_is_me` evaluates an owner over its variables' ranges.
MAX_OWNER_POINTS = 1 << 14


def _is_me(pe: Expr, state: TraceState) -> bool:
    """Whether the owner is provably this PE wherever the statement runs: then the view costs a
    plain copy (no branch). Proved by evaluating it over every point of its variables' ranges."""
    if state.num_pes == 1 or pe is PE_VAR:
        return True
    ranges = state.var_ranges()
    names = sorted(variables(pe), key=repr)
    if PE_VAR not in names or any(v not in ranges for v in names):
        return False
    spans = [range(ranges[v][0], ranges[v][1] + 1) for v in names]
    if math.prod(len(r) for r in spans) > MAX_OWNER_POINTS:
        return False
    try:
        return all(evaluate(pe, dict(zip(names, point))) == point[names.index(PE_VAR)]
                   for point in itertools.product(*spans))
    except Exception:  # an expression the evaluator cannot take without the kernel (a load)
        return False


def _traced(state: TraceState, emit: Callable[[], None]) -> tuple[Stmt, ...]:
    body: list[Stmt] = []
    state.open_bodies.append(body)
    try:
        emit()
    finally:
        state.open_bodies.pop()
    return tuple(body)


def _local_or_remote(state: TraceState, owner: Expr, local: Stmt, remote: Stmt, loc: SourceLoc) -> None:
    if _is_me(owner, state):
        state.emit(local)
        return
    cond = compare(CompareKind.EQ, owner, PE_VAR)
    state.emit(If(cond, (local,), (remote,), loc=loc))


def _sub(r: Region, offsets: Sequence[int], sizes: Sequence[int]) -> Region:
    return Region(r.buffer, tuple(s + o for s, o in zip(r.starts, offsets)), tuple(sizes))


def _tile_region(tile: Any, vr: ViewRegion, pieces: list[_Piece], role: str, loc: SourceLoc) -> Region:
    r = as_region(tile, f"copy: {role}", loc)
    if r.buffer.kind in VIEW_KINDS and not isinstance(tile, (Ref, RegionRef)):
        raise KernelTraceError(f"copy: {role} must be a tile or a buffer", loc)
    if len(pieces) > 1 and r.sizes != vr.sizes:
        raise KernelTraceError(
            f"copy: the view region of shape {list(vr.sizes)} spans {len(pieces)} owners and is split per owner; "
            f"the {role} must then have the same shape, got {list(r.sizes)}",
            loc,
        )
    return r


def _replicas(v: View, state: TraceState) -> tuple[str, ...]:
    sharded = {a for names in v.dims for a in names}
    return tuple(a for a in state.mesh_axes if a not in sharded)


def copy_view(src: Any, dst: Any) -> None:
    """`T.copy` with a view on one side (the other a local tile or buffer); see the module doc."""
    state = current_trace("copy")
    loc = user_source_loc()
    if is_view(src) and is_view(dst):
        raise KernelTraceError("copy: both sides are views; copy through a local tile", loc)
    reading = is_view(src)
    vr = _as_view_region(src if reading else dst)
    pieces = _pieces(vr, state)
    tile = _tile_region(dst if reading else src, vr, pieces, "dst" if reading else "src", loc)
    buf = vr.view.buffer
    if not reading and buf.kind is BufferKind.INPUT:
        raise KernelTraceError(f"copy: the view of {buf.name} is a kernel input, which is read-only", loc)
    replicas = () if reading else _replicas(vr.view, state)

    def emit_pieces(replica: dict[str, Expr]) -> None:
        for p in pieces:
            shard = Region(buf, p.local_starts, p.sizes)
            part = tile if len(pieces) == 1 else _sub(tile, p.offsets, p.sizes)
            owner = _owner(vr.view, p.coords, replica, state)
            if reading:
                local: Stmt = Copy(shard, part, loc=loc)
                remote: Stmt = PeerCopy(part, shard, owner, Direction.GET, Scope.BLOCK, fallback=True, loc=loc)
            else:
                local = Copy(part, shard, loc=loc)
                remote = PeerCopy(shard, part, owner, Direction.PUT, Scope.BLOCK, fallback=True, loc=loc)
            _local_or_remote(state, owner, local, remote, loc)

    if not replicas or state.num_pes == 1:
        emit_pieces({})
        return
    # Every replica: a loop over the PEs along the axes the layout does not shard.
    sizes = [state.mesh_axis_sizes[state.mesh_axes.index(a)] for a in replicas]
    var = _loop_var(state, math.prod(sizes))
    replica: dict[str, Expr] = {}
    rest = math.prod(sizes)
    for a, n in zip(replicas, sizes):
        rest //= n
        c = var // rest if rest > 1 else var
        replica[a] = c % n if a != replicas[0] else c
    body = _traced(state, lambda: emit_pieces(replica))
    state.emit(Loop(var, math.prod(sizes), body, loc=loc))


def _loop_var(state: TraceState, extent: int) -> Var:
    var = Var(VarKind.LOOP, state.next_loop_id)
    state.next_loop_id += 1
    state.loop_ranges[var] = (0, extent - 1)
    return var


def atomic_add_view(dst: Any, src: Any) -> None:
    """`T.atomic_add(view[region], tile)` into a view with no sharded dimension (`T.Replica`, or a
    PartitionSpec naming no axis): every replica of the region gets every PE's tile added. A
    collective: every PE of the kernel calls it for the same region (the same block; not inside a
    loop or branch), and when it returns this PE's replica of the region holds all the PEs' tiles
    added (atomically, so concurrent view atomics of other blocks compose). Lowered to: blocking
    puts of the tile into a symmetric mailbox of each peer with a signal, a wait for the peers'
    tiles, and local atomic adds of the PEs' tiles in PE order (every replica adds in the same order:
    with nothing else adding into the region, the replicas are equal bit for bit)."""
    state = current_trace("atomic_add")
    loc = user_source_loc()
    vr = _as_view_region(dst)
    v = vr.view
    if any(v.dims):
        raise KernelTraceError(
            f"atomic_add into the view of {v.buffer.name} ({v.layout}): only views with no sharded dimension "
            "(T.Replica) reduce; for a sharded view add into the owner's shard with explicit transfers",
            loc,
        )
    if v.buffer.kind is BufferKind.INPUT:
        raise KernelTraceError(f"atomic_add: the view of {v.buffer.name} is a kernel input, which is read-only", loc)
    if state.open_bodies:
        raise KernelTraceError(
            "atomic_add into a view is a collective of the PEs (one instance per block): call it at the kernel's "
            "top level, not inside a loop or a branch",
            loc,
        )
    if any(PE_VAR in variables(s) for s in vr.starts):
        raise KernelTraceError(
            "atomic_add into a view: every PE must add into the same region, but its start depends on the PE", loc
        )
    tile = as_region(src, "atomic_add: value", loc)
    target = Region(v.buffer, vr.starts, vr.sizes)
    npes = state.num_pes
    if npes == 1:
        state.emit(AtomicRegion(AtomicKind.ADD, target, tile, loc=loc))
        return
    blocks = math.prod(state.grid)
    block, _ = _block_index(state)
    name = state.fresh_name(f"{v.buffer.name}_mailbox")
    mailbox = Buffer(name, (blocks, npes, *tile.sizes), tile.buffer.dtype, BufferKind.SYMMETRIC)
    signals = Buffer(state.fresh_name(f"{v.buffer.name}_arrived"), (blocks,), SIGNAL_DTYPE, BufferKind.SIGNAL)
    state.allocs += [mailbox, signals]
    zeros = tuple(Const(0) for _ in tile.sizes)

    def slot(pe: Expr) -> Region:
        return Region(mailbox, (block, pe, *zeros), (1, 1, *tile.sizes))

    word = Region(signals, (block,), (1,))
    send_var = _loop_var(state, npes)
    put = Put(slot(PE_VAR), tile, send_var, Scope.BLOCK, True, SignalUpdate(word, Const(1), SignalOp.ADD), loc=loc)
    others = compare(CompareKind.NE, send_var, PE_VAR)
    state.emit(Loop(send_var, npes, (If(others, (put,), loc=loc),), loc=loc))
    state.emit(SignalWait(word, Cmp.GE, Const(npes - 1), loc=loc))
    # In PE order, this PE's tile in its turn: every replica sums in the same order (the same bits).
    add_var = _loop_var(state, npes)
    own = AtomicRegion(AtomicKind.ADD, target, tile, loc=loc)
    peer = AtomicRegion(AtomicKind.ADD, target, slot(add_var), loc=loc)
    state.emit(Loop(add_var, npes, (If(compare(CompareKind.EQ, add_var, PE_VAR), (own,), (peer,), loc=loc),),
                    loc=loc))


def _block_index(state: TraceState) -> tuple[Expr, int]:
    index: Expr = program_id_var(0)
    stride = state.grid[0]
    for axis in range(1, len(state.grid)):
        index = index + program_id_var(axis) * stride
        stride *= state.grid[axis]
    return index, stride


__all__ = ["FullCol", "FullRow", "Replica", "View", "ViewRegion", "atomic_add_view", "copy_view", "is_view", "view"]
