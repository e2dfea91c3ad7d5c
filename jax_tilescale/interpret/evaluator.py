"""The interpreter's entry: `block_program` runs the kernel body for one block of one PE.

It is the block as a generator: it yields after every statement (None, or the wait to satisfy
before it continues), which lets one thread interleave all blocks of its PE. What each statement
does is its rule in block.INTERPRET (one per statement type, block.py has the kinds); the rules of
copies, fill, gemm, loops, puts, signal waits, quiet, fence and barrier_all are here, the others in
the modules imported below (each registers its own), so the table is complete whenever a block
can run.
"""

from __future__ import annotations

from collections.abc import Generator

import numpy as np

from ..ir.control import THREAD_VAR
from ..ir.nodes import BarrierAll, Copy, Fence, Fill, Gemm, Loop, Put, Quiet, Region, SignalWait, Stmt
from . import cluster_rules, collective_rules, comm, control, tile_ops
from .block import INTERPRET, BlockContext, Body, RunKind, run_body
from .memory import SIGNAL_MODULUS, ResolvedRegion
from .transfers import SignalDelivery
from .waits import SignalWaitOn, Wait

# The modules whose rules fill block.INTERPRET besides this one's (each registers its own).
RULE_MODULES = (cluster_rules, comm, collective_rules, control, tile_ops)


@INTERPRET.register(Copy)
def _copy(ctx: BlockContext, s: Copy) -> None:
    if s.transpose:
        _transposed_copy(ctx, s)
        return
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


def _transposed_copy(ctx: BlockContext, s: Copy) -> None:
    """dst[i, j] = src[j, i] (ir/nodes.py Copy.transpose), cast like any copy from a tile; only the part of a
    clipped destination inside its buffer is written (and the part of src facing it read)."""
    dst = ctx.resolve(s.dst, "dst", s, s.clip_dims)
    rows, cols = dst.sizes  # inside the buffer: src's first `cols` rows and `rows` columns face it
    src = ctx.resolve(s.src, "src", s)
    part = ResolvedRegion(src.buffer, src.starts, (cols, rows))
    ctx.write(dst, ctx.read(part, s).reshape(cols, rows).T.astype(dst.buffer.dtype), s)


@INTERPRET.register(Fill)
def _fill(ctx: BlockContext, s: Fill) -> None:
    dst = ctx.resolve(s.dst, "buffer", s)
    ctx.write(dst, np.full(dst.sizes, s.value, np.float64).astype(dst.buffer.dtype), s)


def _matrix(ctx: BlockContext, region: Region, role: str, s: Gemm, transpose: bool) -> np.ndarray:
    data = ctx.read(ctx.resolve(region, role, s), s)
    m = data.reshape(data.shape[-2:]).astype(np.float32)
    return m.T if transpose else m


@INTERPRET.register(Gemm)
def _gemm(ctx: BlockContext, s: Gemm) -> None:
    a = _matrix(ctx, s.a, "A", s, s.transpose_a)
    b = _matrix(ctx, s.b, "B", s, s.transpose_b)
    c = ctx.resolve(s.c, "C", s)
    product = np.matmul(a, b, dtype=np.float32)
    acc = product if s.clear_accum else ctx.read(c, s).reshape(product.shape) + product
    ctx.write(c, acc.astype(np.float32), s)


@INTERPRET.register(Loop, kind=RunKind.BODY)
def _loop(ctx: BlockContext, s: Loop) -> Body:
    ctx.loops.append(s)
    for i in range(s.extent):
        ctx.env[s.var] = i
        yield from run_body(ctx, s.body)
    del ctx.env[s.var]
    ctx.loops.pop()


@INTERPRET.register(Put)
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


@INTERPRET.register(SignalWait)
def _signal_wait(ctx: BlockContext, s: SignalWait) -> Wait:
    word = ctx.resolve(s.word, "signal word", s)
    value = ctx.eval(s.value, "the compared value", s) % SIGNAL_MODULUS
    return SignalWaitOn(ctx.world.memory, ctx.pe, ctx.block, word, s.cmp, value, s, thread=ctx.env.get(THREAD_VAR))


@INTERPRET.register(Quiet)
def _quiet(ctx: BlockContext, s: Quiet) -> None:
    ctx.world.quiet(ctx.pe, ctx.block)


@INTERPRET.register(Fence)
def _fence(ctx: BlockContext, s: Fence) -> None:
    ctx.world.fence(ctx.pe, ctx.block)


@INTERPRET.register(BarrierAll)
def _barrier_all(ctx: BlockContext, s: BarrierAll) -> Wait:
    return ctx.world.barrier_all(ctx.pe, ctx.block, s)


def block_program(ctx: BlockContext, body: tuple[Stmt, ...]) -> Generator[Wait | None, None, None]:
    """Runs the kernel body for one block; yields after each statement (the wait, if any).

    The caller must hold the world's lock while advancing it and must not resume it before the
    yielded wait is ready.
    """
    yield from run_body(ctx, body)
    end = cluster_rules.end_of_block(ctx)  # a cluster's blocks end together (interpret/cluster_rules.py)
    if end is not None:
        yield end
