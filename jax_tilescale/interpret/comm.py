"""Interpreter rules of the point-to-point statements beyond the put: gets, direct peer
copies (put_block/get_block), signal_op and the wait_* family; and the run-time sizes of puts
and gets. Each rule registers itself in block.INTERPRET.

Meanings (docs/architecture.md): a blocking get reads the peer now; a `_nbi` get poisons its
destination at issue and reads the peer only when delivered (quiet, barrier, kernel end, or when
nothing else can progress), so a read before the quiet sees poison. Peer copies are plain loads
and stores through `nvshmem_ptr`: immediate. signal_op is a transfer with only a signal (it
completes at quiet; fence orders it). Scopes change nothing here: each statement runs once per
block.
"""

from __future__ import annotations

import math

from ..errors import KernelRuntimeError
from ..ir.control import THREAD_VAR
from ..ir.expr import format_expr
from ..ir.nodes import BLOCK_LOCAL, Direction, Get, PeerCopy, Put, Region, RemoteSignal, WaitUntil
from .block import INTERPRET, BlockContext
from .memory import SIGNAL_MODULUS, AccessKind, ResolvedRegion, poisoned, where
from .registers import wrap_int
from .transfers import RemoteRead, SignalDelivery
from .waits import SignalWaitOn, Wait


def resolve_pair(ctx: BlockContext, s: Put | Get) -> tuple[ResolvedRegion, ResolvedRegion]:
    """(src, dst) of a put or get. With a run-time byte count, each starts at one row (which may
    be one past the last when nothing moves) and spans `size` bytes of whole rows, which must
    stay inside both buffers."""
    if s.size is None:
        return ctx.resolve(s.src, "src", s), ctx.resolve(s.dst, "dst", s)
    nbytes = ctx.eval(s.size, "the size", s)
    row_bytes = math.prod(s.src.buffer.shape[1:]) * s.src.buffer.dtype.itemsize
    at = where(ctx.pe, ctx.block, s.loc)
    if nbytes < 0:
        raise KernelRuntimeError(f"{s.op_name}: size={format_expr(s.size)} is negative: {nbytes} bytes {at}")
    if nbytes % row_bytes:
        raise KernelRuntimeError(
            f"{s.op_name}: size={format_expr(s.size)} is {nbytes} bytes, not a whole number of {row_bytes}-byte "
            f"rows {at}"
        )
    rows = nbytes // row_bytes
    out = []
    for region, role in ((s.src, "source"), (s.dst, "destination")):
        start = ctx.resolve(Region(region.buffer, region.starts, (0, *region.sizes[1:])), role, s)
        extent = region.buffer.shape[0]
        if start.starts[0] + rows > extent:
            raise KernelRuntimeError(
                f"{s.op_name}: size={format_expr(s.size)} is {rows} rows from row {start.starts[0]} of the {role} "
                f"{region.buffer.name}, past its {extent} rows {at}"
            )
        out.append(ResolvedRegion(region.buffer, start.starts, (rows, *region.sizes[1:])))
    return out[0], out[1]


@INTERPRET.register(Get)
def get(ctx: BlockContext, s: Get) -> None:
    peer = ctx.target_pe(s.pe, s, "source PE")
    src, dst = resolve_pair(ctx, s)  # symmetric addresses: evaluated on the issuing PE
    memory = ctx.world.memory
    if s.blocking:
        data = memory.read(ctx.access(AccessKind.READ, src, s, owner=peer))
        ctx.write(dst, data.reshape(dst.sizes), s)
        return
    # In flight, the destination is undefined: poison, so that a read before the quiet shows.
    ctx.write(dst, poisoned(dst.sizes, dst.buffer.dtype), s)
    tile = ctx.block if dst.buffer.kind in BLOCK_LOCAL else None
    ctx.world.transfer(s, ctx.pe, ctx.block, target=ctx.pe, remote=peer, dst=dst, read=RemoteRead(src, peer),
                       dst_block=tile)


@INTERPRET.register(PeerCopy)
def peer_copy(ctx: BlockContext, s: PeerCopy) -> None:
    peer = ctx.target_pe(s.pe, s, "peer PE")
    src = ctx.resolve(s.src, "src", s)
    dst = ctx.resolve(s.dst, "dst", s)
    memory = ctx.world.memory
    if s.direction is Direction.PUT:
        data = ctx.read(src, s)
        memory.write(ctx.access(AccessKind.WRITE, dst, s, owner=peer), data.reshape(dst.sizes))
    else:
        data = memory.read(ctx.access(AccessKind.READ, src, s, owner=peer))
        ctx.write(dst, data.reshape(dst.sizes), s)


@INTERPRET.register(RemoteSignal)
def remote_signal(ctx: BlockContext, s: RemoteSignal) -> None:
    peer = ctx.target_pe(s.pe, s)
    word = ctx.resolve(s.word, "signal word", s)
    value = ctx.eval(s.value, "the signal value", s) % SIGNAL_MODULUS
    ctx.world.transfer(s, ctx.pe, ctx.block, target=peer, remote=peer, signal=SignalDelivery(word, s.op, value))


@INTERPRET.register(WaitUntil)
def wait_until(ctx: BlockContext, s: WaitUntil) -> Wait:
    owner = ctx.pe if s.pe is None else ctx.target_pe(s.pe, s, "PE of the word")
    word = ctx.resolve(s.word, "word", s)
    value = wrap_int(ctx.eval(s.value, "the compared value", s), word.buffer.dtype)
    return SignalWaitOn(ctx.world.memory, ctx.pe, ctx.block, word, s.cmp, value, s, owner=owner,
                        thread=ctx.env.get(THREAD_VAR))
