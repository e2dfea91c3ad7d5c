"""Staged outputs copied out by the kernel itself, a window at a time, as each window's signal arrives
(issue 14, item 3; docs/calling_convention.md, "Staging copies in the kernel").

A kernel with NVSHMEM's calls (across machines, or with TILESCALE_CALL_FREE=0) runs on a symmetric copy
of every output that peers write, and the handler copied that copy back to XLA's buffer after the
kernel, a separate pass over the whole output once everything had landed. When every write into such
an output is a signalled block put that this PE awaits (end_of_call.signalled_problem: the proof that
lets a call-free kernel end without its meeting), each awaited signal announces one known window of
the output: the block whose wait passed copies that window out at once, while other windows are still
in flight, and the handler copies nothing (`TS_STAGE_KERNEL_OUT`).

Which window a signal announces is worked out here, at every point: for each put, block, loop
iteration and sending PE, the target PE and the window the put writes there; for each word, the first
(wait, block, iteration) that awaits it with the put's value copies it. The generated code carries two
tables: the windows by (receiving PE, word), and per wait the word each (block, iteration) copies
(or -1). On top of the proof, an output is copied out by the kernel only when:

- no statement but those puts names it (no local write, no read that would race with the copy);
- every put into it moves a whole window (no run-time size), whose start depends on the PE, the block
  and the loops only, inside the buffer, made of rows of one pitch (2-D);
- on every PE the windows landing there cover the output exactly once;
- the kernel has no GEMM plan (whose frame may split the block's threads; the copy is spread over all of them).

Anything else leaves the handler's copy-out, and the generated source says why ($TILESCALE_KERNEL_STAGING=0
leaves it everywhere, for comparison). Staged inputs are the kernel's to copy in: codegen/stage_in.py.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from .. import abi
from ..ir.evaluate import evaluate
from ..ir.expr import PE_VAR, Const, Expr, VarKind, program_id_var, static_value
from ..ir.kernel_ir import KernelIR
from ..ir.nodes import Buffer, Cmp, Loop, Put, Region, SignalWait, Stmt, walk_stmts
from .end_of_call import depends_only_on, place_communication, points, signalled_problem
from .expr_printer import c_expr
from .gemm_pattern import buffers_of
from .stage_in import ENV_VAR as STAGING_ENV_VAR
from .stage_in import kernel_staging_on

MAX_COVERAGE_ELEMENTS = 1 << 25  # output elements x PEs checked for exact coverage, at most
MAX_TABLE_ENTRIES = 1 << 14  # windows and per-point entries in the generated tables, at most


@dataclass(frozen=True)
class Window:
    """`rows` runs of `row_bytes`, `pitch` bytes apart, `offset` bytes into param `param` (home slot `home`)."""

    home: int
    param: int
    offset: int
    rows: int
    row_bytes: int
    pitch: int


@dataclass(frozen=True)
class WaitCopies:
    """What one wait statement copies: at each of its points (blocks x loop iterations, row-major, the
    block's first grid axis slowest), the word slot it copies out, or -1."""

    loops: tuple[Loop, ...]
    slots: tuple[int, ...]


@dataclass(frozen=True)
class StageOut:
    """The outputs the kernel copies out itself (param indices, in home-slot order), the windows by
    receiving PE and word slot, and each copying wait's table (keyed by the wait's id)."""

    params: tuple[int, ...]
    windows: tuple[tuple[Window, ...], ...]
    waits: Mapping[int, WaitCopies]

    @property
    def slots(self) -> int:
        return len(self.windows[0]) if self.windows else 0


def stage_out(kernel: KernelIR, call_free: bool, has_plan: bool, first_home: int = 0) -> tuple[StageOut | None, str]:
    """The plan (None: the handler copies every staged output out) and a line for the generated source.
    `first_home`: the home slots the kernel's copied-in inputs took (codegen/stage_in.py)."""
    if call_free or not kernel.uses_nvshmem() or kernel.num_pes == 1:
        return None, ""
    staged = [b for b in kernel.outputs if b in kernel.remote_written()]
    if not staged:
        return None, ""
    if not kernel_staging_on():
        return None, f"staged outputs copied out by the handler after the kernel: ${STAGING_ENV_VAR}=0"
    why = _problem(kernel, has_plan)
    if why is not None:
        return None, f"staged outputs copied out by the handler after the kernel: {why}"
    try:
        plan, why = _plan(kernel, staged, first_home)
    except ArithmeticError as e:  # an index that fails at some point: the kernel fails there anyway
        return None, f"staged outputs copied out by the handler after the kernel: an index fails ({e})"
    if plan is None:
        return None, f"staged outputs copied out by the handler after the kernel: {why}"
    names = ", ".join(kernel.params[i].name for i in plan.params)
    line = f"{names} copied out by the kernel, a window as each signal arrives (codegen/stage_out.py)"
    return plan, line + (f"; {why}" if why else "")


def _problem(kernel: KernelIR, has_plan: bool) -> str | None:
    if has_plan:
        return "a GEMM plan (its frame may split the block's threads; the copy needs them all)"
    return signalled_problem(kernel)  # which also bounds the (block, iteration) points enumerated here


def _placed(kernel: KernelIR) -> list[tuple[Put | SignalWait, tuple[Loop, ...]]]:
    placed: list[tuple[Put | SignalWait, tuple[Loop, ...]]] = []
    why = place_communication(kernel.body, (), placed)
    assert why is None, why  # signalled_problem checked it
    return placed


def _plan(kernel: KernelIR, staged: list[Buffer], first_home: int) -> tuple[StageOut | None, str]:
    placed = _placed(kernel)
    puts = [(p, loops) for p, loops in placed if isinstance(p, Put)]
    others = [s for s in walk_stmts(kernel.body) if not isinstance(s, Put)]
    refused: dict[Buffer, str] = {}
    for buf in staged:
        why = _buffer_problem(buf, [p for p, _ in puts], others)
        if why is not None:
            refused[buf] = why
    room = abi.MAX_HOMES - first_home
    kept = [b for b in staged if b not in refused][:room]
    for b in staged:
        if b not in kept:
            refused.setdefault(b, f"more than {abi.MAX_HOMES} params copied in or out by the kernel")
    if not kept:
        return None, "; ".join(f"{b.name}: {why}" for b, why in refused.items())
    npes = kernel.num_pes
    homes = {b: first_home + i for i, b in enumerate(kept)}
    # (word buffer, indices) -> window at each receiving PE, and the put's value
    landing: dict[tuple[Buffer, tuple[int, ...]], tuple[list[Window | None], int]] = {}
    covered = {b: np.zeros((npes, *b.shape), np.uint8) for b in kept}
    if sum(c.size for c in covered.values()) > MAX_COVERAGE_ELEMENTS:
        return None, f"outputs too large to check their coverage ({MAX_COVERAGE_ELEMENTS} elements x PEs at most)"
    for p, loops in puts:
        if p.dst.buffer not in homes:
            continue
        assert p.signal is not None
        value = static_value(p.signal.value)
        assert value is not None
        for env in points(kernel, loops):
            word = (p.signal.word.buffer, tuple(evaluate(e, env) for e in p.signal.word.starts))
            at: list[Window | None] = [None] * npes
            for sender in range(npes):
                penv = {**env, PE_VAR: sender}
                receiver = evaluate(p.pe, penv)
                starts = tuple(evaluate(e, penv) for e in p.dst.starts)
                window = _window(p.dst, starts, homes[p.dst.buffer], kernel.params.index(p.dst.buffer))
                if window is None:
                    return None, f"the put at {p.loc} writes a window that is not 2-D or leaves {p.dst.buffer.name}"
                at[receiver] = window
                covered[p.dst.buffer][(receiver, *(slice(s, s + n) for s, n in zip(starts, p.dst.sizes)))] += 1
            landing[word] = (at, value)
    for b, counts in covered.items():
        if counts.min() != 1 or counts.max() != 1:
            return None, f"the windows put into {b.name} do not cover it exactly once on every PE"
    slot_of = {word: i for i, word in enumerate(landing)}
    waits: dict[int, WaitCopies] = {}
    copied: set[int] = set()
    for w, loops in placed:
        if not isinstance(w, SignalWait) or w.cmp not in (Cmp.EQ, Cmp.GE):
            continue
        slots = []
        for env in points(kernel, loops):
            word = (w.word.buffer, tuple(evaluate(e, env) for e in w.word.starts))
            slot = slot_of.get(word, -1)
            if slot < 0 or slot in copied or static_value(w.value) != landing[word][1]:
                slots.append(-1)
            else:
                copied.add(slot)
                slots.append(slot)
        if any(s >= 0 for s in slots):
            waits[id(w)] = WaitCopies(loops, tuple(slots))
    assert len(copied) == len(slot_of)  # signalled_problem proved every word awaited with its value
    windows = tuple(tuple(landing[word][0][pe] for word in landing) for pe in range(npes))
    if npes * len(slot_of) + sum(len(c.slots) for c in waits.values()) > MAX_TABLE_ENTRIES:
        return None, f"more than {MAX_TABLE_ENTRIES} table entries"
    plan = StageOut(tuple(kernel.params.index(b) for b in kept), windows, waits)  # type: ignore[arg-type]
    return plan, "; ".join(f"{b.name} copied out by the handler: {why}" for b, why in refused.items())


def _buffer_problem(buf: Buffer, puts: list[Put], others: list[Stmt]) -> str | None:
    for s in others:
        if buf in buffers_of(s):
            return f"{s.op_name} at {s.loc} names it (only the puts may)"
    for p in puts:
        if p.src.buffer is buf:
            return f"the put at {p.loc} reads it"
        if p.dst.buffer is not buf:
            continue
        if p.size is not None:
            return f"the put at {p.loc} moves a run-time number of bytes"
        if not all(depends_only_on(e, (VarKind.PROGRAM_ID, VarKind.LOOP, VarKind.PE)) for e in p.dst.starts):
            return f"the put at {p.loc} writes a window whose start depends on more than the PE, block and loops"
    return None


def _window(region: Region, starts: tuple[int, ...], home: int, param: int) -> Window | None:
    """The window of `region` at `starts` as rows of one pitch, or None (not 2-D, or out of the buffer)."""
    shape, sizes = region.buffer.shape, region.sizes
    if any(s < 0 or s + n > d for s, n, d in zip(starts, sizes, shape)):
        return None
    item = region.buffer.dtype.itemsize
    strides = [item * math.prod(shape[d + 1:]) for d in range(len(shape))]
    # the innermost dimension the window does not span whole: the runs are that long
    inner = max((d for d in range(len(shape)) if sizes[d] != shape[d]), default=0)
    run = sizes[inner] * strides[inner]
    outer = [d for d in range(inner) if sizes[d] > 1]
    if len(outer) > 1:
        return None
    rows = sizes[outer[0]] if outer else 1
    pitch = strides[outer[0]] if outer else run
    offset = sum(s * st for s, st in zip(starts, strides))
    return Window(home, param, offset, rows, run, pitch)


# ---- code --------------------------------------------------------------------------------------------

def declarations(plan: StageOut, waits: list[SignalWait]) -> list[str]:
    """The tables, at file scope: windows by (PE, slot), and each copying wait's slots by point."""
    lines = [f"__device__ const TsStageWindow ts_stage_windows[{plan.slots * len(plan.windows)}] = {{"
             "  // [PE][slot]: {home, param, offset, rows, row bytes, pitch}"]
    for pe, per_pe in enumerate(plan.windows):
        lines.append(f"  // PE {pe}")
        lines += _wrapped([f"{{{w.home}, {w.param}, {w.offset}, {w.rows}, {w.row_bytes}, {w.pitch}}}" for w in per_pe])
    lines.append("};")
    for k, w in enumerate(waits):
        copies = plan.waits[id(w)]
        lines.append(f"__device__ const int32_t ts_stage_slots_{k}[{len(copies.slots)}] = {{  // wait at {w.loc}")
        lines += _wrapped([str(s) for s in copies.slots])
        lines.append("};")
    return lines


def _wrapped(items: list[str], width: int = 112) -> list[str]:
    lines, line = [], "  "
    for item in items:
        if len(line) + len(item) + 2 > width and line.strip():
            lines.append(line.rstrip())
            line = "  "
        line += item + ", "
    if line.strip():
        lines.append(line.rstrip())
    return lines


def copy_lines(plan: StageOut, wait: SignalWait, k: int, grid: tuple[int, ...]) -> list[str]:
    """After wait `k` (declarations' order) and its block barrier: the window this point copies, if any."""
    index = point_index(plan.waits[id(wait)], grid)
    return [
        "{  // the window this wait's signal announced, copied to XLA's buffer (codegen/stage_out.py)",
        f"  const int32_t ts_slot = ts_stage_slots_{k}[{c_expr(index)}];",
        f"  if (ts_slot >= 0) ts_stage_out(args, ts_stage_windows[args.pe * {plan.slots} + ts_slot]);",
        "}",
    ]


def point_index(copies: WaitCopies, grid: tuple[int, ...]) -> Expr:
    """The index of a (block, iteration) point into `copies.slots`: the enumeration order of
    end_of_call.points (the grid's first axis slowest, then the loops, outermost first)."""
    index: Expr = Const(0)
    for axis, extent in enumerate(grid):
        index = index * extent + program_id_var(axis)
    for lp in copies.loops:
        index = index * lp.extent + lp.var
    return index


def copying_waits(kernel: KernelIR, plan: StageOut) -> list[SignalWait]:
    """The waits that copy, in the kernel's order (their tables' numbering)."""
    return [s for s in walk_stmts(kernel.body) if isinstance(s, SignalWait) and id(s) in plan.waits]


__all__ = ["StageOut", "WaitCopies", "Window", "copy_lines", "copying_waits", "declarations", "point_index",
           "stage_out"]
