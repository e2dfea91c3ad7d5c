"""Verifier rules of the communication statements: transfers, peer copies, signals, waits,
quiet and fence, barriers and team collectives (registered in verify_base.VERIFY)."""

from __future__ import annotations

from ..errors import KernelTraceError
from .buffers import BufferKind
from .expr import format_expr
from .kernel_ir import KernelIR
from .nodes import (
    REMOTE_READABLE,
    REMOTE_WRITABLE,
    WAIT_WORD_KINDS,
    BarrierAll,
    Broadcast,
    Direction,
    Fcollect,
    Fence,
    Get,
    PeerCopy,
    Put,
    Quiet,
    Region,
    RemoteSignal,
    Scope,
    SignalWait,
    SourceLoc,
    Stmt,
    TeamBarrier,
    WaitUntil,
)
from .ranges import Ranges, value_range
from .verify_base import (
    VERIFY,
    check_kind,
    check_not_signal,
    check_pe,
    check_region,
    check_same_shape,
    check_scope,
    check_signal_word,
)

# Where the data of a transfer may land on its own PE (inputs are read-only, signals are words).
LOCAL_WRITABLE = frozenset({BufferKind.OUTPUT, BufferKind.SHARED, BufferKind.SYMMETRIC, BufferKind.GLOBAL})
WAIT_WORD_BYTES = (4, 8)


def _check_row(region: Region, op: str, role: str, loc: SourceLoc) -> None:
    """A transfer with a run-time size starts at one whole row of its buffer."""
    buf = region.buffer
    if region.sizes[0] != 1 or tuple(region.sizes[1:]) != tuple(buf.shape[1:]):
        example = f"{buf.name}[i{', :' * (len(buf.shape) - 1)}]"
        raise KernelTraceError(
            f"{op}: with a run-time size the {role} says where the transfer starts: one whole row of {buf.name}, "
            f"e.g. {example}; got {region}",
            loc,
        )


def _start_row(region: Region) -> Region:
    """A run-time-size transfer's start: its row may be one past the last (with 0 bytes to move)."""
    return Region(region.buffer, region.starts, (0, *region.sizes[1:]))


def _check_transfer_regions(s: Put | Get, ranges: Ranges) -> None:
    op = s.op_name
    src, dst = (s.src, s.dst) if s.size is None else (_start_row(s.src), _start_row(s.dst))
    check_region(src, ranges, f"{op} src", s.loc)
    check_region(dst, ranges, f"{op} dst", s.loc)


def _check_sizes(s: Put | Get, ranges: Ranges) -> None:
    """Static sizes: equal shapes. A run-time byte count: two whole rows of the same shape."""
    op = s.op_name
    if s.size is None:
        check_same_shape(s.src, s.dst, op, s.loc)
        return
    _check_row(s.src, op, "source", s.loc)
    _check_row(s.dst, op, "destination", s.loc)
    if s.src.sizes[1:] != s.dst.sizes[1:] or s.src.buffer.dtype != s.dst.buffer.dtype:
        raise KernelTraceError(
            f"{op}: the rows differ: {s.src.buffer.name} has rows of {s.src.buffer.dtype.name}"
            f"{list(s.src.sizes[1:])}, {s.dst.buffer.name} of {s.dst.buffer.dtype.name}{list(s.dst.sizes[1:])}",
            s.loc,
        )
    rng = value_range(s.size, ranges)
    if rng is not None and rng[0] < 0:
        raise KernelTraceError(f"{op}: size={format_expr(s.size)} can be negative ({rng[0]} bytes)", s.loc)


@VERIFY.register(Put)
def _verify_put(s: Put, kernel: KernelIR, ranges: Ranges) -> None:
    op = s.op_name
    _check_transfer_regions(s, ranges)
    dst_kind = s.dst.buffer.kind
    if dst_kind is BufferKind.INPUT:
        raise KernelTraceError(f"{op}: {s.dst.buffer.name} is a kernel input, which is read-only", s.loc)
    if dst_kind is BufferKind.SHARED:
        raise KernelTraceError(
            f"{op}: the destination {s.dst.buffer.name} is shared memory, which peers cannot address; "
            "put into a kernel output or a T.alloc_symmetric buffer",
            s.loc,
        )
    if dst_kind is BufferKind.GLOBAL:
        raise KernelTraceError(
            f'{op}: the destination {s.dst.buffer.name} is global scratch (T.alloc(level="global")), which only its '
            'own PE addresses; allocate it with level="symmetric" for peers to put into it',
            s.loc,
        )
    if dst_kind is BufferKind.SIGNAL or s.src.buffer.kind is BufferKind.SIGNAL:
        raise KernelTraceError(f"{op}: signal words are updated with the signal arguments, not put as data", s.loc)
    _check_sizes(s, ranges)
    check_pe(s.pe, kernel, ranges, op, s.loc)
    if s.signal is not None:
        check_signal_word(s.signal.word, op, s.loc)
        check_region(s.signal.word, ranges, f"{op} sig", s.loc)


@VERIFY.register(Get)
def _verify_get(s: Get, kernel: KernelIR, ranges: Ranges) -> None:
    op = s.op_name
    _check_transfer_regions(s, ranges)
    check_kind(s.src, REMOTE_READABLE, op, "source", "a get reads a peer's symmetric memory", s.loc)
    check_kind(s.dst, LOCAL_WRITABLE, op, "destination", "a get writes local memory", s.loc)
    _check_sizes(s, ranges)
    check_pe(s.pe, kernel, ranges, op, s.loc)


@VERIFY.register(PeerCopy)
def _verify_peer_copy(s: PeerCopy, kernel: KernelIR, ranges: Ranges) -> None:
    op = s.op_name
    check_scope(s, s.scope, (Scope.WARP, Scope.BLOCK))
    check_region(s.src, ranges, f"{op} src", s.loc)
    check_region(s.dst, ranges, f"{op} dst", s.loc)
    check_not_signal(s, s.src, s.dst)
    if s.direction is Direction.PUT:
        check_kind(s.dst, REMOTE_WRITABLE, op, "destination", "peers can store only into symmetric memory", s.loc)
    else:
        check_kind(s.src, REMOTE_READABLE, op, "source", "peers can load only from symmetric memory", s.loc)
        check_kind(s.dst, LOCAL_WRITABLE, op, "destination", "the data lands in local memory", s.loc)
    check_same_shape(s.src, s.dst, op, s.loc)
    check_pe(s.pe, kernel, ranges, op, s.loc)


@VERIFY.register(SignalWait)
def _verify_wait(s: SignalWait, kernel: KernelIR, ranges: Ranges) -> None:
    check_signal_word(s.word, s.op_name, s.loc)
    check_region(s.word, ranges, s.op_name, s.loc)


@VERIFY.register(RemoteSignal)
def _verify_remote_signal(s: RemoteSignal, kernel: KernelIR, ranges: Ranges) -> None:
    check_signal_word(s.word, s.op_name, s.loc)
    check_region(s.word, ranges, s.op_name, s.loc)
    check_pe(s.pe, kernel, ranges, s.op_name, s.loc)


@VERIFY.register(WaitUntil)
def _verify_wait_until(s: WaitUntil, kernel: KernelIR, ranges: Ranges) -> None:
    op, buf = s.op_name, s.word.buffer
    check_kind(s.word, WAIT_WORD_KINDS, op, "word", "a waited-for word must be one that peers can write", s.loc)
    if buf.dtype.kind not in "iu" or buf.dtype.itemsize not in WAIT_WORD_BYTES:
        raise KernelTraceError(f"{op}: the word must be a 32- or 64-bit integer; {buf.name} is {buf.dtype.name}", s.loc)
    if s.word.size != 1:
        raise KernelTraceError(f"{op}: waits for one word, e.g. flags[i]; got {s.word} of {s.word.size}", s.loc)
    check_region(s.word, ranges, op, s.loc)
    if s.pe is not None:
        check_pe(s.pe, kernel, ranges, op, s.loc)


@VERIFY.register(TeamBarrier)
def _verify_team_barrier(s: TeamBarrier, kernel: KernelIR, ranges: Ranges) -> None:
    check_scope(s, s.scope, (Scope.WARP, Scope.BLOCK))


@VERIFY.register(Broadcast)
def _verify_broadcast(s: Broadcast, kernel: KernelIR, ranges: Ranges) -> None:
    op = s.op_name
    check_region(s.src, ranges, f"{op} src", s.loc)
    check_region(s.dst, ranges, f"{op} dst", s.loc)
    check_not_signal(s, s.src)
    check_kind(s.dst, REMOTE_WRITABLE, op, "destination", "the root writes it on every PE", s.loc)
    check_same_shape(s.src, s.dst, op, s.loc)
    check_pe(s.root, kernel, ranges, op, s.loc, what="Root")


@VERIFY.register(Fcollect)
def _verify_fcollect(s: Fcollect, kernel: KernelIR, ranges: Ranges) -> None:
    op = s.op_name
    check_region(s.src, ranges, f"{op} src", s.loc)
    check_region(s.dst, ranges, f"{op} dst", s.loc)
    check_not_signal(s, s.src)
    check_kind(s.dst, REMOTE_WRITABLE, op, "destination", "every PE writes its block into it on every PE", s.loc)
    n, src, dst = kernel.num_pes, s.src.sizes, s.dst.sizes
    if len(src) != len(dst) or dst[0] != n * src[0] or dst[1:] != src[1:]:
        raise KernelTraceError(
            f"{op}: the destination holds the {n} PEs' sources stacked along dimension 0: {list(src)} from each PE "
            f"needs {[n * src[0], *src[1:]]}, but {s.dst} is {list(dst)}",
            s.loc,
        )
    if s.src.buffer.dtype != s.dst.buffer.dtype:
        raise KernelTraceError(
            f"{op}: dtypes differ: {s.src.buffer.name} is {s.src.buffer.dtype.name}, {s.dst.buffer.name} is "
            f"{s.dst.buffer.dtype.name}",
            s.loc,
        )


@VERIFY.register(Quiet, Fence, BarrierAll)
def _verify_nothing(s: Stmt, kernel: KernelIR, ranges: Ranges) -> None:
    return None  # no operands
