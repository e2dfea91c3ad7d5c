"""The emission both tensor-core plans share (`gemm_sm80.Sm80Plan`, `gemm_sm90.Sm90Plan` derive
from `TensorCorePlan`): which statements a plan owns, and everything it does with a fragment it
keeps in registers outside its loops.

A plan keeps each accumulator fragment as a per-thread C array in its instruction's register
layout: two neighbouring columns (a pair) per access, which `PairWalk` describes (the plan's
unrolled loops over this thread's pairs, and the fragment row and column of each). On top of that
walk this module writes, once for both plans: `T.clear`/`T.fill` of the fragment, and whole-fragment
`T.copy` to and from memory (`fragment_store`, `fragment_load`: 16/32-bit pair stores where the
destination is provably aligned, conversion, and the guards of a window that may pass the end of
its buffer). Each plan keeps only what differs: its loops (`loop_lines`), its register layout
(`pair_walk`), and where the block meets around the copies (`STORE_SYNC`, `LOAD_SYNC`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ..ir.cluster import ClusterCopy
from ..ir.expr import Expr, affine_form
from ..ir.nodes import Buffer, Copy, Fill, Loop, Region, Stmt
from ..ir.tile_ops import Parallel
from .cluster import PEER_NAME, peer_base
from .common import INDENT, indent
from .compute import typed_base
from .context import Ctx, Frame
from .expr_printer import c_expr, c_identifier, var_name
from .gemm_pattern import PlannedLoop, as_local_copy, register_epilogue, shared_with_others
from .regions import element_offset, row_major_strides
from .tile_ops import ValuePrinter, enclosing_ranges, float_literal, storage_type

# 16-bit and 32-bit element types -> (the C pair type, the function that packs two floats into it)
PAIR_TYPES = {
    "__nv_bfloat16": ("__nv_bfloat162", "__floats2bfloat162_rn"),
    "__half": ("__half2", "__floats2half2_rn"),
    "float": ("float2", "make_float2"),
}


def acc_name(buf: Buffer) -> str:
    """The C name of a fragment the plans keep in registers."""
    return f"ts_acc_{c_identifier(buf.name)}"


# `pair(e)` of a fragment copy: the lines that move one thread's pair of accumulators at fragment
# (ts_row, ts_col + j), j = 0, 1; `e(j)` spells the C index of the pair's element j (`[m][i + j]`).
PairLines = Callable[[Callable[[int], str]], list[str]]


@dataclass(frozen=True)
class PairWalk:
    """How one thread visits its accumulator pairs of a fragment: after `preamble`, two unrolled
    loops (`outer`, `inner`: C variable and extent) and a third over the two row halves (`ts_h`,
    rows +0 and +8); there `position` binds the pair's fragment row `ts_row` and first column
    `ts_col`, and `element(j)` spells the C index of its element j."""

    preamble: tuple[str, ...]
    outer: tuple[str, int]
    inner: tuple[str, int]
    position: tuple[str, ...]
    element: Callable[[int], str]

    def loops(self, body: Sequence[str]) -> list[str]:
        """`body` inside the three loops, fully unrolled so the array stays in registers."""
        (o, no), (i, ni) = self.outer, self.inner
        return [
            "#pragma unroll",
            f"for (int {o} = 0; {o} < {no}; ++{o}) {{",
            f"{INDENT}#pragma unroll",
            f"{INDENT}for (int {i} = 0; {i} < {ni}; ++{i}) {{",
            f"{INDENT * 2}#pragma unroll",
            f"{INDENT * 2}for (int ts_h = 0; ts_h < 2; ++ts_h) {{",
            *indent(list(body), 3),
            f"{INDENT * 2}}}",
            f"{INDENT}}}",
            "}",
        ]

    def for_each_pair(self, pair: PairLines) -> list[str]:
        """`pair(element)` for each pair, with `ts_row` and `ts_col` bound."""
        return [*self.preamble, *self.loops([*self.position, "(void)ts_row; (void)ts_col;", *pair(self.element)])]


class TensorCorePlan(ABC):
    """What the two tensor-core plans share (the module doc); the `GemmPlan` interface
    (context.py), with the defaults of a plan that adds no producer, headers or parameters."""

    loops: Sequence[PlannedLoop]
    arch: str
    notes: list[str]
    # The block barriers around a copy between a register fragment and memory: (before, after),
    # each the note of a barrier or None for none.
    STORE_SYNC: tuple[str | None, str | None] = (None, None)
    LOAD_SYNC: tuple[str | None, str | None] = (None, None)

    # ---- what differs ----

    @property
    @abstractmethod
    def frame(self) -> Frame: ...

    @abstractmethod
    def register_buffers(self) -> frozenset[Buffer]: ...

    @abstractmethod
    def pair_walk(self, buf: Buffer) -> PairWalk:
        """This thread's walk over its accumulator pairs of the register fragment `buf`."""

    @abstractmethod
    def loop_lines(self, gl: PlannedLoop, ctx: Ctx) -> list[str]:
        """The code of a planned loop."""

    @abstractmethod
    def accumulators(self) -> list[str]: ...

    # ---- the statements the plan owns ----

    def loop_of(self, loop: Loop) -> PlannedLoop | None:
        return next((gl for gl in self.loops if gl.loop is loop), None)

    def lines(self, stmt: Stmt, ctx: Ctx) -> list[str] | None:
        """Lines for `stmt` when this plan owns it (a planned loop, or a statement on a register
        fragment), else None."""
        if isinstance(stmt, Loop):
            gl = self.loop_of(stmt)
            return None if gl is None else self.loop_lines(gl, ctx)
        registers = self.register_buffers()
        if isinstance(stmt, Fill) and stmt.dst.buffer in registers:
            name, v = acc_name(stmt.dst.buffer), float_literal(stmt.value, np.dtype(np.float32))
            return self.pair_walk(stmt.dst.buffer).for_each_pair(
                lambda e: [f"{name}{e(0)} = {v};", f"{name}{e(1)} = {v};"])
        if isinstance(stmt, Parallel) and (st := register_epilogue(stmt, registers)) is not None:
            return self.epilogue_lines(stmt, st.dst.buffer, ctx)
        if isinstance(stmt, ClusterCopy) and registers & {stmt.src.buffer, stmt.dst.buffer}:
            return self.cluster_lines(stmt, ctx)
        if isinstance(stmt, Copy) and stmt.src.buffer in registers:
            return self.store_lines(stmt, ctx)
        if isinstance(stmt, Copy) and stmt.dst.buffer in registers:
            return self.load_lines(stmt, ctx)
        return None

    def store_lines(self, s: Copy, ctx: Ctx) -> list[str]:
        """The register fragment `s.src` copied into its window."""
        return self._fragment_copy(s, ctx, store=True)

    def load_lines(self, s: Copy, ctx: Ctx) -> list[str]:
        """A window copied into the register fragment `s.dst`."""
        return self._fragment_copy(s, ctx, store=False)

    def cluster_lines(self, s: ClusterCopy, ctx: Ctx) -> list[str]:
        """The register fragment copied into a peer block's shared tile, or out of one (codegen/cluster.py):
        as a copy to or from this block's tile, through the peer's mapping of it."""
        return self._fragment_copy(as_local_copy(s), ctx, store=s.remote_dst, base=PEER_NAME,
                                   prelude=peer_base(s, ctx))

    def _fragment_copy(self, s: Copy, ctx: Ctx, store: bool, base: str | None = None,
                       prelude: list[str] | None = None) -> list[str]:
        """A register fragment stored into its window (`store`) or loaded from it, the window's buffer addressed
        through `base` when given (after `prelude`, the lines that define it), between the plan's barriers."""
        setup, pair = (fragment_store if store else fragment_load)(s, ctx, base)
        frag = s.src.buffer if store else s.dst.buffer
        lines = [*(prelude or []), *setup, *self.pair_walk(frag).for_each_pair(pair)]
        if base is not None:  # a peer block's tile: the cluster's barrier (T.cluster_sync) orders the copy after it
            return _synced(ctx, self.STORE_SYNC if store else self.LOAD_SYNC, lines)
        return _synced(ctx, self.copy_sync(s, ctx, store), lines)

    def copy_sync(self, s: Copy, ctx: Ctx, store: bool) -> tuple[str | None, str | None]:
        """The barriers around a fragment copy to or from this block's or global memory: STORE_SYNC or LOAD_SYNC
        unless a plan knows better."""
        return self.STORE_SYNC if store else self.LOAD_SYNC

    def epilogue_lines(self, s: Parallel, frag: Buffer, ctx: Ctx) -> list[str]:
        """An element-wise update of the register fragment `frag` (gemm_pattern.register_epilogue):
        each thread computes the new value of each of its accumulators, the Parallel's variables
        bound to the accumulator's row and column; no barrier (no thread reads another's accumulators) unless it
        reads a tile another statement uses (gemm_pattern.shared_with_others)."""
        ranges = {**enclosing_ranges(ctx.kernel, s), **{v: (0, e - 1) for v, e in zip(s.vars, s.extents)}}
        name = acc_name(frag)
        value = s.body[0].value  # type: ignore[attr-defined]
        vi, vj = (var_name(v) for v in s.vars)
        f32 = np.dtype(np.float32)

        def pair(e: Callable[[int], str]) -> list[str]:
            lines = []
            for j in (0, 1):
                p = _AccumulatorPrinter(ctx, ranges, frozenset(self.register_buffers()), f"{name}{e(j)}")
                lines += [f"{{  // column +{j}", f"{INDENT}const int64_t {vi} = ts_row, {vj} = ts_col + {j};",
                          f"{INDENT}(void){vi}; (void){vj};",
                          f"{INDENT}{name}{e(j)} = {p.operand(value, f32, s.loc)};", "}"]
            return lines

        lines = self.pair_walk(frag).for_each_pair(pair)
        if shared_with_others(s, self.register_buffers(), ctx.kernel.body):  # it reads a tile others rewrite
            lines += ctx.block_sync(SHARED_SYNC_NOTE)
        return lines

    # ---- facts for the layout ----

    def stage_buffers(self) -> dict[Buffer, int]:
        """Shared tiles -> bytes of all their stages (the largest ring when loops share a tile)."""
        return stage_bytes(self.loops)

    def barrier_words(self) -> int:
        return 0

    # ---- what the kernel around the statements needs (none by default) ----

    def device_headers(self) -> tuple[str, ...]:
        return ()

    def declarations(self) -> list[str]:
        return []

    def kernel_params(self) -> str:
        return ""

    def tensor_map_fields(self) -> tuple[int, ...]:
        return ()

    def setup(self, ctx: Ctx) -> list[str]:
        return []

    def producer(self, ctx: Ctx) -> list[str]:
        return []

    def consumer_exit(self) -> list[str]:
        return []


def stage_bytes(loops: Sequence[PlannedLoop]) -> dict[Buffer, int]:
    """Shared tiles -> bytes of all their stages over `loops` (the largest ring of a shared tile)."""
    out: dict[Buffer, int] = {}
    for gl in loops:
        for t in (gl.a, gl.b):
            out[t.buffer] = max(out.get(t.buffer, 0), t.stage_bytes * gl.stages)
    return out


# The note of the barrier after a statement a plan owns whose window or operand another statement uses
SHARED_SYNC_NOTE = "like every block-level statement: later ones may use what it touched"


def _synced(ctx: Ctx, notes: tuple[str | None, str | None], lines: list[str]) -> list[str]:
    before, after = (ctx.block_sync(note) if note is not None else [] for note in notes)
    return [*before, *lines, *after]


# ---- fragment copies -------------------------------------------------------------------------------


def even(offset: Expr) -> bool:
    """Whether an element offset is provably even (pair stores need 2-element alignment)."""
    form = affine_form(offset)
    return form is not None and form[1] % 2 == 0 and all(c % 2 == 0 for c in form[0].values())


def fragment_store(s: Copy, ctx: Ctx, base: str | None = None) -> tuple[list[str], PairLines]:
    """A register fragment copied into its (global or shared) window, for a plan's pair loops: the
    set-up lines (the room left in a clipped window, the window's pointer `ts_dst`) and `pair(e)`.
    Pairs of 16- or 32-bit elements in contiguous rows go in one aligned store; elements past the
    end of a clipped window are skipped. `base`: a mapping of the window's buffer (a peer block's)."""
    buf, dst = s.src.buffer, s.dst
    t = storage_type(dst.buffer.dtype, s.loc)
    r_stride, c_stride = row_major_strides(dst.buffer.shape)[-2:]
    name = acc_name(buf)
    setup, inside = _pair_guard(s)
    pair = PAIR_TYPES.get(t)
    if s.transpose:  # element (row, col) of the fragment to dst[col, row]: a pair's two elements lie a row apart
        def store(e: Callable[[int], str]) -> list[str]:
            return [_guarded(f"ts_dst[(int64_t)(ts_col + {j}) * {r_stride} + (int64_t)ts_row * {c_stride}] = "
                             f"ts_from_float<{t}>({name}{e(j)});", inside(j)) for j in (0, 1)]
    elif pair is not None and c_stride == 1 and r_stride % 2 == 0 and even(element_offset(dst)):
        # Clipped, a pair is inside or outside as a whole: the row length and the pair's first
        # column in the buffer are both even.
        ctype, make = pair

        def store(e: Callable[[int], str]) -> list[str]:
            return [_guarded(f"*reinterpret_cast<{ctype}*>(ts_dst + (int64_t)ts_row * {r_stride} + ts_col) = "
                             f"{make}({name}{e(0)}, {name}{e(1)});", inside(0))]
    else:
        def store(e: Callable[[int], str]) -> list[str]:
            return [_guarded(f"ts_dst[(int64_t)ts_row * {r_stride} + (int64_t)(ts_col + {j}) * {c_stride}] = "
                             f"ts_from_float<{t}>({name}{e(j)});", inside(j)) for j in (0, 1)]
    pointer = f"{t}* const ts_dst = {typed_base(ctx, dst.buffer, s.loc, base)} + {c_expr(element_offset(dst))};"
    return [*setup, pointer], store


def fragment_load(s: Copy, ctx: Ctx, base: str | None = None) -> tuple[list[str], PairLines]:
    """A window copied into a register fragment, for a plan's pair loops: the set-up lines (as in
    `fragment_store`, the pointer `ts_src`) and `pair(e)`; elements past the end of a clipped
    window read as zero."""
    buf, src = s.dst.buffer, s.src
    t = storage_type(src.buffer.dtype, s.loc)
    r_stride, c_stride = row_major_strides(src.buffer.shape)[-2:]
    name = acc_name(buf)
    setup, inside = _pair_guard(s)

    def load(e: Callable[[int], str]) -> list[str]:
        lines = []
        for j in (0, 1):
            value = f"ts_to_float<{t}>(ts_src[(int64_t)ts_row * {r_stride} + (int64_t)(ts_col + {j}) * {c_stride}])"
            cond = inside(j)
            lines.append(f"{name}{e(j)} = {f'({cond}) ? {value} : 0.0f' if cond else value};")
        return lines

    pointer = f"const {t}* const ts_src = {typed_base(ctx, src.buffer, s.loc, base)} + {c_expr(element_offset(src))};"
    return [*setup, pointer], load


def _guarded(line: str, cond: str) -> str:
    return f"if ({cond}) {line}" if cond else line


def _pair_guard(s: Copy) -> tuple[list[str], Callable[[int], str]]:
    """For a copy between a register fragment and a window that may pass the end of its global
    buffer (`Copy.clip_dims`): set-up lines and `inside(j)`, the C condition that fragment element
    (ts_row, ts_col + j) lies inside the buffer ("" for an unclipped copy)."""
    if not s.clip_dims:
        return [], lambda j: ""
    region = s.global_side
    rank = len(region.sizes)
    setup, leading = [], []
    for d in s.clip_dims:
        limit = f"(int64_t)({region.buffer.shape[d]}) - (int64_t)({c_expr(region.starts[d])})"
        setup.append(f"const int64_t ts_room{d} = {limit};  // elements of dimension {d} left in the buffer")
        if d < rank - 2:  # a leading dimension of size 1: the whole window is in or out
            leading.append(f"ts_room{d} > 0")

    # the fragment's (row, column) face the window's last two dimensions, or the other way round (transposed)
    row_dim, col_dim = (rank - 1, rank - 2) if s.transpose else (rank - 2, rank - 1)

    def inside(j: int) -> str:
        terms = list(leading)
        if row_dim in s.clip_dims:
            terms.append(f"ts_row < ts_room{row_dim}")
        if col_dim in s.clip_dims:
            terms.append(f"ts_col{f' + {j}' if j else ''} < ts_room{col_dim}")
        return " && ".join(terms)

    return setup, inside


class _AccumulatorPrinter(ValuePrinter):
    """Values of an element-wise fragment update: a read of the register fragment is the
    accumulator being updated (`register_epilogue` allows no other read of it)."""

    def __init__(self, ctx: Ctx, ranges: dict, registers: frozenset[Buffer], accumulator: str):
        super().__init__(ctx, ranges)
        self.registers, self.accumulator = registers, accumulator

    def element(self, region: Region, loc: object) -> str:
        return self.accumulator if region.buffer in self.registers else super().element(region, loc)
