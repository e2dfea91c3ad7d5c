"""The verifier's rule table, its statement walker, and the checks that the rules share.

`VERIFY` holds one rule per statement type (`rule(stmt, kernel, ranges)`, raising
KernelTraceError that names the user's line); the rules live in verify_comm.py, verify_compute.py,
verify_control.py and verify_tile_ops.py, and verify.py (the entry) imports them all. `verify_body`
runs, for each statement, the checks every statement gets (loop variables in scope, the
per-thread rules, the loads in its expressions) and its own rule; statements with nested bodies
call it for them. Range checks are exact (affine index expressions over the known ranges of block
index, PE and loop variables); what cannot be decided statically is left to the interpreter and
to the run-time checks of the generated code.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator

from ..errors import KernelTraceError
from .buffers import BufferKind, load_refusal
from .control import If, format_cond, stmt_regions, thread_dependent
from .expr import Expr, Var, VarKind, format_expr, node_ranges, variables
from .guards import guarded, guarded_loads, guards_keep_in_bounds
from .kernel_ir import KernelIR
from .nodes import Loop, Region, Scope, SourceLoc, Stmt, stmt_exprs
from .ranges import Ranges, value_bounds, value_range
from .rules import RuleTable

VerifyRule = Callable[[Stmt, KernelIR, Ranges], None]
VERIFY: RuleTable[VerifyRule] = RuleTable("verify")


def var_ranges(kernel: KernelIR, loop: Loop | None = None) -> Ranges:
    """Ranges of the block index and PE; with `loop`, also of the variables of the loops that
    enclose `loop`'s body (and of `loop` itself)."""
    ranges = {Var(VarKind.PROGRAM_ID, i): (0, g - 1) for i, g in enumerate(kernel.grid)}
    ranges[Var(VarKind.PE)] = (0, kernel.num_pes - 1)
    ranges.update(node_ranges(kernel.num_pes))
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


def squeezed(shape: tuple[int, ...]) -> tuple[int, ...]:
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


def check_region(
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


def check_same_shape(a: Region, b: Region, what: str, loc: SourceLoc, cast: bool = False) -> None:
    if squeezed(a.shape) != squeezed(b.shape):
        raise KernelTraceError(f"{what}: shapes differ: {a} is {list(a.shape)}, {b} is {list(b.shape)}", loc)
    if a.buffer.dtype != b.buffer.dtype and not cast:
        raise KernelTraceError(
            f"{what}: dtypes differ: {a.buffer.name} is {a.buffer.dtype.name}, {b.buffer.name} is "
            f"{b.buffer.dtype.name} (only T.copy to or from a T.alloc_fragment tile casts)",
            loc,
        )


def check_pe(pe: Expr, kernel: KernelIR, ranges: Ranges, op: str, loc: SourceLoc, what: str = "PE") -> None:
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


def check_signal_word(word: Region, op: str, loc: SourceLoc) -> None:
    if word.buffer.kind is not BufferKind.SIGNAL:
        raise KernelTraceError(f"{op}: the signal must be a word of T.alloc_signal(...), got {word.buffer}", loc)
    if word.size != 1:
        raise KernelTraceError(f"{op}: the signal must be one word, e.g. sig[i]; got {word} of {word.size} words", loc)


def check_kind(region: Region, kinds: frozenset[BufferKind], op: str, role: str, why: str, loc: SourceLoc) -> None:
    if region.buffer.kind not in kinds:
        allowed = ", ".join(sorted(k.value for k in kinds))
        raise KernelTraceError(
            f"{op}: the {role} {region.buffer.name} is a {region.buffer.kind.value} buffer; {why} ({allowed})", loc
        )


def check_not_signal(s: Stmt, *regions: Region) -> None:
    for r in regions:
        if r.buffer.kind is BufferKind.SIGNAL:
            raise KernelTraceError(
                f"{s.op_name}: {r.buffer.name} holds signal words, which are updated and waited for, not moved as data",
                s.loc,
            )


def check_scope(s: Stmt, scope: Scope, allowed: tuple[Scope, ...]) -> None:
    if scope not in allowed:
        names = ", ".join(a.value for a in allowed)
        raise KernelTraceError(f"{s.op_name}: scope {scope.value} is not available here (only {names})", s.loc)


def check_loads(s: Stmt, ranges: Ranges) -> None:
    """Every `T.load` in the statement reads an integer element of global memory inside its bounds
    (where affine), where the conditions around it hold (`j < n and x[j] > 0` reads x[j] only for
    j < n)."""
    for ld, known in guarded_loads(s):
        buf = ld.buffer
        # Global memory (T.load, buffers.load_refusal) and per-thread registers (ir/control.py).
        refusal = None if buf.kind is BufferKind.LOCAL else load_refusal(buf)
        if refusal is not None:
            raise KernelTraceError(f"{s.op_name}: {refusal}", s.loc)
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


def check_loop_vars(s: Stmt, ranges: Ranges) -> None:
    for e in stmt_exprs(s):
        for v in variables(e):
            if v.kind is VarKind.LOOP and v not in ranges:
                raise KernelTraceError(
                    f"{s.op_name}: the loop variable {format_expr(v)} is used outside its T.serial/T.Pipelined loop",
                    s.loc,
                )


# The thread-dependent ifs enclosing the statements being verified (innermost last).
_DIVERGENT: contextvars.ContextVar[tuple[If, ...]] = contextvars.ContextVar("tilescale_divergent", default=())


@contextlib.contextmanager
def thread_branch(s: If) -> Iterator[None]:
    """The statements verified inside stand in the thread-dependent `s`."""
    token = _DIVERGENT.set((*_DIVERGENT.get(), s))
    try:
        yield
    finally:
        _DIVERGENT.reset(token)


def _describe(cond: If) -> str:
    return f"`if {format_cond(cond.cond)}` (at {cond.loc})"


def check_thread_context(s: Stmt, kernel: KernelIR, ranges: Ranges) -> None:
    """The verifier's per-thread rules for any statement `s` (called before its own rule)."""
    for r in stmt_regions(s):
        if r.buffer.kind is BufferKind.LOCAL and not s.per_thread:
            raise KernelTraceError(
                f"{s.op_name}: {r.buffer.name} is a per-thread register buffer (T.alloc_local/T.alloc_var); registers "
                "are read and written element by element (x[i] = ..., x[i] in expressions), not copied or transferred",
                s.loc,
            )
    enclosing = _DIVERGENT.get()
    if enclosing:
        scope = getattr(s, "scope", Scope.THREAD)
        if not s.in_thread_branch or scope is not Scope.THREAD:
            whole = "its warp" if scope is Scope.WARP else "the whole block"
            raise KernelTraceError(
                f"{s.op_name} needs {whole}, but it is inside the thread-dependent {_describe(enclosing[-1])}: on "
                "the GPU the threads that did not take the branch never reach it (a deadlock, or missing data). Move "
                "it out of the `if`, or use a thread-scope form (e.g. putmem instead of putmem_block) issued by the "
                "threads of the branch",
                s.loc,
            )
        return
    if s.per_thread:
        return
    for e in stmt_exprs(s):
        if thread_dependent(e):
            raise KernelTraceError(
                f"{s.op_name}: `{format_expr(e)}` depends on the thread (tx or a register), but outside a "
                "thread-dependent `if` the statement is issued once for the block (by thread 0, warp 0 or all "
                "threads together, per its scope); put it under a condition on the thread, e.g. `if tx == 0:` or "
                "`if tx < n:`",
                s.loc,
            )


def verify_body(body: tuple[Stmt, ...], kernel: KernelIR, ranges: Ranges) -> None:
    """Verifies each statement of `body`: the checks every statement gets, then its own rule."""
    for stmt in body:
        rule = VERIFY.lookup(stmt)
        check_loop_vars(stmt, ranges)
        check_thread_context(stmt, kernel, ranges)
        rule(stmt, kernel, ranges)
        check_loads(stmt, ranges)
