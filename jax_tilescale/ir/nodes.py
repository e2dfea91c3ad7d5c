"""Nodes of the kernel IR: buffers, regions of buffers and statements (the kernel itself: `kernel_ir.py`).

Every node is a frozen dataclass, so a traced kernel is hashable (it is a parameter of the JAX
primitive and a key of the compile cache) and can be shared by the interpreter and the code
generator without either changing it. Invariants that involve several nodes are checked by
`verify.py`, in one place.
"""

from __future__ import annotations

import enum
import math
import operator
from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from typing import ClassVar

import numpy as np

from .buffers import Buffer, BufferKind
from .expr import Const, Expr, Var, format_expr


class SignalOp(enum.Enum):
    """How a signal word is updated (NVSHMEM_SIGNAL_SET / NVSHMEM_SIGNAL_ADD)."""

    SET = "set"
    ADD = "add"


class Cmp(enum.Enum):
    """Comparison of `signal_wait_until` and the `wait_*` family (NVSHMEM_CMP_*)."""

    EQ = "=="
    NE = "!="
    GT = ">"
    GE = ">="
    LT = "<"
    LE = "<="

    def holds(self, lhs: int, rhs: int) -> bool:
        return _CMP_OPS[self](lhs, rhs)

    @property
    def suffix(self) -> str:
        """The name's suffix in TileScale's `wait_eq` ... `wait_lt`."""
        return self.name.lower()


_CMP_OPS = {Cmp.EQ: operator.eq, Cmp.NE: operator.ne, Cmp.GT: operator.gt, Cmp.GE: operator.ge,
            Cmp.LT: operator.lt, Cmp.LE: operator.le}


class Scope(enum.Enum):
    """Which threads of a block issue an operation (NVSHMEM's thread/warp/block APIs).

    Kernels have no per-thread control flow yet, so every statement runs once per block:
    BLOCK: all threads of the block cooperate; WARP: warp 0 of the block issues it; THREAD:
    thread 0 of the block issues it. Either way the operation happens once per block (this
    changes when per-thread conditionals arrive).
    """

    THREAD = "thread"
    WARP = "warp"
    BLOCK = "block"

    @property
    def suffix(self) -> str:
        """The name's suffix: `putmem`, `putmem_warp`, `putmem_block`."""
        return "" if self is Scope.THREAD else f"_{self.value}"


# Buffers private to one block (one copy per block of each PE).
BLOCK_LOCAL = frozenset({BufferKind.SHARED, BufferKind.FRAGMENT})
# Global memory whose window in a `T.copy` to or from an on-chip tile may extend past the end of
# the buffer (`Copy.clip_dims`): kernel inputs and outputs and symmetric scratch.
# kernel inputs and outputs, symmetric scratch and global scratch (`T.alloc(level="global")`).
CLIP_KINDS = frozenset({BufferKind.INPUT, BufferKind.OUTPUT, BufferKind.SYMMETRIC, BufferKind.GLOBAL})


SIGNAL_DTYPE = np.dtype(np.uint64)
# Buffers a peer can address (write, or read by load/store or get). Outputs qualify because the
# runtime stages every output peers touch through symmetric memory (KernelIR.remote_written /
# remote_read); inputs can be read by peers (staged with copy-in) but never written.
REMOTE_WRITABLE = frozenset({BufferKind.OUTPUT, BufferKind.SYMMETRIC})
REMOTE_READABLE = frozenset({BufferKind.INPUT, BufferKind.OUTPUT, BufferKind.SYMMETRIC})
# Words peers may update or poll (`wait_*`): symmetric, integer, 4 or 8 bytes.
WAIT_WORD_KINDS = frozenset({BufferKind.SIGNAL, BufferKind.SYMMETRIC, BufferKind.OUTPUT})


@dataclass(frozen=True)
class SourceLoc:
    """Where in the user's code an IR node was made."""

    filename: str
    lineno: int
    function: str = ""

    def __str__(self) -> str:
        return f"{self.filename}:{self.lineno}"


UNKNOWN_LOC = SourceLoc("<unknown>", 0)


@dataclass(frozen=True)
class Region:
    """A rectangular window of a buffer: start offsets (index expressions) and static sizes."""

    buffer: Buffer
    starts: tuple[Expr, ...]
    sizes: tuple[int, ...]

    @property
    def shape(self) -> tuple[int, ...]:
        return self.sizes

    @property
    def size(self) -> int:
        return math.prod(self.sizes)

    @property
    def nbytes(self) -> int:
        return self.size * self.buffer.dtype.itemsize

    def is_contiguous(self) -> bool:
        """True when the region is one run of memory in the row-major buffer."""
        dims = list(zip(self.sizes, self.buffer.shape))
        for i, (size, _) in enumerate(dims):
            if size != 1:
                return all(s == full for s, full in dims[i + 1 :])
        return True

    def __str__(self) -> str:
        parts = []
        for start, size, extent in zip(self.starts, self.sizes, self.buffer.shape):
            s = format_expr(start)
            if size == extent and s == "0":
                parts.append(":")
            elif size == 1:
                parts.append(s)
            else:
                parts.append(f"{s} +: {size}")
        return f"{self.buffer.name}[{', '.join(parts)}]"


def full_region(buffer: Buffer) -> Region:
    return Region(buffer, tuple(Const(0) for _ in buffer.shape), buffer.shape)


# ---------------------------------------------------------------------------------------------
# Statements. Each records where the user wrote it; `op_name` is the user-facing name.


@dataclass(frozen=True)
class Stmt:
    """Base of every statement. A statement type says what it is through the class attributes
    below (the passes ask them instead of keeping lists of types) and has one rule in each pass
    (ir/rules.py; docs/architecture.md, "Adding a statement")."""

    loc: SourceLoc = field(compare=False, repr=False, kw_only=True, default=UNKNOWN_LOC)

    op_name: ClassVar[str] = "stmt"
    # It talks to peers: a kernel with it needs NVSHMEM and symmetric memory.
    communicates: ClassVar[bool] = False
    # An NVSHMEM team collective: the k-th such call of every PE forms one instance.
    team_collective: ClassVar[bool] = False
    # One thread may issue it on its own, so it may stand in a thread-dependent branch (ir/control.py;
    # a statement with a `scope` only in thread scope). Block statements need every thread.
    in_thread_branch: ClassVar[bool] = False
    # It means something per thread: its operands may depend on the thread anywhere.
    per_thread: ClassVar[bool] = False
    # It may stand in a `T.Parallel` body (one iteration runs it, on one thread; ir/tile_ops.py).
    in_parallel: ClassVar[bool] = False

    @property
    def bodies(self) -> tuple[tuple[Stmt, ...], ...]:
        """The nested statement lists (a loop's body, an if's two sides); none for most."""
        return ()

    def peer_writes(self) -> tuple[Region, ...]:
        """The regions of global memory that peers write through this statement (they must be
        symmetric: `KernelIR.remote_written`)."""
        return ()

    def peer_reads(self) -> tuple[Region, ...]:
        """The regions of global memory that peers read through this statement (`remote_read`)."""
        return ()


@dataclass(frozen=True)
class Copy(Stmt):
    """Block-cooperative copy between global and shared regions of equal shape.

    `clip_dims` (TileLang's ragged edges): the dimensions along which the global-side window of a
    copy between global memory (`CLIP_KINDS`) and an on-chip tile may extend past the end of its
    buffer (the clip bound is the buffer's extent). Elements of the window outside the buffer are
    not accessed: a load writes zero into the tile for them, a store skips them. Every window
    still starts inside its buffer, and along the other dimensions it lies wholly inside (the
    verifier checks both). `T.copy` records the dimensions it cannot prove inside, so an empty
    tuple means the plain, unguarded copy.

    `transpose` (`T.copy(..., transpose=True)`): dst[i, j] = src[j, i], both 2-D, src an on-chip
    tile (a store: only the destination may clip). The swapped product's epilogue (C^T computed,
    C stored) as one whole copy, which the GEMM lowerings store like an untransposed one.
    """

    src: Region
    dst: Region
    clip_dims: tuple[int, ...] = ()
    transpose: bool = False
    op_name = "copy"

    @property
    def may_clip(self) -> bool:
        """Whether some elements of the window may lie outside the global buffer."""
        return bool(self.clip_dims)

    @property
    def global_side(self) -> Region:
        """The region `clip_dims` refers to: the side that is not an on-chip tile (src for a load)."""
        return self.dst if self.src.buffer.kind in BLOCK_LOCAL else self.src


@dataclass(frozen=True)
class SignalUpdate:
    """The signal half of a put-with-signal: `word op= value` on the target PE."""

    word: Region  # one uint64 element of a SIGNAL buffer
    value: Expr
    op: SignalOp


@dataclass(frozen=True)
class Put(Stmt):
    """NVSHMEM putmem family: copy `src` (local) to `dst` on PE `pe`.

    `blocking=False` is the `_nbi` form: the data is delivered at the latest by the next
    `quiet` (or barrier, or the end of the kernel). With `signal`, the signal is applied on the
    target after all of the data is delivered. `size`, when set, is a run-time byte count: the
    transfer moves that many bytes, in whole rows, starting at the first row of `src`/`dst`
    (each one row of its buffer), as TileScale's address + byte-count form does.
    """

    dst: Region
    src: Region
    pe: Expr
    scope: Scope
    blocking: bool
    signal: SignalUpdate | None = None
    size: Expr | None = None
    communicates: ClassVar[bool] = True
    in_thread_branch: ClassVar[bool] = True

    def peer_writes(self) -> tuple[Region, ...]:
        return (self.dst,)

    @property
    def op_name(self) -> str:  # type: ignore[override]
        name = "putmem_signal" if self.signal is not None else "putmem"
        return name + ("" if self.blocking else "_nbi") + self.scope.suffix


@dataclass(frozen=True)
class Get(Stmt):
    """NVSHMEM getmem family: copy `src` (symmetric, on PE `pe`) into local `dst`.

    The blocking form has the data in `dst` when it returns; the `_nbi` form only after the next
    `quiet` (or barrier, or the end of the kernel): until then `dst` is undefined. `size` as for Put.
    """

    dst: Region
    src: Region
    pe: Expr
    scope: Scope
    blocking: bool
    size: Expr | None = None
    communicates: ClassVar[bool] = True
    in_thread_branch: ClassVar[bool] = True

    def peer_reads(self) -> tuple[Region, ...]:
        return (self.src,)

    @property
    def op_name(self) -> str:  # type: ignore[override]
        return "getmem" + ("" if self.blocking else "_nbi") + self.scope.suffix


class Direction(enum.Enum):
    PUT = "put"  # local src -> dst on the peer
    GET = "get"  # src on the peer -> local dst


@dataclass(frozen=True)
class PeerCopy(Stmt):
    """TileScale's put_block/get_block/put_warp/get_warp: plain loads and stores through
    `nvshmem_ptr`, the peer's mapping of the symmetric heap (NVLink). Complete when the statement
    ends (the stores are then visible to the peer). The peer must be load/store reachable, except
    with `fallback` (what views lower to): where `nvshmem_ptr` is null the transfer is a blocking
    getmem/putmem (a put then quiet), with the same meaning."""

    dst: Region
    src: Region
    pe: Expr
    direction: Direction
    scope: Scope
    fallback: bool = False
    communicates: ClassVar[bool] = True

    @property
    def remote(self) -> Region:
        return self.dst if self.direction is Direction.PUT else self.src

    def peer_writes(self) -> tuple[Region, ...]:
        return (self.dst,) if self.direction is Direction.PUT else ()

    def peer_reads(self) -> tuple[Region, ...]:
        return (self.src,) if self.direction is Direction.GET else ()

    @property
    def op_name(self) -> str:  # type: ignore[override]
        return f"{self.direction.value}_{self.scope.value}"


@dataclass(frozen=True)
class SignalWait(Stmt):
    """Block until `word cmp value` holds on this PE (the word is not modified)."""

    word: Region
    cmp: Cmp
    value: Expr
    op_name = "signal_wait_until"
    communicates: ClassVar[bool] = True
    in_thread_branch: ClassVar[bool] = True


@dataclass(frozen=True)
class RemoteSignal(Stmt):
    """`signal_op(sig, value, op, pe)`: `word op= value` on PE `pe`, atomically. Like a put it
    completes at the next quiet; `fence` orders it after earlier puts to the same PE."""

    word: Region
    value: Expr
    op: SignalOp
    pe: Expr
    op_name = "signal_op"
    communicates: ClassVar[bool] = True
    in_thread_branch: ClassVar[bool] = True


@dataclass(frozen=True)
class WaitUntil(Stmt):
    """TileScale's `wait_eq` ... `wait_lt`: block until `word cmp value` holds, on this PE, or
    with `pe` on that peer (polled through `nvshmem_ptr`). The word is not modified."""

    word: Region
    cmp: Cmp
    value: Expr
    pe: Expr | None = None
    communicates: ClassVar[bool] = True
    in_thread_branch: ClassVar[bool] = True

    def peer_reads(self) -> tuple[Region, ...]:
        """A remote wait polls the peer's word: it must be symmetric (an input is copied in)."""
        return () if self.pe is None else (self.word,)

    @property
    def op_name(self) -> str:  # type: ignore[override]
        return f"wait_{self.cmp.suffix}"


@dataclass(frozen=True)
class Quiet(Stmt):
    """Completes every put this PE issued (they are delivered and visible)."""

    op_name = "quiet"
    communicates: ClassVar[bool] = True
    in_thread_branch: ClassVar[bool] = True


@dataclass(frozen=True)
class Fence(Stmt):
    """Orders puts to each PE: those before are delivered before those after."""

    op_name = "fence"
    communicates: ClassVar[bool] = True
    in_thread_branch: ClassVar[bool] = True


@dataclass(frozen=True)
class BarrierAll(Stmt):
    """Every block of every PE arrives before any continues. `quiet=True` (`barrier_all`) also
    completes every earlier put; `quiet=False` (`sync_all`) only orders the blocks' own memory
    accesses (puts may still be in flight)."""

    quiet: bool = True
    communicates: ClassVar[bool] = True

    @property
    def op_name(self) -> str:  # type: ignore[override]
        return "barrier_all" if self.quiet else "sync_all"


@dataclass(frozen=True)
class TeamBarrier(Stmt):
    """NVSHMEM's `barrier_all_block`/`_warp` (`quiet=True`) and `sync_all_block`/`_warp`: one call
    per PE per instance (the k-th team collective call of each PE forms the k-th instance), made
    by one block; the kernel's PE space is the team. The barrier form completes the calling
    block's puts first."""

    scope: Scope
    quiet: bool
    communicates: ClassVar[bool] = True
    team_collective: ClassVar[bool] = True

    @property
    def op_name(self) -> str:  # type: ignore[override]
        return ("barrier_all" if self.quiet else "sync_all") + self.scope.suffix


@dataclass(frozen=True)
class Broadcast(Stmt):
    """`broadcast(dst, src, root)`: `dst` on every PE (root included) becomes `src` of PE `root`.
    A team collective (one call per PE per instance); on return the local `dst` holds the data."""

    dst: Region
    src: Region
    root: Expr
    scope: Scope
    communicates: ClassVar[bool] = True
    team_collective: ClassVar[bool] = True

    def peer_writes(self) -> tuple[Region, ...]:
        return (self.dst,)

    @property
    def op_name(self) -> str:  # type: ignore[override]
        return "broadcast" + self.scope.suffix


@dataclass(frozen=True)
class Fcollect(Stmt):
    """`fcollect(dst, src)`: `dst` on every PE becomes the concatenation along dimension 0 of
    `src` of PEs 0..npes-1 (`dst` has npes times `src`'s rows). A team collective."""

    dst: Region
    src: Region
    scope: Scope
    communicates: ClassVar[bool] = True
    team_collective: ClassVar[bool] = True

    def peer_writes(self) -> tuple[Region, ...]:
        return (self.dst,)

    @property
    def op_name(self) -> str:  # type: ignore[override]
        return "fcollect" + self.scope.suffix


@dataclass(frozen=True)
class Loop(Stmt):
    """`for i in T.serial(n)` / `T.Pipelined(n, num_stages=k)`: `body` runs for i = 0 .. n-1 in order.

    `var` is the loop's own index variable (VarKind.LOOP, unique id); `num_stages` is a hint for a
    future pipelining code generator (the interpreter runs the iterations one after the other)."""

    var: Var
    extent: int
    body: tuple[Stmt, ...]
    num_stages: int | None = None
    # Its body's statements say for themselves where they may stand.
    in_thread_branch: ClassVar[bool] = True
    in_parallel: ClassVar[bool] = True

    @property
    def op_name(self) -> str:  # type: ignore[override]
        return "serial" if self.num_stages is None else "Pipelined"

    @property
    def bodies(self) -> tuple[tuple[Stmt, ...], ...]:
        return (self.body,)


@dataclass(frozen=True)
class Fill(Stmt):
    """`T.fill(tile, value)` / `T.clear(tile)`: every element of a fragment or shared tile := value."""

    dst: Region
    value: float
    op_name = "fill"


@dataclass(frozen=True)
class Gemm(Stmt):
    """`T.gemm(A, B, C)`: C (+)= op(A) @ op(B), fp16/bf16/fp32 inputs, fp32 accumulation in C."""

    a: Region
    b: Region
    c: Region
    transpose_a: bool = False
    transpose_b: bool = False
    clear_accum: bool = False
    op_name = "gemm"


def walk_stmts(body: tuple[Stmt, ...]) -> Iterator[Stmt]:
    """Every statement of `body`, loops (and ifs) first and then their bodies (recursively), in order."""
    for s in body:
        yield s
        for nested in s.bodies:
            yield from walk_stmts(nested)


def stmt_exprs(stmt: Stmt) -> list[Expr]:
    """Every index expression of a statement: region starts, PEs, values, sizes (the verifier
    checks the loads in them; the code generator looks at them)."""
    out: list[Expr] = []
    if isinstance(stmt, Loop) or (stmt.bodies and isinstance(getattr(stmt, "var", None), Var)):
        return out  # a loop (a tile queue): its variable is bound, not read; its body's statements have their own

    def visit(value: object) -> None:
        if isinstance(value, Expr):
            out.append(value)
        elif isinstance(value, Region):
            out.extend(value.starts)
        elif isinstance(value, SignalUpdate):
            visit(value.word)
            visit(value.value)
        elif hasattr(value, "index_exprs"):  # an element value (values.py): its read positions and indices
            out.extend(value.index_exprs())

    for f in fields(stmt):
        visit(getattr(stmt, f.name))
    return out
