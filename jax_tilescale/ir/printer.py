"""Readable text form of a kernel IR (`print(kernel.ir_text())`, and in error reports).

`PRINT` holds one rule per statement type: the statement's line, or for a statement with
several nested bodies one header per body (an if's `if c:` and `else:`). The rules are all here,
each registered with the table's decorator.
"""

from __future__ import annotations

from collections.abc import Callable

from .cluster import ClusterCopy, ClusterSync
from .control import If, LocalStore, format_cond
from .expr import Expr, format_expr
from .kernel_ir import KernelIR
from .nodes import (
    BarrierAll,
    Broadcast,
    Copy,
    Direction,
    Fcollect,
    Fence,
    Fill,
    Gemm,
    Get,
    Loop,
    PeerCopy,
    Put,
    Quiet,
    Region,
    RemoteSignal,
    SignalWait,
    Stmt,
    TeamBarrier,
    WaitUntil,
)
from .rules import RuleTable
from .tile_ops import AtomicElement, AtomicRegion, CumSum, FetchAdd, Parallel, Reduce, Store
from .tile_queue import TileQueue
from .values import format_value

# A statement's line, or (a statement with several bodies) one header line per body.
PrintRule = Callable[[Stmt], "str | tuple[str, ...]"]
PRINT: RuleTable[PrintRule] = RuleTable("print")


def _size(size: Expr | None) -> str:
    return "" if size is None else f", size={format_expr(size)} bytes"


def _element(r: Region) -> str:
    return f"{r.buffer.name}[{', '.join(format_expr(s) for s in r.starts)}]"


# ---- communication -------------------------------------------------------------------------------


@PRINT.register(Put)
def _put(s: Put) -> str:
    text = f"{s.op_name}({s.dst} <- {s.src}, pe={format_expr(s.pe)}{_size(s.size)}"
    if s.signal is not None:
        text += f", sig {s.signal.word} {s.signal.op.name} {format_expr(s.signal.value)}"
    return text + ")"


@PRINT.register(Get)
def _get(s: Get) -> str:
    return f"{s.op_name}({s.dst} <- {s.src}, pe={format_expr(s.pe)}{_size(s.size)})"


@PRINT.register(PeerCopy)
def _peer_copy(s: PeerCopy) -> str:
    where = "dst_pe" if s.direction is Direction.PUT else "src_pe"
    other = ", else " + ("putmem" if s.direction is Direction.PUT else "getmem") if s.fallback else ""
    return f"{s.op_name}({s.dst} <- {s.src}, {where}={format_expr(s.pe)}{other})"


@PRINT.register(SignalWait)
def _signal_wait(s: SignalWait) -> str:
    return f"signal_wait_until({s.word} {s.cmp.value} {format_expr(s.value)})"


@PRINT.register(RemoteSignal)
def _remote_signal(s: RemoteSignal) -> str:
    return f"signal_op({s.word} {s.op.name} {format_expr(s.value)}, pe={format_expr(s.pe)})"


@PRINT.register(WaitUntil)
def _wait_until(s: WaitUntil) -> str:
    on = "" if s.pe is None else f", pe={format_expr(s.pe)}"
    return f"{s.op_name}({s.word} {s.cmp.value} {format_expr(s.value)}{on})"


@PRINT.register(Quiet, Fence, BarrierAll, TeamBarrier)
def _no_operands(s: Stmt) -> str:
    return f"{s.op_name}()"


@PRINT.register(ClusterSync)
def _cluster_sync(s: ClusterSync) -> str:
    return f"{s.op_name}()"


@PRINT.register(ClusterCopy)
def _cluster_copy(s: ClusterCopy) -> str:
    rank = format_expr(s.rank)
    src, dst = (f"cluster_tile({r}, rank={rank})" if r is s.remote else str(r) for r in (s.src, s.dst))
    return f"copy({src} -> {dst})"


@PRINT.register(Broadcast)
def _broadcast(s: Broadcast) -> str:
    return f"{s.op_name}({s.dst} <- {s.src}, root={format_expr(s.root)})"


@PRINT.register(Fcollect)
def _fcollect(s: Fcollect) -> str:
    return f"{s.op_name}({s.dst} <- {s.src} of every PE)"


# ---- compute -------------------------------------------------------------------------------------


@PRINT.register(Copy)
def _copy(s: Copy) -> str:
    return (f"copy({s.src}{'^T' if s.transpose else ''} -> {s.dst}"
            + (f", clip_dims={s.clip_dims}" if s.clip_dims else "") + ")")


@PRINT.register(Fill)
def _fill(s: Fill) -> str:
    return f"fill({s.dst}, {s.value!r})"


@PRINT.register(Gemm)
def _gemm(s: Gemm) -> str:
    return (f"gemm({s.c} {'=' if s.clear_accum else '+='} {s.a}{'^T' if s.transpose_a else ''} @ "
            f"{s.b}{'^T' if s.transpose_b else ''})")


@PRINT.register(Loop)
def _loop(s: Loop) -> str:
    if s.num_stages is None:
        return f"for {format_expr(s.var)} in serial({s.extent}):"
    return f"for {format_expr(s.var)} in Pipelined({s.extent}, num_stages={s.num_stages}):"


@PRINT.register(TileQueue)
def _tile_queue(s: TileQueue) -> str:
    static = f", static_rounds={s.static_rounds}" if s.static_rounds else ""
    return f"for {format_expr(s.var)} in tile_queue({s.extent}{static}, counter={s.counter.name}):"


# ---- per-thread code -----------------------------------------------------------------------------


@PRINT.register(If)
def _if(s: If) -> tuple[str, str]:
    return f"if {format_cond(s.cond)}:", "else:"


@PRINT.register(LocalStore)
def _local_store(s: LocalStore) -> str:
    return f"{s.dst} = {format_expr(s.value)}"


# ---- element-wise tile compute -------------------------------------------------------------------


@PRINT.register(Parallel)
def _parallel(s: Parallel) -> str:
    return f"for {', '.join(format_expr(v) for v in s.vars)} in Parallel({', '.join(map(str, s.extents))}):"


@PRINT.register(Store)
def _store(s: Store) -> str:
    return f"{_element(s.dst)} = {format_value(s.value)}"


@PRINT.register(AtomicElement)
def _atomic_element(s: AtomicElement) -> str:
    return f"{s.op_name}({_element(s.dst)}, {format_value(s.value)})"


@PRINT.register(AtomicRegion)
def _atomic_region(s: AtomicRegion) -> str:
    return f"{s.op_name}({s.dst} <- {s.src})"


@PRINT.register(FetchAdd)
def _fetch_add(s: FetchAdd) -> str:
    return f"{_element(s.prev)} = {s.op_name}({_element(s.word)}, {format_expr(s.value)})"


@PRINT.register(Reduce)
def _reduce(s: Reduce) -> str:
    return f"{s.op_name}({s.src} -> {s.dst}, dim={s.dim}, clear={s.clear})"


@PRINT.register(CumSum)
def _cumsum(s: CumSum) -> str:
    return f"{s.op_name}({s.src} -> {s.dst}, dim={s.dim}, reverse={s.reverse})"


# ---- kernels -------------------------------------------------------------------------------------


def _headers(stmt: Stmt) -> tuple[str, ...]:
    text = PRINT.lookup(stmt)(stmt)
    return (text,) if isinstance(text, str) else text


def format_stmt(stmt: Stmt) -> str:
    """The statement's line (for a statement with nested bodies, the header of the first)."""
    return _headers(stmt)[0]


def format_kernel(kernel: KernelIR, with_locs: bool = False) -> str:
    axes = kernel.mesh_axes
    if kernel.mesh_axis_sizes and len(axes) > 1:
        axes_text = "(" + ", ".join(f"{a}={n}" for a, n in zip(axes, kernel.mesh_axis_sizes)) + ")"
    else:
        axes_text = str(axes)
    header = (
        f"kernel {kernel.name}(grid={kernel.grid}, threads={kernel.threads}, "
        f"mesh_axes={axes_text}, num_pes={kernel.num_pes}"
        + (f", blocks_per_sm={kernel.blocks_per_sm}" if kernel.blocks_per_sm != 1 else "")
        + (f", cluster={kernel.cluster}" if kernel.cluster else "")
        + (", pingpong=True)" if kernel.pingpong else ")")
    )
    lines = [header]
    lines += [f"  param {b}" for b in kernel.params]
    lines += [f"  alias {i.name} -> {o.name}  (input {a}'s buffer is output {j}'s)"
              for (a, j), (i, o) in zip(kernel.aliases, kernel.alias_pairs())]
    lines += [f"  alloc {b}" for b in kernel.allocs]
    _format_body(kernel.body, 1, with_locs, lines)
    return "\n".join(lines)


def _format_body(body: tuple[Stmt, ...], depth: int, with_locs: bool, lines: list[str]) -> None:
    for s in body:
        headers = _headers(s)
        text = f"{'  ' * depth}{headers[0]}"
        if with_locs:
            text = f"{text:<70} # {s.loc}"
        lines.append(text)
        for i, nested in enumerate(s.bodies):
            if i and nested:
                lines.append(f"{'  ' * depth}{headers[i]}")
            _format_body(nested, depth + 1, with_locs, lines)
