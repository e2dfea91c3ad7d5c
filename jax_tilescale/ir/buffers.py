"""Buffers: the memory a kernel names (its inputs and outputs, tiles, signal words, scratch).

The bottom of the IR: index expressions (`expr.Load`) and regions (`nodes.Region`) refer to
buffers, and buffers refer to nothing else of the IR.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

import numpy as np


class BufferKind(enum.Enum):
    INPUT = "input"  # an operand of the JAX call; read-only in the kernel
    OUTPUT = "output"  # a result of the JAX call
    SHARED = "shared"  # per-block on-chip tile (`alloc_shared`)
    SIGNAL = "signal"  # symmetric uint64 words, zeroed before each launch (`alloc_signal`)
    SYMMETRIC = "symmetric"  # symmetric scratch, zeroed before each launch (`alloc_symmetric`)
    FRAGMENT = "fragment"  # per-block register tile (`alloc_fragment`); the interpreter keeps it like shared
    LOCAL = "local"  # per-thread registers (`alloc_local`, `alloc_var`); read and written element by element
    GLOBAL = "global"  # per-launch scratch in global memory, zeroed before each launch; this PE's only


class MemLevel(enum.Enum):
    """The HDA's memory levels, as `T.alloc(..., level=)` names them (the string spellings are the
    values): registers, shared memory, per-launch global scratch, symmetric scratch."""

    L0 = "l0"
    L1 = "l1"
    GLOBAL = "global"
    SYMMETRIC = "symmetric"


# The buffer kind each level allocates (`T.alloc`); written once, here.
LEVEL_KINDS = {
    MemLevel.L0: BufferKind.FRAGMENT,
    MemLevel.L1: BufferKind.SHARED,
    MemLevel.GLOBAL: BufferKind.GLOBAL,
    MemLevel.SYMMETRIC: BufferKind.SYMMETRIC,
}


@dataclass(frozen=True)
class Buffer:
    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    kind: BufferKind
    # The level `T.alloc(..., level=)` was given (shown in the IR text); None for the other allocators.
    level: MemLevel | None = None
    # `T.alloc(..., level="global", left_zero=True)`: the kernel promises to leave every element zero when it
    # ends (the interpreter checks it), so the GPU need not zero the scratch for the next launch.
    left_zero: bool = False

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def __str__(self) -> str:
        text = f"{self.name}: {self.kind.value} {self.dtype.name}{list(self.shape)}"
        text = text if self.level is None else f"{text} level={self.level.value}"
        return f"{text} left_zero" if self.left_zero else text


# Element types a kernel can read as index values (`T.load` of an input, `Load`): every integer an
# int64 index expression holds exactly.
LOADABLE_DTYPES = frozenset(
    np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32)
)

# Global memory `T.load` reads as an index value. Inputs never change while the kernel runs; the
# others (`CHANGING_KINDS`) may be written by this PE's blocks or by peers while it runs, so a load
# of them reads the element where its statement stands, and is correct only after the wait that
# delivered the data (docs/architecture.md, "Loads"). Signal words (uint64) read as int64: a value
# past 2**63 - 1 wraps to a negative one, as C's conversion does.
LOADABLE_KINDS = frozenset({BufferKind.INPUT, BufferKind.OUTPUT, BufferKind.SYMMETRIC, BufferKind.SIGNAL})
CHANGING_KINDS = frozenset({BufferKind.OUTPUT, BufferKind.SYMMETRIC, BufferKind.SIGNAL})


def load_refusal(buf: Buffer) -> str | None:
    """Why one element of `buf` cannot be read as an index value (`T.load`), or None when it can."""
    if buf.kind not in LOADABLE_KINDS:
        return (
            f"T.load reads global memory (inputs, outputs, T.alloc_symmetric buffers, signal words); {buf.name} is a "
            f"{buf.kind.value} buffer, on chip: its elements are values of element-wise code (`{buf.name}[i] > 0` "
            "inside T.Parallel or in an `if`), not index values"
        )
    if buf.kind is BufferKind.SIGNAL or buf.dtype in LOADABLE_DTYPES:
        return None
    return (
        f"T.load reads integers up to 32 bits and int64 (index values: sizes, offsets, PEs, wait values); "
        f"{buf.name} is {buf.dtype.name}"
    )
