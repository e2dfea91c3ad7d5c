"""Output coverage: every element of every output must be written on every PE.

A memory observer keeps a written-mask per (PE, output); at the end of the kernel (after every
put is delivered) `check` raises KernelRuntimeError naming each output that has elements nobody
wrote, how many, and the first of them. Such elements would hold poison (NaN, or an integer's
maximum); the usual cause is a grid that does not cover the output. An output aliased to an input
(`KernelIR.aliases`) counts as written from the start: its elements hold the input's values.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..errors import KernelRuntimeError
from ..ir.kernel_ir import KernelIR
from ..ir.nodes import Buffer, BufferKind
from .memory import Access, AccessKind

MAX_LISTED = 4


class CoverageTracker:
    def __init__(self, kernel: KernelIR):
        self.kernel = kernel
        self._masks: dict[tuple[int, Buffer], np.ndarray] = {}
        self._by_id: dict[tuple[int, int], tuple[np.ndarray, Buffer]] = {}  # (PE, id(buffer)): no Buffer hashing

    def bind_pe(self, pe: int) -> None:
        aliased = {o for _, o in self.kernel.alias_pairs()}
        for buf in self.kernel.outputs:
            self._masks[(pe, buf)] = np.full(buf.shape, buf in aliased, dtype=bool)

    def observe(self, acc: Access) -> None:
        buf = acc.region.buffer
        if acc.kind is not AccessKind.WRITE or buf.kind is not BufferKind.OUTPUT:
            return
        hit = self._by_id.get((acc.owner, id(buf)))
        if hit is None:
            hit = self._by_id[(acc.owner, id(buf))] = (self._masks[(acc.owner, buf)], buf)
        hit[0][acc.region.index] = True

    def written(self, pe: int, buf: Buffer, index: tuple[int, ...]) -> bool:
        """Whether element `index` of output `buf` of PE `pe` has been written (a T.load of one that
        has not reads garbage on the GPU)."""
        return bool(self._masks[(pe, buf)][index])

    def check(self, pes: Sequence[int]) -> None:
        """Raises if an output element of one of `pes` was never written."""
        problems = []
        for pe in pes:
            for buf in self.kernel.outputs:
                mask = self._masks[(pe, buf)]
                if mask.all():
                    continue
                missing = mask.size - int(np.count_nonzero(mask))
                first = [int(i) for i in np.unravel_index(int(np.argmin(mask)), mask.shape)]
                problems.append(
                    f"output {buf.name} ({buf.dtype.name}{list(buf.shape)}) of PE {pe}: {missing} of {mask.size} "
                    f"elements were never written, the first at {first}"
                )
        if not problems:
            return
        k = self.kernel
        shown = problems[:MAX_LISTED]
        if len(problems) > MAX_LISTED:
            shown.append(f"... and {len(problems) - MAX_LISTED} more (output, PE) pairs")
        raise KernelRuntimeError(
            f"kernel {k.name!r} left outputs partly unwritten (they would hold poison: NaN, or an integer's "
            f"maximum):\n  " + "\n  ".join(shown) + f"\nDoes the grid {k.grid} cover every output? Every element "
            f"must be written by a block of its PE or by a put from a peer. "
            f"(InterpretOptions(check_coverage=False) turns this check off.)"
        )
