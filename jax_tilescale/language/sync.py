"""Synchronisation and collectives: signals and waits, quiet/fence, barriers, broadcast, fcollect.

Two families of barriers:
- `barrier_all()` / `sync_all()`: every block of every PE meets (grid-wide, then PE-wide);
- `barrier_all_block()` / `_warp()`, `sync_all_block()` / `_warp()`, and the collectives
  `broadcast*` / `fcollect*`: NVSHMEM team collectives over the kernel's PE space. Each call is one
  PE's call: the k-th team collective call of each PE forms the k-th instance, so with several
  blocks per PE the pairing follows the order in which blocks get there (use them from one block,
  or from blocks whose calls are interchangeable). The interpreter checks that the k-th calls of
  all PEs are the same statement.
The `barrier` forms complete earlier puts first (quiet); the `sync` forms only order memory
accesses. Scopes as for transfers: `_block` all threads, `_warp` warp 0, no suffix thread 0.
"""

from __future__ import annotations

from collections.abc import Callable

from ..errors import KernelTraceError
from ..ir.expr import IntLike
from ..ir.nodes import (
    BarrierAll,
    Broadcast,
    Cmp,
    Fcollect,
    Fence,
    Quiet,
    RemoteSignal,
    Scope,
    SignalOp,
    SignalWait,
    TeamBarrier,
    WaitUntil,
)
from ._common import RefLike, byte_size, expr, peer_or_self, region, require_pe
from .source import user_source_loc
from .state import current_trace


def signal_op(sig: RefLike, value: IntLike, op: SignalOp, pe: IntLike) -> None:
    """Atomically `sig op= value` on PE `pe` (NVSHMEM nvshmemx_signal_op; thread 0 of the block
    issues it). Like a put it completes at the next quiet; a `fence` before it orders it after
    earlier puts to the same PE (put, fence, signal_op is TileScale's notify pattern)."""
    state = current_trace("signal_op")
    loc = user_source_loc()
    if not isinstance(op, SignalOp):
        raise KernelTraceError(f"signal_op: op must be T.SignalOp.SET or T.SignalOp.ADD, got {op!r}", loc)
    word = region(sig, "signal_op", "sig", loc)
    value_e = expr(value, "signal_op", "value", loc)
    state.emit(RemoteSignal(word, value_e, op, require_pe(pe, "signal_op", loc), loc=loc))


def signal_wait_until(sig: RefLike, cmp: Cmp, value: IntLike) -> None:
    """Waits until this PE's signal word satisfies `word cmp value` (the word is unchanged)."""
    state = current_trace("signal_wait_until")
    loc = user_source_loc()
    if not isinstance(cmp, Cmp):
        raise KernelTraceError(f"signal_wait_until: cmp must be a T.Cmp (EQ, NE, GT, GE, LT, LE), got {cmp!r}", loc)
    word = region(sig, "signal_wait_until", "sig", loc)
    state.emit(SignalWait(word, cmp, expr(value, "signal_wait_until", "value", loc), loc=loc))


def _make_wait(cmp: Cmp) -> Callable[..., None]:
    name = f"wait_{cmp.suffix}"

    def wait(word: RefLike, value: IntLike, pe: IntLike | None = None) -> None:
        state = current_trace(name)
        loc = user_source_loc()
        w = region(word, name, "word", loc)
        target = None if pe is None or (isinstance(pe, int) and pe == -1) else peer_or_self(pe, name, loc, "pe")
        state.emit(WaitUntil(w, cmp, expr(value, name, "value", loc), target, loc=loc))

    wait.__doc__ = (
        f"TileScale's {name}: waits until `word {cmp.value} value` (thread 0 of the block polls; the word is not "
        "changed). `word` is one 32- or 64-bit integer of symmetric memory (a signal word, a T.alloc_symmetric "
        "buffer, a kernel output). With `pe` the word is the peer's, polled through `nvshmem_ptr` (it must be "
        "load/store reachable); without (or -1), this PE's."
    )
    wait.__name__ = wait.__qualname__ = name
    return wait


wait_eq = _make_wait(Cmp.EQ)
wait_ne = _make_wait(Cmp.NE)
wait_ge = _make_wait(Cmp.GE)
wait_le = _make_wait(Cmp.LE)
wait_gt = _make_wait(Cmp.GT)
wait_lt = _make_wait(Cmp.LT)


def quiet() -> None:
    """Waits until every put this PE issued is delivered (and every `_nbi` get has landed)."""
    current_trace("quiet").emit(Quiet(loc=user_source_loc()))


def fence() -> None:
    """Puts (and signal_op) to any one PE issued before are delivered before those issued after."""
    current_trace("fence").emit(Fence(loc=user_source_loc()))


def barrier_all() -> None:
    """All blocks of all PEs meet here; every earlier put is complete after it."""
    current_trace("barrier_all").emit(BarrierAll(loc=user_source_loc()))


def sync_all() -> None:
    """All blocks of all PEs meet here, like barrier_all but without completing puts: it orders
    the blocks' own loads and stores (e.g. put_block's) only; puts may still be in flight."""
    current_trace("sync_all").emit(BarrierAll(quiet=False, loc=user_source_loc()))


def _make_team_barrier(scope: Scope, quiet_first: bool) -> Callable[[], None]:
    name = ("barrier_all" if quiet_first else "sync_all") + scope.suffix

    def barrier() -> None:
        current_trace(name).emit(TeamBarrier(scope, quiet_first, loc=user_source_loc()))

    what = "completes the calling block's puts, then " if quiet_first else ""
    barrier.__doc__ = (
        f"NVSHMEM's {name} over the kernel's PE space: {what}waits until every PE has made this call. One call per "
        f"PE per instance (the k-th team collective of each PE forms the k-th instance); "
        f"{'warp 0' if scope is Scope.WARP else 'all threads'} of the calling block take part."
    )
    barrier.__name__ = barrier.__qualname__ = name
    return barrier


barrier_all_block = _make_team_barrier(Scope.BLOCK, True)
barrier_all_warp = _make_team_barrier(Scope.WARP, True)
sync_all_block = _make_team_barrier(Scope.BLOCK, False)
sync_all_warp = _make_team_barrier(Scope.WARP, False)


def _make_broadcast(scope: Scope) -> Callable[..., None]:
    name = "broadcast" + scope.suffix

    def broadcast(dst: RefLike, src: RefLike, root: IntLike, size: IntLike | None = None) -> None:
        state = current_trace(name)
        loc = user_source_loc()
        s = region(src, name, "src", loc)
        if byte_size(size, s, name, loc) is not None:
            raise KernelTraceError(f"{name}: size must be static (it is the slices' bytes)", loc)
        d = region(dst, name, "dst", loc)
        state.emit(Broadcast(d, s, require_pe(root, name, loc, "root"), scope, loc=loc))

    broadcast.__doc__ = (
        f"NVSHMEM's {name} over the kernel's PE space: `dst` on every PE (the root included) becomes `src` of PE "
        "`root`; on return the local `dst` holds it. A team collective (one call per PE per instance). `dst` must "
        "be symmetric (an output or a T.alloc_symmetric buffer) and the same slice on every PE; `root` the same "
        "on every PE. `size` (bytes) may be given and must agree."
    )
    broadcast.__name__ = broadcast.__qualname__ = name
    return broadcast


def _make_fcollect(scope: Scope) -> Callable[..., None]:
    name = "fcollect" + scope.suffix

    def fcollect(dst: RefLike, src: RefLike, size: IntLike | None = None) -> None:
        state = current_trace(name)
        loc = user_source_loc()
        s = region(src, name, "src", loc)
        if byte_size(size, s, name, loc) is not None:
            raise KernelTraceError(f"{name}: size must be static (it is the source slice's bytes)", loc)
        state.emit(Fcollect(region(dst, name, "dst", loc), s, scope, loc=loc))

    fcollect.__doc__ = (
        f"NVSHMEM's {name} over the kernel's PE space: `dst` on every PE becomes the `src` blocks of PEs "
        "0..npes-1 stacked along dimension 0 (`dst` has npes times the rows of `src`). A team collective (one "
        "call per PE per instance); on return the local `dst` is complete. `size` (bytes of one PE's block) may "
        "be given and must agree."
    )
    fcollect.__name__ = fcollect.__qualname__ = name
    return fcollect


broadcast = _make_broadcast(Scope.THREAD)
broadcast_warp = _make_broadcast(Scope.WARP)
broadcast_block = _make_broadcast(Scope.BLOCK)
fcollect = _make_fcollect(Scope.THREAD)
fcollect_warp = _make_fcollect(Scope.WARP)
fcollect_block = _make_fcollect(Scope.BLOCK)
