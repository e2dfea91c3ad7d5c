"""Per-thread registers of one block (`T.alloc_local`, `T.alloc_var`; ir/control.py).

Registers live here, per block, not in the launch memory: no other thread can see them, so they
take no part in race detection. Reading an element the thread never wrote is an error (the GPU
would read garbage); stores wrap to the register's integer type, as a C conversion does.
"""

from __future__ import annotations

import numpy as np

from ..ir.buffers import Buffer


def wrap_int(value: int, dtype: np.dtype) -> int:
    """`value` converted to the integer `dtype` as C does (modulo 2**bits, two's complement)."""
    bits = 8 * dtype.itemsize
    value &= (1 << bits) - 1
    if dtype.kind == "i" and value >= 1 << (bits - 1):
        value -= 1 << bits
    return value


class Registers:
    """The registers of one block: per buffer, one array per thread and what each thread wrote."""

    def __init__(self, threads: int):
        self.threads = threads
        self.values: dict[Buffer, np.ndarray] = {}
        self.written: dict[Buffer, np.ndarray] = {}

    def _arrays(self, buf: Buffer) -> tuple[np.ndarray, np.ndarray]:
        if buf not in self.values:
            self.values[buf] = np.zeros((self.threads, *buf.shape), buf.dtype)
            self.written[buf] = np.zeros((self.threads, *buf.shape), bool)
        return self.values[buf], self.written[buf]

    def store(self, buf: Buffer, thread: int, index: tuple[int, ...], value: int) -> None:
        values, written = self._arrays(buf)
        values[(thread, *index)] = wrap_int(value, buf.dtype)
        written[(thread, *index)] = True

    def read(self, buf: Buffer, thread: int, index: tuple[int, ...]) -> int | None:
        """The element, or None when this thread has not written it."""
        values, written = self._arrays(buf)
        return int(values[(thread, *index)]) if written[(thread, *index)] else None
