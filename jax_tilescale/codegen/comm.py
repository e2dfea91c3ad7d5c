"""CUDA for the point-to-point statements: puts, gets, peer copies, signals, waits, quiet, fence.

Every statement is block-uniform: all threads compute its operands (and run its checks, which
stop the kernel through the block-uniform ts_fail), then the threads of its scope issue it
(`scoped`). NVSHMEM names: thread scope `nvshmem_<op>`, warp and block `nvshmemx_<op>_<scope>`.
"""

from __future__ import annotations

import math

from .. import abi
from ..ir.expr import Expr, format_expr
from ..ir.nodes import (
    Buffer,
    BufferKind,
    Cmp,
    Direction,
    Fence,
    Get,
    PeerCopy,
    Put,
    Quiet,
    Region,
    RemoteSignal,
    Scope,
    SignalOp,
    SignalWait,
    WaitUntil,
)
from .body import EMIT
from .common import (
    c_string,
    comment,
    copy_loop_parts,
    decompose,
    indent,
    linear,
    region_address,
    scoped,
    thread0,
    word_pointer,
)
from .context import Ctx
from .expr_printer import SEQ_NAME, WHERE_NAME, c_expr, c_int64
from .regions import walk_pair

CMP_NAMES = {
    Cmp.EQ: "NVSHMEM_CMP_EQ",
    Cmp.NE: "NVSHMEM_CMP_NE",
    Cmp.GT: "NVSHMEM_CMP_GT",
    Cmp.GE: "NVSHMEM_CMP_GE",
    Cmp.LT: "NVSHMEM_CMP_LT",
    Cmp.LE: "NVSHMEM_CMP_LE",
}
SIGNAL_OP_NAMES = {SignalOp.SET: "NVSHMEM_SIGNAL_SET", SignalOp.ADD: "NVSHMEM_SIGNAL_ADD"}
# The device header's comparison codes (ts_wait); the same numbers in TsWaitFault.cmp.
TS_CMP_NAMES = {
    Cmp.EQ: "TS_CMP_EQ",
    Cmp.NE: "TS_CMP_NE",
    Cmp.GT: "TS_CMP_GT",
    Cmp.GE: "TS_CMP_GE",
    Cmp.LT: "TS_CMP_LT",
    Cmp.LE: "TS_CMP_LE",
}
_WORD_TYPES = {("i", 4): "int32_t", ("u", 4): "uint32_t", ("i", 8): "int64_t", ("u", 8): "uint64_t"}


def nvshmem_function(base: str, blocking: bool, scope: Scope) -> str:
    name = base + ("" if blocking else "_nbi")
    return f"nvshmem_{name}" if scope is Scope.THREAD else f"nvshmemx_{name}_{scope.value}"


def target_pe(pe: Expr | str, op: str, var: str = "ts_target", what: str = "target PE") -> str:
    """`const int var = <NVSHMEM PE of kernel PE pe>;`, checked against the PE space. `pe` is an
    index expression or the C name of an int64 holding one."""
    message = c_string(f"{op}: {what} outside the kernel PE space [0, npes)")
    value = pe if isinstance(pe, str) else c_int64(pe)
    return f"const int {var} = ts_target_pe(args.pe_map, args.npes, {value}, {WHERE_NAME}, {message});"


def transfer_call(
    ctx: Ctx,
    *,
    base: str,
    dst: Region,
    src: Region,
    scope: Scope,
    blocking: bool,
    target: str,
    nbytes: str | None = None,
    signal: tuple[str, str, SignalOp] | None = None,
) -> tuple[list[str], list[str]]:
    """(setup, issue): the lines every thread runs first (addresses: a failing bounds check in
    an index must not sit in a branch of some threads), then the NVSHMEM call(s) for the threads
    of `scope` (the caller guards them with `scoped`).

    One call when both regions are contiguous (the signal fused into it), else one call per
    contiguous run and the signal after a fence, from one thread. `nbytes` is a run-time byte
    count (then the regions are single rows, contiguous by construction)."""
    sig_args = ""
    if signal is not None:
        ptr, value, op = signal
        sig_args = f"{ptr}, {value}, {SIGNAL_OP_NAMES[op]}, "
    dst_addr, src_addr = region_address(ctx, dst), region_address(ctx, src)
    pointers = [f"const unsigned char* const ts_src = {src_addr};", f"unsigned char* const ts_dst = {dst_addr};"]
    if nbytes is not None or (src.is_contiguous() and dst.is_contiguous()):
        fn = nvshmem_function(base + ("_signal" if signal is not None else ""), blocking, scope)
        size = nbytes if nbytes is not None else str(src.nbytes)
        if scope is Scope.BLOCK:  # every thread issues it: the addresses can stay in the call
            return [], [f"{fn}({dst_addr}, {src_addr}, {size}, {sig_args}{target});"]
        return pointers, [f"{fn}(ts_dst, ts_src, {size}, {sig_args}{target});"]
    itemsize = src.buffer.dtype.itemsize
    walk = walk_pair(src, dst, max_vector_bytes=itemsize)
    dims = walk.dims
    run, outer = (dims[-1].size, dims[:-1]) if walk.inner_contiguous else (1, dims)
    rows = math.prod(d.size for d in outer)
    fn = nvshmem_function(base, blocking, scope)
    issue = [
        f"for (uint64_t ts_row = 0; ts_row < {rows}u; ++ts_row) {{",
        *indent(decompose("ts_row", outer, "uint64_t")),
        (
            f"  {fn}(ts_dst + ({linear(outer, 'dst', True)}) * {itemsize}, "
            f"ts_src + ({linear(outer, 'src', True)}) * {itemsize}, {run * itemsize}, {target});"
        ),
        "}",
    ]
    if signal is not None:
        # The signal must land after every row: each thread orders its own puts (fence), the
        # threads of the scope meet, then one of them signals the same PE.
        ptr, value, op = signal
        meet = {Scope.BLOCK: ctx.block_sync(), Scope.WARP: ["__syncwarp();"], Scope.THREAD: []}[scope]
        call = f"nvshmemx_signal_op({ptr}, {value}, {SIGNAL_OP_NAMES[op]}, {target});"
        issue += ["nvshmem_fence();", *meet]
        issue += [call] if scope is Scope.THREAD else thread0(ctx, [call])
    return [comment(f"{rows} runs of {run * itemsize} bytes"), *pointers], issue


def _dynamic_bytes(s: Put | Get) -> list[str]:
    """`ts_bytes`: the run-time byte count, checked (whole rows, inside both buffers)."""
    assert s.size is not None
    row_bytes = math.prod(s.src.buffer.shape[1:]) * s.src.buffer.dtype.itemsize
    src_start, dst_start = c_int64(s.src.starts[0]), c_int64(s.dst.starts[0])
    return [
        f"const size_t ts_bytes = ts_row_bytes({c_int64(s.size)}, {row_bytes}, {src_start}, {s.src.buffer.shape[0]}, "
        f"{dst_start}, {s.dst.buffer.shape[0]}, {WHERE_NAME});"
    ]


def _finish(ctx: Ctx, scope: Scope, src: Region) -> list[str]:
    """After a scoped transfer: the block moves on together (and may then overwrite a source
    tile). A block-wide transfer from global memory needs no barrier."""
    return ctx.block_sync() if scope is not Scope.BLOCK or src.buffer.kind is BufferKind.SHARED else []


def _p2p_signal(ctx: Ctx, word: Region, value: Expr, op: SignalOp, pe: str, op_name: str) -> list[str]:
    """A call-free kernel's signal on the peer's word (thread 0, or each thread of a thread branch):
    one release atomic at system scope (`pe`: the C name of the NVSHMEM PE; `ts_peer_k` the kernel PE)."""
    helper = {SignalOp.SET: "ts_p2p_signal_set", SignalOp.ADD: "ts_p2p_signal_add"}[op]
    return [
        f"uint64_t* const ts_sig = {word_pointer(ctx, word)};",
        f"const uint64_t ts_sig_value = (uint64_t)({c_expr(value)});",
        f"uint64_t* const ts_peer_sig = reinterpret_cast<uint64_t*>("
        f"{peer_address(ctx, word.buffer, 'ts_sig', pe, op_name)});",
        *thread0(ctx, [f"{helper}(ts_peer_sig, ts_sig_value);"]),
    ]


def _p2p_copy(ctx: Ctx, src: Region, dst: Region, scope: Scope, pe: Expr, op_name: str,
              direction: Direction) -> list[str]:
    """A call-free kernel's put or get: the threads of `scope` copy through the peer's mapping of the
    remote buffer with plain loads and stores. A put issues no fence of its own: whatever makes its data
    count for the peer orders the stores first, as NVSHMEM's P2P path does (the fused signal and
    `signal_op` are release atomics at system scope after the scope's threads meet; quiet, fence and the
    barriers fence at system scope; the end of call fences once per block after its threads meet). A
    system fence in every thread after every put cost about 1-2 us per call even when the put went to
    this PE's own memory (benchmarks/NOTES.md, issue 14)."""
    put = direction is Direction.PUT
    lines = peer_pointer(ctx, dst if put else src, pe, op_name)
    remote = {"dst_base": "ts_peer"} if put else {"src_base": "ts_peer"}
    setup, loop = copy_loop_parts(ctx, src, dst, lanes=32 if scope is Scope.WARP else None, **remote)
    return lines + setup + scoped(ctx, scope, loop)


def _p2p_put(s: Put, ctx: Ctx) -> list[str]:
    lines = _p2p_copy(ctx, s.src, s.dst, s.scope, s.pe, s.op_name, Direction.PUT)
    if s.signal is not None:  # after every thread's stores: the scope meets, then one thread signals
        lines += ctx.block_sync() if s.scope is Scope.BLOCK else ["__syncwarp();"]
        lines += _p2p_signal(ctx, s.signal.word, s.signal.value, s.signal.op, "ts_peer_nv", s.op_name)
    elif s.blocking and s.scope is Scope.BLOCK and s.src.buffer.kind is not BufferKind.SHARED:
        # A blocking put is complete on return for the whole block (the interpreter delivers it at
        # issue): every thread's stores precede what follows, so a later signal_op's release by
        # thread 0 covers them. (_finish adds the barrier itself for other scopes and shared sources.)
        lines += ctx.block_sync()
    return lines + _finish(ctx, s.scope, s.src)


@EMIT.register(Put)
def emit_put(s: Put, ctx: Ctx) -> list[str]:
    if ctx.call_free:
        return _p2p_put(s, ctx)
    lines = [target_pe(s.pe, s.op_name)]
    signal = None
    if s.signal is not None:
        lines.append(f"uint64_t* const ts_sig = {word_pointer(ctx, s.signal.word)};")
        lines.append(f"const uint64_t ts_sig_value = (uint64_t)({c_expr(s.signal.value)});")
        signal = ("ts_sig", "ts_sig_value", s.signal.op)
    nbytes = None
    if s.size is not None:
        lines += _dynamic_bytes(s)
        nbytes = "ts_bytes"
    setup, issue = transfer_call(
        ctx, base="putmem", dst=s.dst, src=s.src, scope=s.scope, blocking=s.blocking, target="ts_target",
        nbytes=nbytes, signal=signal,
    )
    return lines + setup + scoped(ctx, s.scope, issue) + _finish(ctx, s.scope, s.src)


@EMIT.register(Get)
def emit_get(s: Get, ctx: Ctx) -> list[str]:
    if ctx.call_free:  # the loads are complete when the loop ends
        return _p2p_copy(ctx, s.src, s.dst, s.scope, s.pe, s.op_name, Direction.GET) + ctx.block_sync()
    lines = [target_pe(s.pe, s.op_name, what="source PE")]
    nbytes = None
    if s.size is not None:
        lines += _dynamic_bytes(s)
        nbytes = "ts_bytes"
    setup, issue = transfer_call(
        ctx, base="getmem", dst=s.dst, src=s.src, scope=s.scope, blocking=s.blocking, target="ts_target",
        nbytes=nbytes,
    )
    # The data lands in local memory that the other threads may read next (blocking form).
    return lines + setup + scoped(ctx, s.scope, issue) + ctx.block_sync()


def peer_address(ctx: Ctx, buffer: Buffer, local: str, nv_pe: str, op: str) -> str:
    """The C expression for the peer's address of `local` (an address inside `buffer` on this PE): through
    `nvshmem_ptr` for symmetric memory, or, for a zero-copy param (`Ctx.zero_copy`), through the address
    the peer published for this launch (XLA's buffer in an allocation this PE mapped, or its staged copy).
    `ts_peer_k` must hold the kernel PE."""
    where = f"{WHERE_NAME}, {c_string(op)}"
    index = ctx.zero_copy.get(ctx.kernel.memory_of(buffer))
    if index is None:
        return f"ts_peer_ptr({local}, {nv_pe}, ts_peer_k, {where})"
    return f"ts_peer_param_ptr(args, {SEQ_NAME}, {index}, {ctx.pointers[buffer]}, {local}, {nv_pe}, ts_peer_k, {where})"


def peer_pointer(ctx: Ctx, region: Region, pe: Expr, op: str) -> list[str]:
    """`ts_peer`: the peer's mapping of `region`'s buffer (checked: PE range, reachability)."""
    return [
        f"const int64_t ts_peer_k = {c_int64(pe)};",
        target_pe("ts_peer_k", op, var="ts_peer_nv", what="peer PE"),
        "unsigned char* const ts_peer = "
        f"{peer_address(ctx, region.buffer, ctx.pointers[region.buffer], 'ts_peer_nv', op)};",
    ]


@EMIT.register(PeerCopy)
def emit_peer_copy(s: PeerCopy, ctx: Ctx) -> list[str]:
    if s.fallback and not ctx.call_free:  # call-free: P2P only (an unreachable peer is a reported error)
        return _peer_copy_or_transfer(s, ctx)
    lines = peer_pointer(ctx, s.remote, s.pe, s.op_name)
    remote = {"dst_base": "ts_peer"} if s.direction is Direction.PUT else {"src_base": "ts_peer"}
    lanes = 32 if s.scope is Scope.WARP else None
    setup, loop = copy_loop_parts(ctx, s.src, s.dst, lanes=lanes, **remote)
    lines += setup + scoped(ctx, s.scope, loop)
    if s.direction is Direction.PUT:
        # Complete when the statement ends: the stores are visible system-wide before any later
        # signal or barrier of this block.
        lines.append("__threadfence_system();")
    return [*lines, *ctx.block_sync()]


def _peer_copy_or_transfer(s: PeerCopy, ctx: Ctx) -> list[str]:
    """A view's transfer: loads/stores through `nvshmem_ptr` where the peer is reachable that way
    (NVLink), else a blocking getmem/putmem (a put followed by quiet); complete either way when
    the statement ends. The branch is uniform over the block (one peer)."""
    put = s.direction is Direction.PUT
    remote = {"dst_base": "ts_peer"} if put else {"src_base": "ts_peer"}
    setup, loop = copy_loop_parts(ctx, s.src, s.dst, lanes=32 if s.scope is Scope.WARP else None, **remote)
    t_setup, issue = transfer_call(ctx, base="putmem" if put else "getmem", dst=s.dst, src=s.src, scope=s.scope,
                                   blocking=True, target="ts_peer_nv")
    near = setup + scoped(ctx, s.scope, loop) + (["__threadfence_system();"] if put else [])
    far = t_setup + scoped(ctx, s.scope, issue) + (thread0(ctx, ["nvshmem_quiet();"]) if put else [])
    return [
        f"const int64_t ts_peer_k = {c_int64(s.pe)};",
        target_pe("ts_peer_k", s.op_name, var="ts_peer_nv", what="peer PE"),
        f"unsigned char* const ts_peer = (unsigned char*)nvshmem_ptr({ctx.pointers[s.remote.buffer]}, ts_peer_nv);",
        "if (ts_peer != nullptr) {",
        *indent(near),
        "} else {",
        *indent(far),
        "}",
        *ctx.block_sync(),
    ]


def wait_call(cmp: Cmp, ctype: str, word: str, value: str, *, op: str, peer: str = "-1", sleep: bool,
              system: bool = True) -> str:
    """A call of the device header's `ts_wait` (gives up after args.wait_timeout_ns, naming `op`
    and the statement's source line; docs/calling_convention.md)."""
    flags = f"{'true' if sleep else 'false'}, {'true' if system else 'false'}"
    return (
        f"ts_wait<{TS_CMP_NAMES[cmp]}, {flags}, {ctype}>(ts_wait_ctx(args), {word}, {value}, {peer}, "
        f"{WHERE_NAME}, {c_string(op)});"
    )


def wait_op_text(op_name: str, word: Region) -> str:
    """What a wait that gave up says it was (TsWaitFault.op): the statement and the word it polled
    by the user's name of the buffer, `T.wait_ge on ready[program_id(0)]`, shortened to fit."""
    fits = abi.DEFINES["TS_WAIT_OP_BYTES"] - 1
    indices = ", ".join(format_expr(i) for i in word.starts)
    for text in (f"T.{op_name} on {word.buffer.name}[{indices}]", f"T.{op_name} on {word.buffer.name}"):
        if len(text) <= fits:
            return text
    return f"T.{op_name}"


@EMIT.register(SignalWait)
def emit_signal_wait(s: SignalWait, ctx: Ctx) -> list[str]:
    # Polls like nvshmem_signal_wait_until (no back-off), but gives up after the wait timeout.
    call = wait_call(s.cmp, "uint64_t", "ts_sig", "ts_sig_value", op=wait_op_text(s.op_name, s.word), sleep=False)
    return [
        f"uint64_t* const ts_sig = {word_pointer(ctx, s.word)};",
        f"const uint64_t ts_sig_value = (uint64_t)({c_expr(s.value)});",
        # The fence makes the data the signal announces visible before the barrier hands
        # control to the rest of the block.
        *thread0(ctx, [call, "__threadfence();"]),
        *ctx.block_sync(),
        *ctx.stage_out_copies.get(id(s), ()),
    ]


@EMIT.register(RemoteSignal)
def emit_remote_signal(s: RemoteSignal, ctx: Ctx) -> list[str]:
    if ctx.call_free:
        return [
            f"const int64_t ts_peer_k = {c_int64(s.pe)};",
            target_pe("ts_peer_k", s.op_name, var="ts_target"),
            *_p2p_signal(ctx, s.word, s.value, s.op, "ts_target", s.op_name),
            *ctx.block_sync(),
        ]
    return [
        target_pe(s.pe, s.op_name),
        f"uint64_t* const ts_sig = {word_pointer(ctx, s.word)};",
        f"const uint64_t ts_sig_value = (uint64_t)({c_expr(s.value)});",
        *thread0(ctx, [f"nvshmemx_signal_op(ts_sig, ts_sig_value, {SIGNAL_OP_NAMES[s.op]}, ts_target);"]),
        *ctx.block_sync(),
    ]


@EMIT.register(WaitUntil)
def emit_wait_until(s: WaitUntil, ctx: Ctx) -> list[str]:
    dtype = s.word.buffer.dtype
    ctype = _WORD_TYPES[(dtype.kind, dtype.itemsize)]
    lines = []
    base = None
    if s.pe is not None:
        lines += peer_pointer(ctx, s.word, s.pe, s.op_name)
        base = "ts_peer"
    call = wait_call(s.cmp, ctype, "ts_word", "ts_value", op=wait_op_text(s.op_name, s.word), sleep=True,
                     peer="ts_peer_k" if s.pe is not None else "-1")
    lines += [
        f"const {ctype}* const ts_word = {word_pointer(ctx, s.word, ctype, base)};",
        f"const {ctype} ts_value = ({ctype})({c_expr(s.value)});",
        *thread0(ctx, [call]),
        *ctx.block_sync(),
    ]
    return lines


def quiet_line(ctx: Ctx) -> str:
    """Completes this thread's earlier puts: NVSHMEM's quiet, or in a call-free kernel (whose puts are
    P2P stores) a system-scope fence."""
    return "__threadfence_system();" if ctx.call_free else "nvshmem_quiet();"


@EMIT.register(Quiet)
def emit_quiet(s: Quiet, ctx: Ctx) -> list[str]:
    # Quiet is per thread (each thread's share of a block put); the barrier makes it the block's.
    return [quiet_line(ctx), *ctx.block_sync()]


@EMIT.register(Fence)
def emit_fence(s: Fence, ctx: Ctx) -> list[str]:
    # Per thread too: the barrier orders every thread's earlier puts before the puts and signals
    # any thread of the block issues after it (signal_op is issued by thread 0).
    return ["__threadfence_system();" if ctx.call_free else "nvshmem_fence();", *ctx.block_sync()]
