"""What each IR statement does, one rule per statement type, run by one block of one PE.

A rule takes the block's context and the statement, does its effect on the world, and returns
a `Wait` when the block must wait (signal_wait_until, barrier_all) or None. `block_program` is
the block as a generator: it yields after every statement (None, or the wait to satisfy before
it continues), which lets one thread interleave all blocks of its PE. Every memory access goes
through `BlockContext.access` and from there through `LaunchMemory.access`.
"""

from __future__ import annotations

from collections.abc import Callable, Generator

import numpy as np

from ..errors import KernelRuntimeError
from ..ir.control import THREAD_VAR
from ..ir.expr import Expr, Load, Var, VarKind, format_expr
from ..ir.nodes import (
    BarrierAll,
    Broadcast,
    BufferKind,
    Copy,
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
from . import collectives, comm, control, tile_ops
from .memory import SIGNAL_MODULUS, Access, AccessKind, Block, ResolvedRegion, eval_index, resolve_region, where
from .transfers import SignalDelivery
from .waits import SignalWaitOn, Wait
from .world import World


class BlockContext:
    """One block of one PE: its program ids, its PE, and the world it runs in."""

    def __init__(self, world: World, pe: int, block: Block):
        self.world, self.pe, self.block = world, pe, block
        self.env: dict[Var, int] = {Var(VarKind.PROGRAM_ID, i): b for i, b in enumerate(block)}
        self.env[Var(VarKind.PE)] = pe
        # Per-thread code (control.py): the threads running a thread-dependent branch (None at
        # block level) and the block's registers.
        self.threads: tuple[int, ...] | None = None
        self.registers = control.Registers(world.kernel.threads)
        # How far the block got, for timeout reports: its current statement and enclosing loops.
        self.stmt: Stmt | None = None
        self.loops: list[Loop] = []

    def eval(self, e: Expr, what: str, stmt: Stmt) -> int:
        return eval_index(e, self.env, what, stmt, self.pe, self.block, self._loader(stmt))

    def resolve(self, region: Region, role: str, stmt: Stmt, clip_dims: tuple[int, ...] = ()) -> ResolvedRegion:
        return resolve_region(region, self.env, role, stmt, self.pe, self.block, self._loader(stmt), clip_dims)

    def _loader(self, stmt: Stmt) -> Callable[[Load, tuple[int, ...]], int]:
        return lambda ld, indices: self.load(ld, indices, stmt)

    def load(self, ld: Load, indices: tuple[int, ...], stmt: Stmt) -> int:
        """T.load: one element of this PE's input, bounds-checked (the verifier checks affine indices)."""
        buf = ld.buffer
        if buf.kind is BufferKind.LOCAL:  # a register of the current thread
            return control.read_register(self, ld, indices, stmt)
        for dim, (i, extent) in enumerate(zip(indices, buf.shape)):
            if not 0 <= i < extent:
                raise KernelRuntimeError(
                    f"{stmt.op_name}: T.load {format_expr(ld)} is out of bounds: index {i} along dimension {dim} of "
                    f"{buf.name} (extent {extent}) {where(self.pe, self.block, stmt.loc)}"
                )
        region = ResolvedRegion(buf, indices, (1,) * len(indices))
        return int(self.world.memory.access(self.access(AccessKind.READ, region, stmt)).reshape(-1)[0])

    def access(self, kind: AccessKind, region: ResolvedRegion, stmt: Stmt, owner: int | None = None) -> Access:
        """Describes an access by this block; `owner` defaults to this PE (and its shared memory)."""
        owner = self.pe if owner is None else owner
        owner_block = self.block if owner == self.pe else None
        return Access(kind, region, owner, owner_block, self.pe, self.block, stmt)

    def read(self, region: ResolvedRegion, stmt: Stmt) -> np.ndarray:
        return self.world.memory.read(self.access(AccessKind.READ, region, stmt))

    def write(self, region: ResolvedRegion, data: np.ndarray, stmt: Stmt) -> None:
        self.world.memory.write(self.access(AccessKind.WRITE, region, stmt), data)

    def target_pe(self, pe: Expr, stmt: Stmt, what: str = "target PE") -> int:
        """Evaluates a PE operand (a put's target, a get's source, a root) and checks it names a
        PE of the kernel's PE space."""
        value = self.eval(pe, f"the {what}", stmt)
        n = self.world.num_pes
        if not 0 <= value < n:
            k = self.world.kernel
            raise KernelRuntimeError(
                f"{stmt.op_name}: {what} {value} (pe={format_expr(pe)}) is out of range: the kernel's PE space "
                f"{k.mesh_axes} has {n} PEs (0..{n - 1}) {where(self.pe, self.block, stmt.loc)}"
            )
        return value


Rule = Callable[[BlockContext, Stmt], "Wait | None"]


def _copy(ctx: BlockContext, s: Copy) -> None:
    if s.clip_dims:
        _clipped_copy(ctx, s)
        return
    src = ctx.resolve(s.src, "src", s)
    dst = ctx.resolve(s.dst, "dst", s)
    data = ctx.read(src, s)
    if data.dtype != dst.buffer.dtype:  # to or from a fragment: numpy's round-to-nearest cast
        data = data.astype(dst.buffer.dtype)
    ctx.write(dst, data, s)


def _clipped_copy(ctx: BlockContext, s: Copy) -> None:
    """A copy whose global window may end past its buffer (ir/nodes.py Copy.clip_dims): only the
    part inside is read or written, so the race detector and coverage see exactly those elements;
    a load writes the whole tile window, zero where the global window is outside its buffer."""
    load = s.global_side is s.src
    glob = ctx.resolve(s.global_side, "src" if load else "dst", s, s.clip_dims)
    tile = ctx.resolve(s.dst if load else s.src, "dst" if load else "src", s)
    # The tile's part that faces the buffer: the k-th dimension of more than one element of the
    # window faces the k-th of the tile (shapes agree once size-1 dimensions are dropped).
    inner = list(tile.sizes)
    g_dims = [d for d, n in enumerate(s.global_side.sizes) if n > 1]
    t_dims = [d for d, n in enumerate(tile.sizes) if n > 1]
    for g, t in zip(g_dims, t_dims):
        inner[t] = glob.sizes[g]
    part = ResolvedRegion(tile.buffer, tile.starts, tuple(inner))
    if load:
        data = np.zeros(tile.sizes, tile.buffer.dtype)
        data[tuple(slice(0, n) for n in inner)] = ctx.read(glob, s).reshape(inner).astype(tile.buffer.dtype)
        ctx.write(tile, data, s)
    else:
        ctx.write(glob, ctx.read(part, s).astype(glob.buffer.dtype), s)


def _fill(ctx: BlockContext, s: Fill) -> None:
    dst = ctx.resolve(s.dst, "buffer", s)
    ctx.write(dst, np.full(dst.sizes, s.value, np.float64).astype(dst.buffer.dtype), s)


def _matrix(ctx: BlockContext, region: Region, role: str, s: Gemm, transpose: bool) -> np.ndarray:
    data = ctx.read(ctx.resolve(region, role, s), s)
    m = data.reshape(data.shape[-2:]).astype(np.float32)
    return m.T if transpose else m


def _gemm(ctx: BlockContext, s: Gemm) -> None:
    a = _matrix(ctx, s.a, "A", s, s.transpose_a)
    b = _matrix(ctx, s.b, "B", s, s.transpose_b)
    c = ctx.resolve(s.c, "C", s)
    product = np.matmul(a, b, dtype=np.float32)
    acc = product if s.clear_accum else ctx.read(c, s).reshape(product.shape) + product
    ctx.write(c, acc.astype(np.float32), s)


def _loop(ctx: BlockContext, s: Loop) -> Generator[Wait | None, None, None]:
    ctx.loops.append(s)
    for i in range(s.extent):
        ctx.env[s.var] = i
        yield from _run_body(ctx, s.body)
    del ctx.env[s.var]
    ctx.loops.pop()


def _put(ctx: BlockContext, s: Put) -> None:
    target = ctx.target_pe(s.pe, s)
    src, dst = comm.resolve_pair(ctx, s)  # dst: a symmetric address, evaluated on the issuing PE
    data = ctx.read(src, s).reshape(dst.sizes)  # snapshot; a `_nbi` put's source stays read until delivery
    signal = None
    if s.signal is not None:
        word = ctx.resolve(s.signal.word, "signal word", s)
        value = ctx.eval(s.signal.value, "the signal value", s) % SIGNAL_MODULUS
        signal = SignalDelivery(word, s.signal.op, value)
    ctx.world.put(s, ctx.pe, ctx.block, target, dst, data, signal, src)


def _signal_wait(ctx: BlockContext, s: SignalWait) -> Wait:
    word = ctx.resolve(s.word, "signal word", s)
    value = ctx.eval(s.value, "the compared value", s) % SIGNAL_MODULUS
    return SignalWaitOn(ctx.world.memory, ctx.pe, ctx.block, word, s.cmp, value, s, thread=ctx.env.get(THREAD_VAR))


def _quiet(ctx: BlockContext, s: Quiet) -> None:
    ctx.world.quiet(ctx.pe, ctx.block)


def _fence(ctx: BlockContext, s: Fence) -> None:
    ctx.world.fence(ctx.pe, ctx.block)


def _barrier_all(ctx: BlockContext, s: BarrierAll) -> Wait:
    return ctx.world.barrier_all(ctx.pe, ctx.block, s)


RULES: dict[type, Rule] = {
    Copy: _copy,
    Put: _put,
    Get: comm.get,
    PeerCopy: comm.peer_copy,
    SignalWait: _signal_wait,
    RemoteSignal: comm.remote_signal,
    WaitUntil: comm.wait_until,
    Quiet: _quiet,
    Fence: _fence,
    BarrierAll: _barrier_all,
    TeamBarrier: collectives.team_barrier,
    Broadcast: collectives.broadcast,
    Fcollect: collectives.fcollect,
    Fill: _fill,
    Gemm: _gemm,
    **control.RULES,
    **tile_ops.RULES,  # T.Parallel, element stores and atomics, reductions
}


def block_program(ctx: BlockContext, body: tuple[Stmt, ...]) -> Generator[Wait | None, None, None]:
    """Runs the kernel body for one block; yields after each statement (the wait, if any).

    The caller must hold the world's lock while advancing it and must not resume it before the
    yielded wait is ready.
    """
    yield from _run_body(ctx, body)


def _run_body(ctx: BlockContext, body: tuple[Stmt, ...]) -> Generator[Wait | None, None, None]:
    for stmt in body:
        ctx.stmt = stmt
        if isinstance(stmt, Loop):  # nested statements yield one by one, so waits inside loops work
            yield from _loop(ctx, stmt)
            continue
        nested = control.NESTED_RULES.get(type(stmt))
        if nested is not None:
            yield from nested(ctx, stmt, _run_body)
            continue
        rule = RULES.get(type(stmt))
        if rule is None:
            raise KernelRuntimeError(f"internal: the interpreter has no rule for {type(stmt).__name__} at {stmt.loc}")
        yield from control.run_stmt(ctx, stmt, rule)  # once for the block, or per active thread
