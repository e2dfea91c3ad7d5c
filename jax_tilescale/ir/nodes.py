"""Nodes of the kernel IR: buffers, regions of buffers, statements and the kernel itself.

Every node is a frozen dataclass, so a traced kernel is hashable (it is a parameter of the JAX
primitive and a key of the compile cache) and can be shared by the interpreter and the code
generator without either changing it. Invariants that involve several nodes are checked by
`verify.py`, in one place.
"""

from __future__ import annotations

import enum
import math
import operator
from dataclasses import dataclass, field

import numpy as np

from .expr import Expr, format_expr


class SignalOp(enum.Enum):
    """How a signal word is updated (NVSHMEM_SIGNAL_SET / NVSHMEM_SIGNAL_ADD)."""

    SET = "set"
    ADD = "add"


class Cmp(enum.Enum):
    """Comparison of `signal_wait_until` (NVSHMEM_CMP_*)."""

    EQ = "=="
    NE = "!="
    GT = ">"
    GE = ">="
    LT = "<"
    LE = "<="

    def holds(self, lhs: int, rhs: int) -> bool:
        return _CMP_OPS[self](lhs, rhs)


_CMP_OPS = {Cmp.EQ: operator.eq, Cmp.NE: operator.ne, Cmp.GT: operator.gt, Cmp.GE: operator.ge,
            Cmp.LT: operator.lt, Cmp.LE: operator.le}


class Scope(enum.Enum):
    """Which threads of a block take part in an operation (NVSHMEM's thread/warp/block APIs)."""

    THREAD = "thread"
    WARP = "warp"
    BLOCK = "block"


class BufferKind(enum.Enum):
    INPUT = "input"  # an operand of the JAX call; read-only in the kernel
    OUTPUT = "output"  # a result of the JAX call
    SHARED = "shared"  # per-block on-chip tile (`alloc_shared`)
    SIGNAL = "signal"  # symmetric uint64 words, zeroed before each launch (`alloc_signal`)


SIGNAL_DTYPE = np.dtype(np.uint64)


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
class Buffer:
    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    kind: BufferKind

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def __str__(self) -> str:
        return f"{self.name}: {self.kind.value} {self.dtype.name}{list(self.shape)}"


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
    from .expr import Const

    return Region(buffer, tuple(Const(0) for _ in buffer.shape), buffer.shape)


# ---------------------------------------------------------------------------------------------
# Statements. Each records where the user wrote it; `op_name` is the user-facing name.


@dataclass(frozen=True)
class Stmt:
    loc: SourceLoc = field(compare=False, repr=False, kw_only=True, default=UNKNOWN_LOC)

    op_name = "stmt"


@dataclass(frozen=True)
class Copy(Stmt):
    """Block-cooperative copy between global and shared regions of equal shape."""

    src: Region
    dst: Region
    op_name = "copy"


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
    target after all of the data is delivered.
    """

    dst: Region
    src: Region
    pe: Expr
    scope: Scope
    blocking: bool
    signal: SignalUpdate | None = None

    @property
    def op_name(self) -> str:  # type: ignore[override]
        name = "putmem_signal" if self.signal is not None else "putmem"
        name += "" if self.blocking else "_nbi"
        return name + ("" if self.scope is Scope.THREAD else f"_{self.scope.value}")


@dataclass(frozen=True)
class SignalWait(Stmt):
    """Block until `word cmp value` holds on this PE (the word is not modified)."""

    word: Region
    cmp: Cmp
    value: Expr
    op_name = "signal_wait_until"


@dataclass(frozen=True)
class Quiet(Stmt):
    """Completes every put this PE issued (they are delivered and visible)."""

    op_name = "quiet"


@dataclass(frozen=True)
class Fence(Stmt):
    """Orders puts to each PE: those before are delivered before those after."""

    op_name = "fence"


@dataclass(frozen=True)
class BarrierAll(Stmt):
    """Every block of every PE arrives before any continues; implies `quiet`."""

    op_name = "barrier_all"


# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KernelIR:
    name: str
    inputs: tuple[Buffer, ...]
    outputs: tuple[Buffer, ...]
    allocs: tuple[Buffer, ...]  # SHARED and SIGNAL buffers, in allocation order
    body: tuple[Stmt, ...]
    grid: tuple[int, ...]
    threads: int
    mesh_axes: tuple[str, ...]  # the axes whose devices form the PE space
    num_pes: int  # product of the sizes of `mesh_axes`
    loc: SourceLoc = field(compare=False, default=UNKNOWN_LOC)

    @property
    def params(self) -> tuple[Buffer, ...]:
        """Global buffers in calling-convention order: inputs, then outputs."""
        return self.inputs + self.outputs

    def remote_written(self) -> frozenset[Buffer]:
        """Global buffers that peers may write: they must live in symmetric memory."""
        return frozenset(s.dst.buffer for s in self.body if isinstance(s, Put))

    def uses_nvshmem(self) -> bool:
        return any(isinstance(s, (Put, SignalWait, Quiet, Fence, BarrierAll)) for s in self.body) or any(
            b.kind is BufferKind.SIGNAL for b in self.allocs
        )
