"""The verifier: every invariant of a traced kernel, checked in one place.

Rules are looked up by statement type in `STMT_RULES`; a new statement registers its rule here.
Errors name the user's source line. Range checks are exact (affine index expressions over the
known ranges of block index and PE); what cannot be decided statically is left to the
interpreter and to the run-time checks of the generated code.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from ..errors import KernelTraceError
from .control import (
    If,
    LocalStore,
    check_thread_context,
    guarded,
    guarded_loads,
    guards_keep_in_bounds,
    verify_if,
    verify_local_store,
)
from .expr import Expr, Var, VarKind, format_expr, value_bounds, value_range, variables
from .nodes import (
    BLOCK_LOCAL,
    CLIP_KINDS,
    REMOTE_READABLE,
    REMOTE_WRITABLE,
    WAIT_WORD_KINDS,
    BarrierAll,
    Broadcast,
    BufferKind,
    Copy,
    Direction,
    Fcollect,
    Fence,
    Fill,
    Gemm,
    Get,
    KernelIR,
    Loop,
    PeerCopy,
    Put,
    Quiet,
    Region,
    RemoteSignal,
    Scope,
    SignalWait,
    SourceLoc,
    Stmt,
    TeamBarrier,
    WaitUntil,
    stmt_exprs,
)
from .trace import LOADABLE_DTYPES

Ranges = dict[Var, tuple[int, int]]
# Where the data of a transfer may land on its own PE (inputs are read-only, signals are words).
LOCAL_WRITABLE = frozenset({BufferKind.OUTPUT, BufferKind.SHARED, BufferKind.SYMMETRIC})
WAIT_WORD_BYTES = (4, 8)

MAX_GRID_DIMS = 3
MAX_THREADS = 1024


def var_ranges(kernel: KernelIR, loop: Loop | None = None) -> Ranges:
    """Ranges of the block index and PE; with `loop`, also of the variables of the loops that
    enclose `loop`'s body (and of `loop` itself)."""
    ranges = {Var(VarKind.PROGRAM_ID, i): (0, g - 1) for i, g in enumerate(kernel.grid)}
    ranges[Var(VarKind.PE)] = (0, kernel.num_pes - 1)
    if loop is not None:
        for s in _enclosing_loops(kernel.body, loop) or ():
            ranges[s.var] = (0, s.extent - 1)
    return ranges


def _enclosing_loops(body: tuple[Stmt, ...], target: Loop) -> list[Loop] | None:
    for s in body:
        if isinstance(s, Loop):
            if s is target:
                return [s]
            inner = _enclosing_loops(s.body, target)
            if inner is not None:
                return [s, *inner]
    return None


def _squeezed(shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(d for d in shape if d != 1)


def overhanging_dims(region: Region, ranges: Ranges) -> tuple[int, ...]:
    """The dimensions along which `region` may extend past the end of its buffer: where the bounds
    of its start (over `ranges`; interval arithmetic where the start is not affine) allow
    start + size > extent, or are not known (a T.load). One-element dimensions never qualify:
    such a window is inside or has nothing inside."""
    out = []
    for dim, (start, size, extent) in enumerate(zip(region.starts, region.sizes, region.buffer.shape)):
        rng = value_bounds(start, ranges)
        if size > 1 and (rng is None or rng[1] + size > extent):
            out.append(dim)
    return tuple(out)


def _check_region(
    region: Region, ranges: Ranges, what: str, loc: SourceLoc, clip_dims: tuple[int, ...] = ()
) -> None:
    """`region` lies inside its buffer where its starts' ranges are known; along `clip_dims` (a
    clipped T.copy) it need only start inside: [start, start + size) may end past the extent."""
    buf = region.buffer
    if len(region.starts) != len(buf.shape):
        raise KernelTraceError(
            f"{what}: {buf.name} has {len(buf.shape)} dimensions, the slice {len(region.starts)}", loc
        )
    for dim, (start, size, extent) in enumerate(zip(region.starts, region.sizes, buf.shape)):
        rng = value_range(start, ranges)
        if rng is None:
            continue
        lo, hi = rng
        if dim in clip_dims and lo >= 0 and hi >= extent:
            raise KernelTraceError(
                f"{what}: the window of {buf.name} along dimension {dim} starts at {format_expr(start)}, which can be "
                f"{hi}, at or past the end of the buffer (extent {extent}): a window may end past its buffer but "
                f"must start inside it (the start ranges over [{lo}, {hi}]; is the grid or the loop too large?)",
                loc,
            )
        if dim in clip_dims and lo >= 0:
            continue
        if (lo < 0 or hi + size > extent) and not guards_keep_in_bounds(start, size, extent, ranges):
            bad = lo if lo < 0 else hi
            raise KernelTraceError(
                f"{what}: the slice of {buf.name} along dimension {dim} starts at {format_expr(start)}, which can be "
                f"{bad}; with size {size} it leaves [0, {extent}) (the start ranges over [{lo}, {hi}])",
                loc,
            )


def _check_same_shape(a: Region, b: Region, what: str, loc: SourceLoc, cast: bool = False) -> None:
    if _squeezed(a.shape) != _squeezed(b.shape):
        raise KernelTraceError(f"{what}: shapes differ: {a} is {list(a.shape)}, {b} is {list(b.shape)}", loc)
    if a.buffer.dtype != b.buffer.dtype and not cast:
        raise KernelTraceError(
            f"{what}: dtypes differ: {a.buffer.name} is {a.buffer.dtype.name}, {b.buffer.name} is "
            f"{b.buffer.dtype.name} (only T.copy to or from a T.alloc_fragment tile casts)",
            loc,
        )


def _check_pe(pe: Expr, kernel: KernelIR, ranges: Ranges, op: str, loc: SourceLoc, what: str = "PE") -> None:
    rng = value_range(pe, ranges)
    if rng is None:
        return
    lo, hi = rng
    if lo < 0 or hi >= kernel.num_pes:
        bad = lo if lo < 0 else hi
        raise KernelTraceError(
            f"{op}: {what} out of range: {what.lower()}={format_expr(pe)} can be {bad}, but the kernel's PE space "
            f"{kernel.mesh_axes} has {kernel.num_pes} PEs (0..{kernel.num_pes - 1})",
            loc,
        )


def _check_signal_word(word: Region, op: str, loc: SourceLoc) -> None:
    if word.buffer.kind is not BufferKind.SIGNAL:
        raise KernelTraceError(f"{op}: the signal must be a word of T.alloc_signal(...), got {word.buffer}", loc)
    if word.size != 1:
        raise KernelTraceError(f"{op}: the signal must be one word, e.g. sig[i]; got {word} of {word.size} words", loc)


def _check_kind(region: Region, kinds: frozenset[BufferKind], op: str, role: str, why: str, loc: SourceLoc) -> None:
    if region.buffer.kind not in kinds:
        allowed = ", ".join(sorted(k.value for k in kinds))
        raise KernelTraceError(
            f"{op}: the {role} {region.buffer.name} is a {region.buffer.kind.value} buffer; {why} ({allowed})", loc
        )


def _check_not_signal(s: Stmt, *regions: Region) -> None:
    for r in regions:
        if r.buffer.kind is BufferKind.SIGNAL:
            raise KernelTraceError(
                f"{s.op_name}: {r.buffer.name} holds signal words, which are updated and waited for, not moved as data",
                s.loc,
            )


def _check_scope(s: Stmt, scope: Scope, allowed: tuple[Scope, ...]) -> None:
    if scope not in allowed:
        names = ", ".join(a.value for a in allowed)
        raise KernelTraceError(f"{s.op_name}: scope {scope.value} is not available here (only {names})", s.loc)


def _check_loads(s: Stmt, ranges: Ranges) -> None:
    """Every `T.load` in the statement reads an integer input inside its bounds (where affine),
    where the conditions around it hold (`j < n and x[j] > 0` reads x[j] only for j < n)."""
    for ld, known in guarded_loads(s):
        buf = ld.buffer
        # Inputs (T.load) and per-thread registers (ir/control.py) can be read as values.
        loadable = buf.kind is BufferKind.INPUT and buf.dtype in LOADABLE_DTYPES
        if buf.kind is not BufferKind.LOCAL and not loadable:
            raise KernelTraceError(f"{s.op_name}: T.load of {buf}: only integer inputs can be loaded", s.loc)
        if len(ld.indices) != len(buf.shape):
            raise KernelTraceError(f"{s.op_name}: T.load of {buf.name} needs {len(buf.shape)} indices", s.loc)
        for dim, (index, extent) in enumerate(zip(ld.indices, buf.shape)):
            rng = value_range(index, ranges)
            if rng is None or (rng[0] >= 0 and rng[1] < extent):
                continue
            with guarded(list(known)):
                if guards_keep_in_bounds(index, 1, extent, ranges):
                    continue
            bad = rng[0] if rng[0] < 0 else rng[1]
            raise KernelTraceError(
                f"{s.op_name}: T.load {format_expr(ld)} is out of bounds: its index {format_expr(index)} "
                f"along dimension {dim} can be {bad}, the extent is {extent}",
                s.loc,
            )


def _check_row(region: Region, op: str, role: str, loc: SourceLoc) -> None:
    """A transfer with a run-time size starts at one whole row of its buffer."""
    buf = region.buffer
    if region.sizes[0] != 1 or tuple(region.sizes[1:]) != tuple(buf.shape[1:]):
        example = f"{buf.name}[i{', :' * (len(buf.shape) - 1)}]"
        raise KernelTraceError(
            f"{op}: with a run-time size the {role} says where the transfer starts: one whole row of {buf.name}, "
            f"e.g. {example}; got {region}",
            loc,
        )


def _start_row(region: Region) -> Region:
    """A run-time-size transfer's start: its row may be one past the last (with 0 bytes to move)."""
    return Region(region.buffer, region.starts, (0, *region.sizes[1:]))


def _check_transfer_regions(s: Put | Get, ranges: Ranges) -> None:
    op = s.op_name
    src, dst = (s.src, s.dst) if s.size is None else (_start_row(s.src), _start_row(s.dst))
    _check_region(src, ranges, f"{op} src", s.loc)
    _check_region(dst, ranges, f"{op} dst", s.loc)


def _check_sizes(s: Put | Get, ranges: Ranges) -> None:
    """Static sizes: equal shapes. A run-time byte count: two whole rows of the same shape."""
    op = s.op_name
    if s.size is None:
        _check_same_shape(s.src, s.dst, op, s.loc)
        return
    _check_row(s.src, op, "source", s.loc)
    _check_row(s.dst, op, "destination", s.loc)
    if s.src.sizes[1:] != s.dst.sizes[1:] or s.src.buffer.dtype != s.dst.buffer.dtype:
        raise KernelTraceError(
            f"{op}: the rows differ: {s.src.buffer.name} has rows of {s.src.buffer.dtype.name}"
            f"{list(s.src.sizes[1:])}, {s.dst.buffer.name} of {s.dst.buffer.dtype.name}{list(s.dst.sizes[1:])}",
            s.loc,
        )
    rng = value_range(s.size, ranges)
    if rng is not None and rng[0] < 0:
        raise KernelTraceError(f"{op}: size={format_expr(s.size)} can be negative ({rng[0]} bytes)", s.loc)


# ---- statement rules -----------------------------------------------------------------------------


def _check_clip(s: Copy) -> None:
    """A clipped copy moves between global memory and an on-chip tile; `clip_dims` are distinct,
    increasing dimensions of the global side with more than one element."""
    kinds = (s.src.buffer.kind, s.dst.buffer.kind)
    if not any(a in CLIP_KINDS and b in BLOCK_LOCAL for a, b in (kinds, kinds[::-1])):
        raise KernelTraceError(
            f"copy: only a copy between global memory and a shared or fragment tile may clip its window; {s.src} -> "
            f"{s.dst} is {kinds[0].value} -> {kinds[1].value}",
            s.loc,
        )
    side = s.global_side
    if list(s.clip_dims) != sorted(set(s.clip_dims)) or any(
        not 0 <= d < len(side.sizes) or side.sizes[d] == 1 for d in s.clip_dims
    ):
        raise KernelTraceError(f"internal: copy clip_dims {s.clip_dims} do not name dimensions of {side}", s.loc)


def _verify_copy(s: Copy, kernel: KernelIR, ranges: Ranges) -> None:
    if s.clip_dims:
        _check_clip(s)
    clipped = s.global_side if s.clip_dims else None
    _check_region(s.src, ranges, "copy src", s.loc, s.clip_dims if clipped is s.src else ())
    _check_region(s.dst, ranges, "copy dst", s.loc, s.clip_dims if clipped is s.dst else ())
    for r, what in ((s.src, "src"), (s.dst, "dst")):
        if r.buffer.kind is BufferKind.SIGNAL:
            raise KernelTraceError(f"copy {what}: signal words are read with T.signal_wait_until, not copied", s.loc)
    if s.dst.buffer.kind is BufferKind.INPUT:
        raise KernelTraceError(f"copy: {s.dst.buffer.name} is a kernel input, which is read-only", s.loc)
    cast = BufferKind.FRAGMENT in (s.src.buffer.kind, s.dst.buffer.kind)
    _check_same_shape(s.src, s.dst, "copy", s.loc, cast=cast)
    if cast and not all(r.buffer.dtype.kind in "fiu" or r.buffer.dtype.name == "bfloat16" for r in (s.src, s.dst)):
        raise KernelTraceError(f"copy: casts are between numeric types; {s.src} -> {s.dst}", s.loc)


GEMM_IN_DTYPES = ("float16", "bfloat16", "float32")


def _matrix(r: Region, op: str, role: str, loc: SourceLoc) -> tuple[int, int]:
    if len(r.sizes) < 2 or any(d != 1 for d in r.sizes[:-2]):
        raise KernelTraceError(f"{op}: {role} must be a 2-D tile (leading dimensions 1); {r} is {list(r.sizes)}", loc)
    return r.sizes[-2], r.sizes[-1]


def _verify_gemm(s: Gemm, kernel: KernelIR, ranges: Ranges) -> None:
    op = s.op_name
    for r, role in ((s.a, "A"), (s.b, "B"), (s.c, "C")):
        _check_region(r, ranges, f"{op} {role}", s.loc)
        _check_kind(r, BLOCK_LOCAL, op, role, "gemm works on on-chip tiles (T.alloc_shared, T.alloc_fragment)", s.loc)
    for r, role in ((s.a, "A"), (s.b, "B")):
        if r.buffer.dtype.name not in GEMM_IN_DTYPES:
            raise KernelTraceError(f"{op}: {role} ({r.buffer.name}) must be float16, bfloat16 or float32, not "
                                   f"{r.buffer.dtype.name}", s.loc)
    if s.a.buffer.dtype != s.b.buffer.dtype:
        raise KernelTraceError(f"{op}: A and B must have one dtype; {s.a.buffer.name} is {s.a.buffer.dtype.name}, "
                               f"{s.b.buffer.name} is {s.b.buffer.dtype.name}", s.loc)
    if s.c.buffer.dtype.name != "float32":
        raise KernelTraceError(f"{op}: the accumulator C ({s.c.buffer.name}) must be float32, not "
                               f"{s.c.buffer.dtype.name}", s.loc)
    m, ka = _matrix(s.a, op, "A", s.loc)[:: -1 if s.transpose_a else 1]
    kb, n = _matrix(s.b, op, "B", s.loc)[:: -1 if s.transpose_b else 1]
    cm, cn = _matrix(s.c, op, "C", s.loc)
    if ka != kb or (cm, cn) != (m, n):
        raise KernelTraceError(
            f"{op}: shapes do not chain: A{'^T' if s.transpose_a else ''} is {m}x{ka}, "
            f"B{'^T' if s.transpose_b else ''} is {kb}x{n}, C is {cm}x{cn} (need MxK @ KxN -> MxN)",
            s.loc,
        )


def _verify_fill(s: Fill, kernel: KernelIR, ranges: Ranges) -> None:
    _check_region(s.dst, ranges, s.op_name, s.loc)
    _check_kind(s.dst, BLOCK_LOCAL, s.op_name, "buffer", "fill/clear set on-chip tiles", s.loc)


def _verify_loop(s: Loop, kernel: KernelIR, ranges: Ranges) -> None:
    if s.extent < 1:
        raise KernelTraceError(f"{s.op_name}: the trip count must be positive, got {s.extent}", s.loc)
    _verify_body(s.body, kernel, {**ranges, s.var: (0, s.extent - 1)})


def _verify_put(s: Put, kernel: KernelIR, ranges: Ranges) -> None:
    op = s.op_name
    _check_transfer_regions(s, ranges)
    dst_kind = s.dst.buffer.kind
    if dst_kind is BufferKind.INPUT:
        raise KernelTraceError(f"{op}: {s.dst.buffer.name} is a kernel input, which is read-only", s.loc)
    if dst_kind is BufferKind.SHARED:
        raise KernelTraceError(
            f"{op}: the destination {s.dst.buffer.name} is shared memory, which peers cannot address; "
            "put into a kernel output or a T.alloc_symmetric buffer",
            s.loc,
        )
    if dst_kind is BufferKind.SIGNAL or s.src.buffer.kind is BufferKind.SIGNAL:
        raise KernelTraceError(f"{op}: signal words are updated with the signal arguments, not put as data", s.loc)
    _check_sizes(s, ranges)
    _check_pe(s.pe, kernel, ranges, op, s.loc)
    if s.signal is not None:
        _check_signal_word(s.signal.word, op, s.loc)
        _check_region(s.signal.word, ranges, f"{op} sig", s.loc)


def _verify_get(s: Get, kernel: KernelIR, ranges: Ranges) -> None:
    op = s.op_name
    _check_transfer_regions(s, ranges)
    _check_kind(s.src, REMOTE_READABLE, op, "source", "a get reads a peer's symmetric memory", s.loc)
    _check_kind(s.dst, LOCAL_WRITABLE, op, "destination", "a get writes local memory", s.loc)
    _check_sizes(s, ranges)
    _check_pe(s.pe, kernel, ranges, op, s.loc)


def _verify_peer_copy(s: PeerCopy, kernel: KernelIR, ranges: Ranges) -> None:
    op = s.op_name
    _check_scope(s, s.scope, (Scope.WARP, Scope.BLOCK))
    _check_region(s.src, ranges, f"{op} src", s.loc)
    _check_region(s.dst, ranges, f"{op} dst", s.loc)
    _check_not_signal(s, s.src, s.dst)
    if s.direction is Direction.PUT:
        _check_kind(s.dst, REMOTE_WRITABLE, op, "destination", "peers can store only into symmetric memory", s.loc)
    else:
        _check_kind(s.src, REMOTE_READABLE, op, "source", "peers can load only from symmetric memory", s.loc)
        _check_kind(s.dst, LOCAL_WRITABLE, op, "destination", "the data lands in local memory", s.loc)
    _check_same_shape(s.src, s.dst, op, s.loc)
    _check_pe(s.pe, kernel, ranges, op, s.loc)


def _verify_wait(s: SignalWait, kernel: KernelIR, ranges: Ranges) -> None:
    _check_signal_word(s.word, s.op_name, s.loc)
    _check_region(s.word, ranges, s.op_name, s.loc)


def _verify_remote_signal(s: RemoteSignal, kernel: KernelIR, ranges: Ranges) -> None:
    _check_signal_word(s.word, s.op_name, s.loc)
    _check_region(s.word, ranges, s.op_name, s.loc)
    _check_pe(s.pe, kernel, ranges, s.op_name, s.loc)


def _verify_wait_until(s: WaitUntil, kernel: KernelIR, ranges: Ranges) -> None:
    op, buf = s.op_name, s.word.buffer
    _check_kind(s.word, WAIT_WORD_KINDS, op, "word", "a waited-for word must be one that peers can write", s.loc)
    if buf.dtype.kind not in "iu" or buf.dtype.itemsize not in WAIT_WORD_BYTES:
        raise KernelTraceError(f"{op}: the word must be a 32- or 64-bit integer; {buf.name} is {buf.dtype.name}", s.loc)
    if s.word.size != 1:
        raise KernelTraceError(f"{op}: waits for one word, e.g. flags[i]; got {s.word} of {s.word.size}", s.loc)
    _check_region(s.word, ranges, op, s.loc)
    if s.pe is not None:
        _check_pe(s.pe, kernel, ranges, op, s.loc)


def _verify_team_barrier(s: TeamBarrier, kernel: KernelIR, ranges: Ranges) -> None:
    _check_scope(s, s.scope, (Scope.WARP, Scope.BLOCK))


def _verify_broadcast(s: Broadcast, kernel: KernelIR, ranges: Ranges) -> None:
    op = s.op_name
    _check_region(s.src, ranges, f"{op} src", s.loc)
    _check_region(s.dst, ranges, f"{op} dst", s.loc)
    _check_not_signal(s, s.src)
    _check_kind(s.dst, REMOTE_WRITABLE, op, "destination", "the root writes it on every PE", s.loc)
    _check_same_shape(s.src, s.dst, op, s.loc)
    _check_pe(s.root, kernel, ranges, op, s.loc, what="Root")


def _verify_fcollect(s: Fcollect, kernel: KernelIR, ranges: Ranges) -> None:
    op = s.op_name
    _check_region(s.src, ranges, f"{op} src", s.loc)
    _check_region(s.dst, ranges, f"{op} dst", s.loc)
    _check_not_signal(s, s.src)
    _check_kind(s.dst, REMOTE_WRITABLE, op, "destination", "every PE writes its block into it on every PE", s.loc)
    n, src, dst = kernel.num_pes, s.src.sizes, s.dst.sizes
    if len(src) != len(dst) or dst[0] != n * src[0] or dst[1:] != src[1:]:
        raise KernelTraceError(
            f"{op}: the destination holds the {n} PEs' sources stacked along dimension 0: {list(src)} from each PE "
            f"needs {[n * src[0], *src[1:]]}, but {s.dst} is {list(dst)}",
            s.loc,
        )
    if s.src.buffer.dtype != s.dst.buffer.dtype:
        raise KernelTraceError(
            f"{op}: dtypes differ: {s.src.buffer.name} is {s.src.buffer.dtype.name}, {s.dst.buffer.name} is "
            f"{s.dst.buffer.dtype.name}",
            s.loc,
        )


def _verify_nothing(s: Stmt, kernel: KernelIR, ranges: Ranges) -> None:
    return None


STMT_RULES: dict[type, Callable[[Stmt, KernelIR, Ranges], None]] = {
    Copy: _verify_copy,
    Put: _verify_put,
    Get: _verify_get,
    PeerCopy: _verify_peer_copy,
    SignalWait: _verify_wait,
    RemoteSignal: _verify_remote_signal,
    WaitUntil: _verify_wait_until,
    Quiet: _verify_nothing,
    Fence: _verify_nothing,
    BarrierAll: _verify_nothing,
    TeamBarrier: _verify_team_barrier,
    Broadcast: _verify_broadcast,
    Fcollect: _verify_fcollect,
    Gemm: _verify_gemm,
    Fill: _verify_fill,
    Loop: _verify_loop,
    If: verify_if,
    LocalStore: verify_local_store,
}


def _check_loop_vars(s: Stmt, ranges: Ranges) -> None:
    for e in stmt_exprs(s):
        for v in variables(e):
            if v.kind is VarKind.LOOP and v not in ranges:
                raise KernelTraceError(
                    f"{s.op_name}: the loop variable {format_expr(v)} is used outside its T.serial/T.Pipelined loop",
                    s.loc,
                )


def _verify_body(body: tuple[Stmt, ...], kernel: KernelIR, ranges: Ranges) -> None:
    for stmt in body:
        rule = STMT_RULES.get(type(stmt))
        if rule is None:
            raise KernelTraceError(f"internal: no verifier rule for {type(stmt).__name__}", stmt.loc)
        _check_loop_vars(stmt, ranges)
        check_thread_context(stmt, kernel, ranges)
        rule(stmt, kernel, ranges)
        _check_loads(stmt, ranges)


def verify_kernel(kernel: KernelIR) -> KernelIR:
    """Raises KernelTraceError for the first broken invariant; returns the kernel unchanged."""
    loc = kernel.loc
    if not 1 <= len(kernel.grid) <= MAX_GRID_DIMS or any(
        isinstance(g, bool) or not isinstance(g, int) or g <= 0 for g in kernel.grid
    ):
        raise KernelTraceError(f"grid must be 1 to {MAX_GRID_DIMS} positive ints, got {kernel.grid!r}", loc)
    if not isinstance(kernel.threads, int) or not 32 <= kernel.threads <= MAX_THREADS or kernel.threads % 32:
        raise KernelTraceError(
            f"threads must be a multiple of 32 between 32 and {MAX_THREADS}, got {kernel.threads!r}", loc
        )
    if kernel.num_pes < 1:
        raise KernelTraceError(f"the kernel's PE space {kernel.mesh_axes} is empty", loc)
    sizes = kernel.mesh_axis_sizes
    if sizes and (len(sizes) != len(kernel.mesh_axes) or math.prod(sizes) != kernel.num_pes):
        raise KernelTraceError(
            f"mesh axis sizes {sizes} do not make the PE space {kernel.mesh_axes} of {kernel.num_pes} PEs", loc
        )
    _verify_body(kernel.body, kernel, var_ranges(kernel))
    return kernel


# The element-wise tile statements' rules (T.Parallel, stores, reductions, atomics) use the helpers
# above, so they are registered last.
from .tile_verify import RULES as _TILE_RULES  # noqa: E402

STMT_RULES.update(_TILE_RULES)
