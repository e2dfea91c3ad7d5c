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

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def __str__(self) -> str:
        text = f"{self.name}: {self.kind.value} {self.dtype.name}{list(self.shape)}"
        return text if self.level is None else f"{text} level={self.level.value}"


# Element types a kernel can read as index values (`T.load` of an input, `Load`): every integer an
# int64 index expression holds exactly.
LOADABLE_DTYPES = frozenset(
    np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32)
)
