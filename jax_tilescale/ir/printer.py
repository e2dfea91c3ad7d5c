"""Readable text form of a kernel IR (`print(kernel.ir_text())`, and in error reports)."""

from __future__ import annotations

from collections.abc import Callable

from .expr import format_expr
from .nodes import BarrierAll, Copy, Fence, KernelIR, Put, Quiet, SignalWait, Stmt


def _put(s: Put) -> str:
    text = f"{s.op_name}({s.dst} <- {s.src}, pe={format_expr(s.pe)}"
    if s.signal is not None:
        text += f", sig {s.signal.word} {s.signal.op.name} {format_expr(s.signal.value)}"
    return text + ")"


PRINT_RULES: dict[type, Callable[[Stmt], str]] = {
    Copy: lambda s: f"copy({s.src} -> {s.dst})",
    Put: _put,
    SignalWait: lambda s: f"signal_wait_until({s.word} {s.cmp.value} {format_expr(s.value)})",
    Quiet: lambda s: "quiet()",
    Fence: lambda s: "fence()",
    BarrierAll: lambda s: "barrier_all()",
}


def format_stmt(stmt: Stmt) -> str:
    return PRINT_RULES[type(stmt)](stmt)


def format_kernel(kernel: KernelIR, with_locs: bool = False) -> str:
    header = (
        f"kernel {kernel.name}(grid={kernel.grid}, threads={kernel.threads}, "
        f"mesh_axes={kernel.mesh_axes}, num_pes={kernel.num_pes})"
    )
    lines = [header]
    lines += [f"  param {b}" for b in kernel.params]
    lines += [f"  alloc {b}" for b in kernel.allocs]
    for s in kernel.body:
        text = f"  {format_stmt(s)}"
        if with_locs:
            text = f"{text:<70} # {s.loc}"
        lines.append(text)
    return "\n".join(lines)
