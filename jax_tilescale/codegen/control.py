"""CUDA for per-thread code (ir/control.py): the thread index, ifs, registers, conditions.

- `tx` is `ts_tx` (`threadIdx.x`, declared in the prologue); registers (`T.alloc_local`,
  `T.alloc_var`) are per-thread C arrays `ts_r_<name>[n]` declared there too.
- Conditions print as 0/1 int64 values: `==` ... `>=`, `&`/`|` (both sides evaluated, as the
  interpreter does), `and`/`or` as `&&`/`||` (short-circuit, as the interpreter does), `not`,
  and `if_then_else` as `?:` (only the chosen side evaluated).
- A block-uniform `if` is a C `if` around the statements' block-level code (every thread takes
  the same side, so the barriers inside stay block-wide). An element-value condition
  (`if flag[0] > 0:`) is printed as codegen/tile_ops.py prints values; every thread evaluates it,
  and they agree: the interpreter reads it once for the block and reports a read that races with
  a write, the only way threads could see different values.
- A thread-dependent `if` is a C `if` around the statements' per-thread code, then one block
  barrier: the block continues together after it, which is the interpreter's meaning (the block
  runs the if to completion before its next statement). The branches are emitted with
  `ctx.thread_branch` set, which makes the rules emit per-thread code: what thread 0 would issue
  for the block (`common.thread0`) each thread of the branch issues, and `ctx.block_sync()` is
  no barrier (the threads outside the branch never come; the barrier after the if does that job).
  The verifier admits only statements whose code has that shape (thread-scope transfers,
  signals, waits, quiet, fence, register stores); `check_per_thread` refuses anything else.
- Run-time checks (`ts_fail`) in a thread-dependent branch fail in some threads only: kernels with
  such branches define ts_fail's wait (TS_FAIL_SYNC) as a pause instead of a block barrier, so
  a failing thread stops the kernel instead of waiting for threads that never come
  (`header_defines`). The message is printed by thread 0 only, so a failure of other threads
  stops the kernel without it (the interpreter reports it precisely); a header hook for the
  printing thread would fix that.
"""

from __future__ import annotations

import math
from dataclasses import replace

from ..errors import KernelTraceError
from ..ir.buffers import BufferKind
from ..ir.control import If, LocalStore, local_buffers, thread_dependent
from ..ir.expr import Compare, Const, Expr, Load, Logic, LogicKind, Not, Select, Var, VarKind
from ..ir.kernel_ir import KernelIR
from ..ir.nodes import BarrierAll, walk_stmts
from ..ir.tile_queue import TileQueue
from .body import EMIT, emit_body
from .common import INDENT, indent
from .context import Ctx
from .expr_printer import EXPR_HOOKS, WHERE_NAME, c_expr, c_identifier, c_int64, const_literal, var_name
from .tile_ops import ValuePrinter, condition, enclosing_ranges

THREAD_VAR_NAME = "ts_tx"
_LOGIC_C = {LogicKind.AND: "&", LogicKind.OR: "|", LogicKind.LAND: "&&", LogicKind.LOR: "||"}
_C_INT_TYPES = {"int8": "int8_t", "int16": "int16_t", "int32": "int32_t", "int64": "int64_t", "uint8": "uint8_t",
                "uint16": "uint16_t", "uint32": "uint32_t"}


def register_name(buffer_name: str) -> str:
    return f"ts_r_{c_identifier(buffer_name)}"


def _flat_index(e: Load) -> str:
    """Row-major flat index of a register read, run-time indices checked (ts_bound)."""
    terms, stride = [], 1
    for index, extent in reversed(list(zip(e.indices, e.buffer.shape))):
        if isinstance(index, Const):
            term = const_literal(index.value)  # checked when traced
        else:
            term = f"ts_bound({c_expr(index)}, {extent}, {WHERE_NAME})"
        terms.append(term if stride == 1 else f"{term} * {stride}")
        stride *= extent
    return " + ".join(reversed(terms))


def c_condition_expr(e: Expr) -> str | None:
    """The C spelling of the expressions this module adds (None for the others)."""
    if isinstance(e, Compare):
        return f"((int64_t)({c_int64(e.lhs)} {e.op.value} {c_int64(e.rhs)}))"
    if isinstance(e, Logic):
        return f"((int64_t)(({c_expr(e.lhs)} != 0) {_LOGIC_C[e.op]} ({c_expr(e.rhs)} != 0)))"
    if isinstance(e, Not):
        return f"((int64_t)({c_expr(e.operand)} == 0))"
    if isinstance(e, Select):
        return f"(({c_expr(e.cond)} != 0) ? {c_int64(e.if_true)} : {c_int64(e.if_false)})"
    if isinstance(e, Load) and e.buffer.kind is BufferKind.LOCAL:
        return f"((int64_t){register_name(e.buffer.name)}[{_flat_index(e)}])"
    if isinstance(e, Var) and e.kind is VarKind.THREAD:
        return THREAD_VAR_NAME
    return None


def prologue(ctx: Ctx) -> list[str]:
    """`ts_tx` and the register arrays (every thread has its own)."""
    lines = [f"const int64_t {THREAD_VAR_NAME} = threadIdx.x; (void){THREAD_VAR_NAME};"]
    for buf in local_buffers(ctx.kernel):
        size = 1
        for d in buf.shape:
            size *= d
        lines.append(f"{_C_INT_TYPES[buf.dtype.name]} {register_name(buf.name)}[{size}];  // registers {buf}")
    return lines


def has_thread_branches(kernel: KernelIR) -> bool:
    return any(isinstance(s, If) and thread_dependent(s.cond) for s in walk_stmts(kernel.body))


def header_defines(kernel: KernelIR) -> list[str]:
    """Lines before the device header: ts_fail that works in a branch of some threads."""
    if not has_thread_branches(kernel):
        return []
    return [
        "// ts_fail may be reached by some threads only: no block barrier before the trap (a pause).",
        "#define TS_FAIL_SYNC() __nanosleep(1000000)",
    ]


def check_per_thread(lines: list, s: If) -> None:
    """The per-thread code of a thread-dependent branch (see the module doc) must not need other
    threads: a barrier, a thread-index guard or a team or grid barrier there is an internal error
    (the verifier should have refused the statement)."""
    for line in lines:
        text = line.strip() if isinstance(line, str) else ""
        if "__sync" in text or "threadIdx" in text or "ts_team_barrier" in text or "ts_grid_barrier" in text:
            raise KernelTraceError(
                f"internal: the CUDA code of a statement in the thread-dependent `if` needs other threads: {text}",
                s.loc,
            )


def _indent(lines: list) -> list:
    return [line if not isinstance(line, str) else "  " + line for line in lines]


@EMIT.register(If)
def emit_if(s: If, ctx: Ctx) -> list:
    for inner in walk_stmts(s.then_body + s.else_body):
        if isinstance(inner, BarrierAll) or inner.team_collective:
            raise KernelTraceError(
                f"{inner.op_name} inside an `if` is not supported by the CUDA code generator yet (its barrier state is "
                "planned for top-level statements only); run with interpret=True",
                inner.loc,
            )
    divergent = thread_dependent(s.cond)
    inner = replace(ctx, thread_branch=True) if divergent else ctx
    then_lines, else_lines = emit_body(s.then_body, inner), emit_body(s.else_body, inner)
    if divergent:
        check_per_thread(then_lines + else_lines, s)
    printer = ValuePrinter(ctx, enclosing_ranges(ctx.kernel, s))
    lines = [f"if ({condition(s.cond, printer, s.loc)}) {{", *_indent(then_lines)]
    lines += ["} else {", *_indent(else_lines), "}"] if else_lines else ["}"]
    if divergent:  # the block goes on together (none in an enclosing thread-dependent if)
        lines += ctx.block_sync()
    return lines


@EMIT.register(LocalStore)
def emit_local_store(s: LocalStore, ctx: Ctx) -> list[str]:
    buf = s.dst.buffer
    index = _flat_index(Load(buf, s.dst.starts))
    return [f"{register_name(buf.name)}[{index}] = ({_C_INT_TYPES[buf.dtype.name]})({c_expr(s.value)});"]


EXPR_HOOKS.append(c_condition_expr)


def queue_draw(s: TileQueue, ctx: Ctx, round_: str) -> str:
    """The C expression of queue `s`'s ticket for round `round_` (a C expression of the block's round, unsigned): the
    counter's next (tilescale_tile_ops.cuh's ts_queue_draw, which leaves it zero), or in the queue's static rounds
    `round * blocks + block` with no atomic, the drawn tickets offset past the static tiles (ir/tile_queue.py)."""
    grid = ctx.kernel.grid
    draw = f"ts_queue_draw(reinterpret_cast<int32_t*>({ctx.pointers[s.counter]}), {s.last_ticket(math.prod(grid))})"
    if not s.static_rounds:
        return draw
    block = " + ".join(f"(int32_t)blockIdx.{axis}" + "".join(f" * {g}" for g in grid[:i])
                       for i, axis in enumerate("xyz"[:len(grid)]))
    return (f"(({round_}) < {s.static_rounds}u ? (int32_t)({round_}) * {math.prod(grid)} + {block} : "
            f"{s.static_tiles(math.prod(grid))} + {draw})")


def ticket_value(word: str) -> str:
    """A drawn ticket, read from its int32 word, as the tile index: zero-extended (a ticket is never negative), so
    that with the loop's exit test the compiler knows the tile's range and a tile order's divisions by constants stay
    divisions by constants (read signed, nvcc divided at run time in the Hopper GEMM's producer k-loop: 1.23-1.25x
    XLA's cycles, benchmarks/NOTES.md, forty-seventh session)."""
    return f"(int64_t)(uint32_t){word}"


@EMIT.register(TileQueue)
def emit_tile_queue(s: TileQueue, ctx: Ctx) -> list[str]:
    """Thread 0 draws each round's ticket into a word of `s.drawn`, the block meets and every thread reads it.
    Two words, used in turn: the thread that draws round r + 1 has passed round r's barrier, which every thread
    reached after reading round r - 1's word, so one barrier a round keeps the reads and the writes apart."""
    tile = var_name(s.var)
    rounds = f"{tile}_round"
    drawn = f"reinterpret_cast<int32_t*>({ctx.pointers[s.drawn]})"
    return [
        f"for (uint32_t {rounds} = 0;; ++{rounds}) {{  // {s.extent} tiles dealt to the blocks as they ask",
        f"{INDENT}if (threadIdx.x == 0) {drawn}[{rounds} & 1u] = {queue_draw(s, ctx, rounds)};",
        *(INDENT + line for line in ctx.block_sync("the round's ticket drawn")),
        f"{INDENT}const int64_t {tile} = {ticket_value(f'{drawn}[{rounds} & 1u]')};  // never negative",
        f"{INDENT}if ({tile} >= {s.extent}) break;  // none left: the block is done",
        *indent(emit_body(s.body, ctx)),
        "}",
    ]
