"""Simulated memory of one launch: every buffer of every PE and block, and the one access path.

Buffers live where NVSHMEM puts them: inputs and outputs per PE (outputs are symmetric, so peers
may write them; an aliased input and output, `KernelIR.aliases`, are one array, the output's, which
starts as a copy of the input), shared tiles per block, signal words and T.alloc_symmetric buffers per PE
(the symmetric scratch, zero at launch). Every
read and write of kernel memory, by a statement or by a delivered transfer, goes through
`LaunchMemory.access`, so a later race detector needs exactly one hook (`observers`).
Regions are resolved (index expressions evaluated) and bounds-checked here, before any access.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ..errors import KernelRuntimeError
from ..ir.evaluate import Loader, evaluate
from ..ir.expr import Const, Expr, Var, format_expr
from ..ir.kernel_ir import KernelIR
from ..ir.nodes import BLOCK_LOCAL, Buffer, BufferKind, Region, SourceLoc, Stmt

Block = tuple[int, ...]
# BLOCK_LOCAL by the members' ids: hashing an Enum member runs Python code (Enum.__hash__), and
# this test is made on every access.
BLOCK_LOCAL_IDS = frozenset(map(id, BLOCK_LOCAL))
Env = Mapping[Var, int]
SIGNAL_MODULUS = 1 << 64


def poison_value(dtype: np.dtype) -> object:
    """The fill of memory nobody wrote yet: NaN for floats, the largest value for integers."""
    dtype = np.dtype(dtype)
    if dtype.kind in "fc":
        return np.nan
    if dtype.kind in "iu":
        return np.iinfo(dtype).max
    if dtype.kind == "b":
        return True
    return None  # other types (e.g. ml_dtypes' bfloat16): all bits set, a NaN for float formats


def poisoned(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """A fresh array filled with poison, so that elements a kernel never wrote stay visible."""
    value = poison_value(dtype)
    if value is None:
        out = np.empty(shape, dtype)
        out.view(np.uint8)[...] = 0xFF
        return out
    return np.full(shape, value, dtype)


def where(pe: int, block: Block | None, loc: SourceLoc) -> str:
    """The "(PE p, block b, at file:line)" suffix of every run-time error."""
    blk = f", block {block}" if block is not None else ""
    return f"(PE {pe}{blk}, at {loc})"


def eval_index(
    e: Expr, env: Env, what: str, stmt: Stmt, pe: int, block: Block | None, load: Loader | None = None
) -> int:
    """Evaluates an index expression (`load` reads the inputs for T.load); arithmetic errors
    become KernelRuntimeError with a location."""
    try:
        return evaluate(e, env, load)  # type: ignore[arg-type]  # only reads env[var]
    except ZeroDivisionError as err:
        raise KernelRuntimeError(
            f"{stmt.op_name}: {what} `{format_expr(e)}`: {err} {where(pe, block, stmt.loc)}"
        ) from None


@dataclass(frozen=True)
class ResolvedRegion:
    """A region with concrete, bounds-checked starts."""

    buffer: Buffer
    starts: tuple[int, ...]
    sizes: tuple[int, ...]

    @property
    def index(self) -> tuple[slice, ...]:
        return tuple(slice(s, s + n) for s, n in zip(self.starts, self.sizes))

    def __str__(self) -> str:
        parts = [str(s) if n == 1 else f"{s}:{s + n}" for s, n in zip(self.starts, self.sizes)]
        return f"{self.buffer.name}[{', '.join(parts)}]"


def resolve_region(
    region: Region, env: Env, role: str, stmt: Stmt, pe: int, block: Block | None, load: Loader | None = None,
    clip_dims: tuple[int, ...] = (),
) -> ResolvedRegion:
    """Evaluates a region's starts and checks it lies inside its buffer (the dynamic half of the
    verifier's static check: only the interpreter sees non-affine starts). Along `clip_dims` (a
    clipped T.copy, ir/nodes.py Copy) the window need only start inside: the result is the part
    inside the buffer (its sizes cut at the extent)."""
    buf = region.buffer
    starts, sizes = [], []
    for dim, (start, size, extent) in enumerate(zip(region.starts, region.sizes, buf.shape)):
        if type(start) is Const:  # most starts of most statements: no evaluation, no message to build
            value = start.value
        else:
            value = eval_index(start, env, f"the start of {role} along dimension {dim}", stmt, pe, block, load)
        clip = dim in clip_dims
        if value < 0 or (value >= extent if clip else value + size > extent):
            why = " (a clipped window may end past its buffer, not start past it)" if clip else ""
            raise KernelRuntimeError(
                f"{stmt.op_name}: out-of-bounds {role} {region}: along dimension {dim} of {buf.name} "
                f"(extent {extent}) the start `{format_expr(start)}` is {value}, and [{value}, {value + size}) "
                f"leaves [0, {extent}){why} {where(pe, block, stmt.loc)}"
            )
        starts.append(value)
        sizes.append(min(size, extent - value))
    return ResolvedRegion(buf, tuple(starts), tuple(sizes))


class AccessKind(enum.Enum):
    READ = "read"
    WRITE = "write"
    SYNC_READ = "sync_read"  # a signal word read by signal_wait_until (accessed once, then polled)
    SYNC_UPDATE = "sync_update"  # SET/ADD of a signal word by a delivered put-with-signal
    ATOMIC = "atomic"  # T.atomic_add/max/min: a read-modify-write that races with plain accesses only


@dataclass(frozen=True)
class Access:
    """One access to kernel memory: what, whose memory, and who does it (race checks, coverage).

    `owner` is the PE whose memory is touched; `owner_block` the block whose shared memory (SHARED
    buffers only). `actor_pe`/`actor_block`/`stmt` name who accesses it: a statement of a block, or,
    with `via` set, a transfer (`via` is its key, e.g. the Transfer: the race detector's agent for
    it) issued by `actor_pe` (block `actor_block`, or None) at `stmt`.
    """

    kind: AccessKind
    region: ResolvedRegion
    owner: int
    owner_block: Block | None
    actor_pe: int
    actor_block: Block | None
    stmt: Stmt | None
    via: object | None = None


class LaunchMemory:
    """All buffers of one launch, created lazily where that saves memory (shared tiles)."""

    def __init__(self, kernel: KernelIR):
        self.kernel = kernel
        self.observers: list[Callable[[Access], None]] = []
        self._inputs: dict[int, dict[Buffer, np.ndarray]] = {}
        self._outputs: dict[int, dict[Buffer, np.ndarray]] = {}
        self._signals: dict[int, dict[Buffer, np.ndarray]] = {}
        self._shared: dict[tuple[int, Block], dict[Buffer, np.ndarray]] = {}

    def bind_pe(self, pe: int, inputs: Sequence[np.ndarray]) -> None:
        """Takes a PE's inputs (checked against the kernel's signature) and makes its outputs and
        signal words: outputs poisoned, signals zero (NVSHMEM's zeroed scratch)."""
        k = self.kernel
        if len(inputs) != len(k.inputs):
            raise KernelRuntimeError(
                f"kernel {k.name!r} takes {len(k.inputs)} inputs, PE {pe} passed {len(inputs)}"
            )
        bound = {}
        for buf, arr in zip(k.inputs, inputs):
            arr = np.asarray(arr)
            if arr.shape != buf.shape or arr.dtype != buf.dtype:
                raise KernelRuntimeError(
                    f"kernel {k.name!r}: input {buf.name} must be {buf.dtype.name}{list(buf.shape)}, "
                    f"PE {pe} passed {arr.dtype.name}{list(arr.shape)}"
                )
            bound[buf] = arr
        self._inputs[pe] = bound
        self._outputs[pe] = {b: poisoned(b.shape, b.dtype) for b in k.outputs}
        for i, o in k.alias_pairs():  # one storage: the output starts with the input's contents
            self._outputs[pe][o] = bound[i] = np.array(bound[i], copy=True)
        self._signals[pe] = {  # the symmetric scratch: signal words and T.alloc_symmetric buffers
            b: np.zeros(b.shape, b.dtype)
            for b in k.allocs
            if b.kind in (BufferKind.SIGNAL, BufferKind.SYMMETRIC, BufferKind.GLOBAL)
        }

    def _storage(self, buf: Buffer, owner: int, owner_block: Block | None) -> np.ndarray:
        kind = buf.kind
        if id(kind) in BLOCK_LOCAL_IDS:
            if owner_block is None:
                raise KernelRuntimeError(f"internal: shared buffer {buf.name} accessed without a block")
            tiles = self._shared.setdefault((owner, owner_block), {})
            if buf not in tiles:
                tiles[buf] = poisoned(buf.shape, buf.dtype)
            return tiles[buf]
        table = self._inputs if kind is BufferKind.INPUT else self._outputs if kind is BufferKind.OUTPUT else \
            self._signals  # SIGNAL and SYMMETRIC: the symmetric scratch
        return table[owner][buf]

    def access(self, acc: Access) -> np.ndarray:
        """The single path to kernel memory: returns a view of the accessed region.

        Reads get a read-only view; only WRITE and SYNC_UPDATE may change memory, and inputs are
        never written (an aliased input's memory changes only through its output ref).
        """
        if acc.region.buffer.kind is BufferKind.INPUT and acc.kind in (AccessKind.WRITE, AccessKind.SYNC_UPDATE,
                                                                       AccessKind.ATOMIC):
            raise KernelRuntimeError(f"internal: write to the read-only input {acc.region.buffer.name}")
        for observe in self.observers:
            observe(acc)
        view = self._storage(acc.region.buffer, acc.owner, acc.owner_block)[acc.region.index]
        if acc.kind in (AccessKind.READ, AccessKind.SYNC_READ):
            view = view.view()
            view.flags.writeable = False
        return view

    def read(self, acc: Access) -> np.ndarray:
        """A snapshot (copy) of the region."""
        return np.array(self.access(acc), copy=True)

    def write(self, acc: Access, data: np.ndarray) -> None:
        view = self.access(acc)
        view[...] = data.reshape(view.shape)

    def signal_value(self, acc: Access) -> int:
        return int(self.access(acc).reshape(-1)[0])

    def update_signal(self, acc: Access, value: int, add: bool) -> None:
        """`word = value` or `word += value`, in uint64 arithmetic (wrapping, like the GPU)."""
        view = self.access(acc).reshape(-1)
        new = (int(view[0]) + value if add else value) % SIGNAL_MODULUS
        view[0] = np.uint64(new)

    def release_block(self, pe: int, block: Block) -> None:
        """Frees a finished block's shared tiles (a later block of the same index gets fresh ones)."""
        self._shared.pop((pe, block), None)

    def check_left_zero(self, pe: int) -> None:
        """At the end of PE `pe`'s launch: every `T.alloc(..., left_zero=True)` buffer is all zero, as its
        allocation promised (the GPU does not zero it for the next launch)."""
        for buf, arr in self._signals[pe].items():
            if buf.left_zero and np.any(arr):
                at = tuple(int(i) for i in np.argwhere(arr)[0])
                raise KernelRuntimeError(
                    f"kernel {self.kernel.name!r} ended with {buf.name}{list(at)} = {arr[at]} on PE {pe} "
                    f"({np.count_nonzero(arr)} of {arr.size} elements not zero), but {buf.name} was allocated with "
                    "left_zero=True: the kernel must leave it zero, the GPU does not clear it for the next launch "
                    "(take each counter back, e.g. T.atomic_fetch_add(word, -n, prev), or drop left_zero)")

    def outputs(self, pe: int) -> list[np.ndarray]:
        return [self._outputs[pe][b] for b in self.kernel.outputs]
