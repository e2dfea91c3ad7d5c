"""Data movement between PEs: NVSHMEM's putmem/getmem families (thread, warp and block scope,
blocking and `_nbi`, put-with-signal) and TileScale's direct peer access (`put_block`,
`get_block`, `put_warp`, `get_warp`: loads and stores through `nvshmem_ptr`).

Scope, in today's block-level model (kernels have no per-thread control flow yet): `_block`:
all threads of the block cooperate; `_warp`: warp 0 of the block issues it; no suffix: thread 0
of the block issues it. Every form runs once per block. Sizes come from the slices; a TileScale
byte count (`size=`) may be given and must agree, or be a run-time value (see `putmem`).
"""

from __future__ import annotations

from collections.abc import Callable

from ..errors import KernelTraceError
from ..ir.expr import IntLike
from ..ir.nodes import Direction, Get, PeerCopy, Put, Scope, SignalOp, SignalUpdate
from ._common import RefLike, byte_size, element_count, expr, peer_or_self, region, require_pe
from .source import user_source_loc
from .state import current_trace

_WHO = {
    Scope.THREAD: "Thread 0 of the block issues it",
    Scope.WARP: "Warp 0 of the block issues it",
    Scope.BLOCK: "All threads of the block issue it together",
}


def _name(base: str, blocking: bool, scope: Scope) -> str:
    return base + ("" if blocking else "_nbi") + scope.suffix


def _make_put(scope: Scope, blocking: bool) -> Callable[..., None]:
    name = _name("putmem", blocking, scope)

    def put(dst: RefLike, src: RefLike, size: IntLike | None = None, pe: IntLike | None = None) -> None:
        state = current_trace(name)
        loc = user_source_loc()
        s = region(src, name, "src", loc)
        dyn = byte_size(size, s, name, loc)
        d = region(dst, name, "dst", loc)
        state.emit(Put(d, s, require_pe(pe, name, loc), scope, blocking=blocking, size=dyn, loc=loc))

    when = "when it returns" if blocking else "at the latest at the next quiet (or barrier, or kernel end)"
    put.__doc__ = (
        f"Copies local `src` into `dst` on PE `pe` (NVSHMEM {'nvshmemx_' if scope is not Scope.THREAD else 'nvshmem_'}"
        f"{name}); `dst` is complete {when}. {_WHO[scope]}, once per block.\n\n"
        "`dst` must be symmetric (a kernel output or a T.alloc_symmetric buffer). `size` (bytes) may be left out; "
        "a static one must equal the slices' bytes. A run-time size (e.g. from T.load) moves that many bytes, in "
        "whole rows, starting at `dst` and `src`, each then one row of its buffer (`ref[i, :]`), as TileScale's "
        "address + byte count does; the rows must stay inside both buffers (checked when the kernel runs)."
    )
    put.__name__ = put.__qualname__ = name
    return put


def _make_put_signal(scope: Scope, blocking: bool) -> Callable[..., None]:
    name = _name("putmem_signal", blocking, scope)

    def put_signal(
        dst: RefLike,
        src: RefLike,
        size: IntLike | None = None,
        sig: RefLike | None = None,
        value: IntLike = 1,
        op: SignalOp = SignalOp.SET,
        pe: IntLike | None = None,
    ) -> None:
        state = current_trace(name)
        loc = user_source_loc()
        s = region(src, name, "src", loc)
        dyn = byte_size(size, s, name, loc)
        if sig is None:
            raise KernelTraceError(f"{name}: the signal word `sig=` is required (see T.alloc_signal)", loc)
        if not isinstance(op, SignalOp):
            raise KernelTraceError(f"{name}: op must be T.SignalOp.SET or T.SignalOp.ADD, got {op!r}", loc)
        update = SignalUpdate(region(sig, name, "sig", loc), expr(value, name, "value", loc), op)
        d = region(dst, name, "dst", loc)
        state.emit(Put(d, s, require_pe(pe, name, loc), scope, blocking=blocking, signal=update, size=dyn, loc=loc))

    put_signal.__doc__ = (
        f"Like putmem{'' if blocking else '_nbi'}{scope.suffix}, then `sig op= value` on PE `pe` once all the data "
        f"has arrived there (NVSHMEM {name}). {_WHO[scope]}, once per block. `sig` is a word of T.alloc_signal; "
        "`op` is T.SignalOp.SET or T.SignalOp.ADD."
    )
    put_signal.__name__ = put_signal.__qualname__ = name
    return put_signal


def _make_get(scope: Scope, blocking: bool) -> Callable[..., None]:
    name = _name("getmem", blocking, scope)

    def get(dst: RefLike, src: RefLike, size: IntLike | None = None, pe: IntLike | None = None) -> None:
        state = current_trace(name)
        loc = user_source_loc()
        s = region(src, name, "src", loc)
        dyn = byte_size(size, s, name, loc)
        d = region(dst, name, "dst", loc)
        state.emit(Get(d, s, require_pe(pe, name, loc), scope, blocking=blocking, size=dyn, loc=loc))

    when = "when it returns"
    if not blocking:
        when = "only after the next quiet (or barrier, or kernel end); until then it is undefined"
    get.__doc__ = (
        f"Copies `src` of PE `pe` into local `dst` (NVSHMEM {name}); `dst` holds the data {when}. {_WHO[scope]}, "
        "once per block.\n\n`src` must be symmetric: a kernel output, a T.alloc_symmetric buffer, or a kernel input "
        "(the runtime then copies the input into symmetric memory before the launch). `dst` is local: an output, "
        "a shared tile or a symmetric buffer. `size` as for putmem."
    )
    get.__name__ = get.__qualname__ = name
    return get


def _make_peer_copy(direction: Direction, scope: Scope) -> Callable[..., None]:
    name = f"{direction.value}_{scope.value}"
    peer_arg = "dst_pe" if direction is Direction.PUT else "src_pe"

    def emit(src: RefLike, dst: RefLike, size: IntLike | None, pe: IntLike | None) -> None:
        state = current_trace(name)
        loc = user_source_loc()
        s = region(src, name, "src", loc)
        element_count(size, s, name, loc)
        d = region(dst, name, "dst", loc)
        state.emit(PeerCopy(d, s, peer_or_self(pe, name, loc, peer_arg), direction, scope, loc=loc))

    # TileScale's argument order (src first) and keyword names (dst_pe / src_pe).
    def put_form(
        src: RefLike, dst: RefLike, size: IntLike | None = None, dst_pe: IntLike | None = -1, unroll_factor: int = 4
    ) -> None:
        emit(src, dst, size, dst_pe)

    def get_form(
        src: RefLike, dst: RefLike, size: IntLike | None = None, src_pe: IntLike | None = -1, unroll_factor: int = 4
    ) -> None:
        emit(src, dst, size, src_pe)

    fn: Callable[..., None] = put_form if direction is Direction.PUT else get_form
    what = "local `src` into `dst` on PE `dst_pe`"
    if direction is Direction.GET:
        what = "`src` of PE `src_pe` into local `dst`"
    fn.__doc__ = (
        f"TileScale's {name}: copies {what} with plain loads and stores through `nvshmem_ptr` (the peer's "
        f"mapping of the symmetric heap over NVLink). Complete and visible to the peer when it returns. "
        f"{'Warp 0 of the block does it' if scope is Scope.WARP else 'All threads of the block do it'}, once per "
        "block. The peer must be load/store reachable (same node); otherwise the kernel stops with an error naming "
        "the op, the PE and the line. `size` counts elements and must agree with the slices; `-1` (the default) "
        "names this PE; `unroll_factor` is accepted for TileScale compatibility and ignored."
    )
    fn.__name__ = fn.__qualname__ = name
    return fn


putmem = _make_put(Scope.THREAD, True)
putmem_nbi = _make_put(Scope.THREAD, False)
putmem_warp = _make_put(Scope.WARP, True)
putmem_nbi_warp = _make_put(Scope.WARP, False)
putmem_block = _make_put(Scope.BLOCK, True)
putmem_nbi_block = _make_put(Scope.BLOCK, False)

putmem_signal = _make_put_signal(Scope.THREAD, True)
putmem_signal_nbi = _make_put_signal(Scope.THREAD, False)
putmem_signal_warp = _make_put_signal(Scope.WARP, True)
putmem_signal_nbi_warp = _make_put_signal(Scope.WARP, False)
putmem_signal_block = _make_put_signal(Scope.BLOCK, True)
putmem_signal_nbi_block = _make_put_signal(Scope.BLOCK, False)

getmem = _make_get(Scope.THREAD, True)
getmem_nbi = _make_get(Scope.THREAD, False)
getmem_warp = _make_get(Scope.WARP, True)
getmem_nbi_warp = _make_get(Scope.WARP, False)
getmem_block = _make_get(Scope.BLOCK, True)
getmem_nbi_block = _make_get(Scope.BLOCK, False)

put_block = _make_peer_copy(Direction.PUT, Scope.BLOCK)
get_block = _make_peer_copy(Direction.GET, Scope.BLOCK)
put_warp = _make_peer_copy(Direction.PUT, Scope.WARP)
get_warp = _make_peer_copy(Direction.GET, Scope.WARP)
