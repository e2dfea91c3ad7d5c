"""Readable text form of a kernel IR (`print(kernel.ir_text())`, and in error reports)."""

from __future__ import annotations

from collections.abc import Callable

from .control import If, LocalStore, format_cond
from .expr import Expr, format_expr
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
    KernelIR,
    Loop,
    PeerCopy,
    Put,
    Quiet,
    RemoteSignal,
    SignalWait,
    Stmt,
    TeamBarrier,
    WaitUntil,
)
from .tile_ops import PRINT_RULES as TILE_PRINT_RULES


def _size(size: Expr | None) -> str:
    return "" if size is None else f", size={format_expr(size)} bytes"


def _put(s: Put) -> str:
    text = f"{s.op_name}({s.dst} <- {s.src}, pe={format_expr(s.pe)}{_size(s.size)}"
    if s.signal is not None:
        text += f", sig {s.signal.word} {s.signal.op.name} {format_expr(s.signal.value)}"
    return text + ")"


def _get(s: Get) -> str:
    return f"{s.op_name}({s.dst} <- {s.src}, pe={format_expr(s.pe)}{_size(s.size)})"


def _peer_copy(s: PeerCopy) -> str:
    where = "dst_pe" if s.direction is Direction.PUT else "src_pe"
    return f"{s.op_name}({s.dst} <- {s.src}, {where}={format_expr(s.pe)})"


def _wait_until(s: WaitUntil) -> str:
    on = "" if s.pe is None else f", pe={format_expr(s.pe)}"
    return f"{s.op_name}({s.word} {s.cmp.value} {format_expr(s.value)}{on})"


PRINT_RULES: dict[type, Callable[[Stmt], str]] = {
    Copy: lambda s: f"copy({s.src} -> {s.dst}" + (f", clip_dims={s.clip_dims}" if s.clip_dims else "") + ")",
    Put: _put,
    Get: _get,
    PeerCopy: _peer_copy,
    SignalWait: lambda s: f"signal_wait_until({s.word} {s.cmp.value} {format_expr(s.value)})",
    RemoteSignal: lambda s: f"signal_op({s.word} {s.op.name} {format_expr(s.value)}, pe={format_expr(s.pe)})",
    WaitUntil: _wait_until,
    Quiet: lambda s: "quiet()",
    Fence: lambda s: "fence()",
    BarrierAll: lambda s: f"{s.op_name}()",
    TeamBarrier: lambda s: f"{s.op_name}()",
    Broadcast: lambda s: f"{s.op_name}({s.dst} <- {s.src}, root={format_expr(s.root)})",
    Fcollect: lambda s: f"{s.op_name}({s.dst} <- {s.src} of every PE)",
    Fill: lambda s: f"fill({s.dst}, {s.value!r})",
    Gemm: lambda s: (
        f"gemm({s.c} {'=' if s.clear_accum else '+='} {s.a}{'^T' if s.transpose_a else ''} @ "
        f"{s.b}{'^T' if s.transpose_b else ''})"
    ),
    Loop: lambda s: (
        f"for {format_expr(s.var)} in serial({s.extent}):" if s.num_stages is None
        else f"for {format_expr(s.var)} in Pipelined({s.extent}, num_stages={s.num_stages}):"
    ),
}


PRINT_RULES.update({
    If: lambda s: f"if {format_cond(s.cond)}:",
    LocalStore: lambda s: f"{s.dst} = {format_expr(s.value)}",
})
PRINT_RULES.update(TILE_PRINT_RULES)  # T.Parallel, element stores, reductions, atomics
# Headers of the nested bodies after the first (an if's `else:`).
BODY_HEADERS: dict[type, tuple[str, ...]] = {If: ("else:",)}


def format_stmt(stmt: Stmt) -> str:
    return PRINT_RULES[type(stmt)](stmt)


def format_kernel(kernel: KernelIR, with_locs: bool = False) -> str:
    axes = kernel.mesh_axes
    if kernel.mesh_axis_sizes and len(axes) > 1:
        axes_text = "(" + ", ".join(f"{a}={n}" for a, n in zip(axes, kernel.mesh_axis_sizes)) + ")"
    else:
        axes_text = str(axes)
    header = (
        f"kernel {kernel.name}(grid={kernel.grid}, threads={kernel.threads}, "
        f"mesh_axes={axes_text}, num_pes={kernel.num_pes})"
    )
    lines = [header]
    lines += [f"  param {b}" for b in kernel.params]
    lines += [f"  alloc {b}" for b in kernel.allocs]
    _format_body(kernel.body, 1, with_locs, lines)
    return "\n".join(lines)


def _format_body(body: tuple[Stmt, ...], depth: int, with_locs: bool, lines: list[str]) -> None:
    for s in body:
        text = f"{'  ' * depth}{format_stmt(s)}"
        if with_locs:
            text = f"{text:<70} # {s.loc}"
        lines.append(text)
        headers = BODY_HEADERS.get(type(s), ())
        for i, nested in enumerate(getattr(s, "bodies", ())):
            if i and nested:
                lines.append(f"{'  ' * depth}{headers[i - 1]}")
            _format_body(nested, depth + 1, with_locs, lines)
