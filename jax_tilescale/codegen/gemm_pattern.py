"""What the two tensor-core GEMM plans (`gemm_sm90`, `gemm_sm80`) share in planning: the shape of
the loop they take over, what they record of it, and which other uses of its fragment they lower.

The loop is TileLang's GEMM step: its body is exactly two copies of tiles into buffers and one
`T.gemm` of those two tiles into a whole float32 2-D fragment. Each plan then checks what its
instructions need on top (tile shapes, alignment, where the tiles come from). Their shared
emission is gemm_emit.py.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, is_dataclass
from typing import Generic, NamedTuple, TypeVar

import numpy as np

from ..ir.cluster import ClusterCopy
from ..ir.expr import Const
from ..ir.nodes import Buffer, BufferKind, Copy, Fill, Gemm, Loop, Region, Stmt, walk_stmts
from ..ir.tile_ops import Parallel, Store
from ..ir.values import reads

T = TypeVar("T", bound="StagedTile")


@dataclass(frozen=True)
class StagedTile:
    """A shared tile a planned loop fills each iteration: `rows` x `cols`, `cols` contiguous (as
    in its global source), one copy per ring stage."""

    buffer: Buffer
    copy: Copy
    rows: int
    cols: int

    @property
    def stage_bytes(self) -> int:
        return self.rows * self.cols * self.buffer.dtype.itemsize


@dataclass(frozen=True)
class PlannedLoop:
    """A GEMM loop a plan took: `index` in the plan, its tiles, the gemm into fragment `acc`
    (M x N, K per iteration), and the ring depth."""

    loop: Loop
    index: int
    a: StagedTile
    b: StagedTile
    gemm: Gemm
    acc: Buffer
    m: int
    n: int
    k: int
    stages: int

    @property
    def stage_bytes(self) -> int:
        return self.a.stage_bytes + self.b.stage_bytes


def whole(region: Region) -> bool:
    """Whether `region` is its whole buffer."""
    return region.sizes == region.buffer.shape and all(s == Const(0) for s in region.starts)


def buffers_of(s: Stmt) -> set[Buffer]:
    """Every buffer a statement names (regions, element expressions, anything nested), except
    through the statement lists it holds (those statements are visited on their own)."""
    out: set[Buffer] = set()

    def visit(value: object) -> None:
        if isinstance(value, Buffer):
            out.add(value)
        elif isinstance(value, (tuple, list)):
            if value and all(isinstance(v, Stmt) for v in value):
                return
            for v in value:
                visit(v)
        elif is_dataclass(value) and not isinstance(value, type):
            for f in fields(value):
                visit(getattr(value, f.name))

    for f in fields(s):
        visit(getattr(s, f.name))
    return out


class GemmStep(NamedTuple, Generic[T]):
    """A matched GEMM step: the gemm, its A and B tiles (as the plan records them), M, N, K."""

    gemm: Gemm
    a: T
    b: T
    m: int
    n: int
    k: int


def match_gemm_step(loop: Loop, input_types: Mapping, unit: str, tile: Callable[[Copy], T | str],
                    kinds: str = "fp16/bf16") -> GemmStep[T] | str:
    """The step when `loop`'s body is `copy, copy, gemm` of those two tiles into a whole 2-D
    float32 fragment with inputs in `input_types` (`kinds` in words), `tile(copy)` accepts both
    copies (A's first) and the tiles multiply; else why not (`unit` names the instruction)."""
    body = loop.body
    if len(body) != 3 or not isinstance(body[2], Gemm) or not all(isinstance(s, Copy) for s in body[:2]):
        return "the body is not `copy, copy, gemm`"
    if any(s.transpose for s in body[:2]):  # type: ignore[union-attr]
        return "a copy of the body is transposed (load the tile as stored; gemm's transpose_A / transpose_B)"
    g: Gemm = body[2]  # type: ignore[assignment]
    copies = {s.dst.buffer: s for s in body[:2]}  # type: ignore[union-attr]
    if g.a.buffer not in copies or g.b.buffer not in copies or g.a.buffer is g.b.buffer:
        return "the gemm's A and B are not the two tiles the loop copies"
    if not (whole(g.a) and whole(g.b) and whole(g.c)):
        return "the gemm's operands are not whole tiles"
    dt = g.a.buffer.dtype
    if g.b.buffer.dtype != dt or dt not in input_types:
        return f"{unit} here takes {kinds} tiles, not {dt.name}/{g.b.buffer.dtype.name}"
    acc = g.c.buffer
    if acc.kind is not BufferKind.FRAGMENT or acc.dtype != np.dtype(np.float32) or len(acc.shape) != 2:
        return "C is not a 2-D float32 fragment"
    a, b = tile(copies[g.a.buffer]), tile(copies[g.b.buffer])
    if isinstance(a, str):
        return a
    if isinstance(b, str):
        return b
    # Tiles as stored: a transposed operand swaps its dimensions.
    m, k = (a.cols, a.rows) if g.transpose_a else (a.rows, a.cols)
    k2, n = (b.cols, b.rows) if g.transpose_b else (b.rows, b.cols)
    if k != k2 or acc.shape != (m, n):
        return "the tile shapes do not multiply"
    return GemmStep(g, a, b, m, n, k)


def fragment_use_ok(s: Stmt, registers: set[Buffer]) -> bool:
    """Whether `s`, which names a fragment the plan keeps in `registers`, uses it the way the
    plans lower (gemm_emit.TensorCorePlan.lines): a fill of the whole fragment, a copy of the
    whole fragment to or from a window of its shape (in the window's last two dimensions) that is
    not a register fragment too (a peer block's shared tile too: `T.cluster_tile`), or an element-wise
    update of it (`register_epilogue`)."""
    if isinstance(s, ClusterCopy):
        s = as_local_copy(s)
    if isinstance(s, Fill):
        return whole(s.dst)
    if isinstance(s, Parallel):
        return register_epilogue(s, registers) is not None
    if not isinstance(s, Copy) or (s.src.buffer in registers) == (s.dst.buffer in registers):
        return False
    frag, window = (s.src, s.dst) if s.src.buffer in registers else (s.dst, s.src)
    if s.transpose:  # a store of the whole fragment, dst[i, j] = frag[j, i] (2-D: the verifier)
        return frag is s.src and whole(frag) and window.sizes == frag.sizes[::-1]
    return whole(frag) and len(window.sizes) >= 2 and window.sizes[-2:] == frag.sizes


def as_local_copy(s: ClusterCopy) -> Copy:
    """A cluster copy as the plain copy of the same regions: the plans lower it so, with the peer's
    tile addressed through its mapping (gemm_emit.TensorCorePlan.lines)."""
    return Copy(s.src, s.dst, loc=s.loc)


def register_epilogue(s: Parallel, registers: set[Buffer] | frozenset[Buffer]) -> Store | None:
    """The store of `for i, j in T.Parallel(M, N): C[i, j] = f(C[i, j], ...)` when it is an
    element-wise update of a whole M x N register fragment C (per-tensor scales, a bias, an
    activation in the epilogue): one store to C[i, j] whose value reads register fragments only at
    C[i, j] (each thread owns its accumulators, so no barrier is needed). Else None."""
    if len(s.vars) != 2 or len(s.body) != 1 or not isinstance(s.body[0], Store):
        return None
    st: Store = s.body[0]  # type: ignore[assignment]
    frag = st.dst.buffer
    at = tuple(s.vars)
    if frag not in registers or frag.shape != tuple(s.extents) or st.dst.starts != at:
        return None
    for r in reads(st.value):
        if r.region.buffer in registers and (r.region.buffer is not frag or r.region.starts != at):
            return None
    return st


def shared_with_others(s: Stmt, registers: set[Buffer] | frozenset[Buffer], body: tuple[Stmt, ...]) -> set[Buffer]:
    """The buffers a statement the plans own (a fragment copy, an element-wise epilogue) touches that another
    statement of `body` also uses, besides register fragments and the kernel's read-only inputs: where the block
    must meet after `s`, as after every block-level statement (a shared tile a later T.Parallel reads, or rewrites
    while slower threads still read it)."""
    mine = {b for b in buffers_of(s) if b not in registers and b.kind is not BufferKind.INPUT}
    if isinstance(s, Parallel):  # its store is one of the statements walk_stmts visits: not another use
        mine |= {b for st in s.body for b in buffers_of(st) if b not in registers and b.kind is not BufferKind.INPUT}
        own = {id(s), *(id(t) for t in walk_stmts(s.body))}
    else:
        own = {id(s)}
    return {b for t in walk_stmts(body) if id(t) not in own for b in buffers_of(t) if b in mine}


def epilogue_statements(stmts: list[Stmt], registers: set[Buffer] | frozenset[Buffer]) -> set[int]:
    """Ids of the statements inside the kernel's element-wise fragment updates (`register_epilogue`):
    the plan lowers each update as a whole, so its store is not another use of the fragment."""
    return {id(st) for s in stmts if isinstance(s, Parallel) and (st := register_epilogue(s, registers)) is not None}
