"""The compute part: loops (`serial`, `Pipelined`), register tiles (`alloc_fragment`), `clear`,
`fill` and `gemm`. The interpreter runs them with numpy; the CUDA code generator lowers them
portably (codegen/compute.py) or, for pipelined GEMM loops on Hopper, to TMA + wgmma
(codegen/gemm_sm90.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from ..errors import KernelTraceError
from ..ir.buffers import MemLevel
from ..ir.expr import Expr, Var, VarKind, static_value
from ..ir.nodes import BufferKind, Fill, Gemm, Loop, Stmt
from ..ir.tile_queue import TICKET_SLOTS, TileQueue
from ._common import RefLike, region
from .memory import _alloc, _shape
from .refs import Ref
from .source import user_source_loc
from .state import current_trace


class _LoopRange:
    """What `T.serial(n)` returns: iterating it traces the body once, with the loop variable."""

    def __init__(self, op: str, n: Any, num_stages: int | None):
        self.loc = user_source_loc()
        if isinstance(n, Expr):  # a kernel value known when tracing (T.get_pe_num(), ...) is a count too
            known = static_value(n)
            if known is None:
                raise KernelTraceError(f"T.{op}: the trip count must be known when the kernel is traced (a Python "
                                       f"int, or a value such as T.get_pe_num()), not a run-time value: {n!r}",
                                       self.loc)
            n = known
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or int(n) < 1:
            raise KernelTraceError(f"T.{op}: the trip count must be a positive Python int, got {n!r}", self.loc)
        if num_stages is not None and (isinstance(num_stages, bool) or not isinstance(num_stages, int)
                                       or num_stages < 1):
            raise KernelTraceError(f"T.{op}: num_stages must be a positive int, got {num_stages!r}", self.loc)
        self.op, self.n, self.num_stages = op, int(n), num_stages

    def __iter__(self) -> Iterator[Var]:
        state = current_trace(self.op)
        self._allocate()
        var = Var(VarKind.LOOP, state.next_loop_id)
        state.next_loop_id += 1
        state.loop_ranges[var] = (0, self.n - 1)  # T.copy decides with it whether a window may clip
        body: list = []
        state.open_bodies.append(body)
        yield var
        if not state.open_bodies or state.open_bodies[-1] is not body:
            raise KernelTraceError(f"T.{self.op}: loops must nest", self.loc)
        state.open_bodies.pop()
        state.emit(self._statement(var, tuple(body)))

    def _allocate(self) -> None:
        """The buffers the loop's statement needs, allocated as its tracing starts (none for a loop)."""

    def _statement(self, var: Var, body: tuple) -> Stmt:
        return Loop(var, self.n, body, self.num_stages, loc=self.loc)


class _TileQueueRange(_LoopRange):
    """What `T.tile_queue(n)` returns: a loop range whose statement is a TileQueue, with its counter and words."""

    def __init__(self, n: Any, static_rounds: int):
        super().__init__("tile_queue", n, None)
        if isinstance(static_rounds, bool) or not isinstance(static_rounds, (int, np.integer)) or static_rounds < 0:
            raise KernelTraceError(f"T.tile_queue: static_rounds must be an int >= 0, got {static_rounds!r}", self.loc)
        self.static_rounds = int(static_rounds)

    def _allocate(self) -> None:
        self.counter = _alloc("tile_queue", "tile_queue", (1,), np.int32, BufferKind.GLOBAL, "tile_queue",
                              level=MemLevel.GLOBAL, left_zero=True).buffer
        self.drawn = _alloc("tile_queue", "tile_drawn", (TICKET_SLOTS,), np.int32, BufferKind.SHARED,
                            "tile_drawn").buffer

    def _statement(self, var: Var, body: tuple) -> Stmt:
        return TileQueue(var, self.n, body, self.counter, self.drawn, self.static_rounds, loc=self.loc)


def serial(n: int) -> _LoopRange:
    """`for i in T.serial(n):` runs the body for i = 0 .. n-1 in order (traced once, i a kernel value)."""
    return _LoopRange("serial", n, None)


def Pipelined(n: int, num_stages: int = 2) -> _LoopRange:
    """`for k in T.Pipelined(n, num_stages=3):` a serial loop whose copies a GPU backend may
    software-pipeline over `num_stages` buffers; the interpreter runs it like `T.serial`."""
    return _LoopRange("Pipelined", n, num_stages)


def tile_queue(n: int, static_rounds: int = 0) -> _LoopRange:
    """`for tile in T.tile_queue(n):` runs the body for every tile 0 .. n-1, each on exactly one block of
    the launch: a block takes its next tile from a counter the blocks share, as it finishes the last one
    (a dynamic tile scheduler for a persistent kernel, grid = SM count: a slow block takes fewer tiles).
    Which block runs which tile changes from run to run; a block's tiles rise. At the top level of the
    kernel only, not in a kernel with clusters, and with nothing in the body that every block must reach
    (barrier_all, collectives, cluster statements): ir/tile_queue.py.
    `static_rounds=W`: each block's first W rounds take tiles `w * blocks + block` without the counter (the static
    deal), the rest are drawn: dynamic only in the launch's tail (W * blocks at most n)."""
    return _TileQueueRange(n, static_rounds)


def alloc_fragment(shape: Any, dtype: Any, *, name: str | None = None) -> Ref:
    """A register tile of the block (accumulators): per block, uninitialised until written."""
    return _alloc("alloc_fragment", "frag", _shape(shape, "alloc_fragment"), dtype, BufferKind.FRAGMENT, name)


def fill(buffer: RefLike, value: float) -> None:
    """Sets every element of a fragment or shared tile (or a slice of one) to `value`."""
    state = current_trace("fill")
    loc = user_source_loc()
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise KernelTraceError(f"T.fill: the value must be a Python number, got {value!r}", loc)
    state.emit(Fill(region(buffer, "fill", "buffer", loc), float(value), loc=loc))


def clear(buffer: RefLike) -> None:
    """`T.fill(buffer, 0)`."""
    state = current_trace("clear")
    loc = user_source_loc()
    state.emit(Fill(region(buffer, "clear", "buffer", loc), 0.0, loc=loc))


def gemm(A: RefLike, B: RefLike, C: RefLike, transpose_A: bool = False, transpose_B: bool = False,
         clear_accum: bool = False) -> None:
    """C += op(A) @ op(B) (C = ... with `clear_accum`): A, B fp16/bf16/fp32 shared or fragment
    tiles, C a float32 fragment (or shared) tile; op transposes when asked. Accumulates in fp32."""
    state = current_trace("gemm")
    loc = user_source_loc()
    state.emit(Gemm(region(A, "gemm", "A", loc), region(B, "gemm", "B", loc), region(C, "gemm", "C", loc),
                    bool(transpose_A), bool(transpose_B), bool(clear_accum), loc=loc))
