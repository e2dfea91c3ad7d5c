"""`T.alloc(shape, dtype, level=)`: one allocation call over the HDA's memory levels.

The level picks the allocator (`ir/buffers.py` `LEVEL_KINDS` says which buffer kind each makes):
"l0" registers (a per-block register tile, `alloc_fragment`), "l1" shared memory
(`alloc_shared`), "global" per-launch scratch in global memory (this PE's only; zero at the start
of every launch, like symmetric scratch, but peers cannot address it), "symmetric" symmetric
scratch peers can address (`alloc_symmetric`). The level is kept on the buffer, so the IR text
shows it (`smem: shared float16[64, 64] level=l1`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import KernelTraceError
from ..ir.buffers import LEVEL_KINDS, MemLevel
from .memory import _alloc, _shape
from .refs import Ref
from .source import user_source_loc
from .state import current_trace

# The buffer names' prefixes, as the level-specific allocators name theirs.
_NAME_BASE = {MemLevel.L0: "frag", MemLevel.L1: "smem", MemLevel.GLOBAL: "gmem", MemLevel.SYMMETRIC: "sym"}


def _level(level: Any) -> MemLevel:
    if isinstance(level, MemLevel):
        return level
    if isinstance(level, str):
        try:
            return MemLevel(level.lower())
        except ValueError:
            pass
    spellings = ", ".join(repr(m.value) for m in MemLevel)
    raise KernelTraceError(
        f"T.alloc: level={level!r} is not a memory level; use one of {spellings} (or T.MemLevel.L0 ...)",
        user_source_loc(),
    )


def alloc(shape: Any, dtype: Any, level: str | MemLevel = "l1", *, name: str | None = None,
          left_zero: bool = False) -> Ref:
    """A buffer of `shape` and `dtype` at memory `level` (default "l1", shared memory):

    - "l0": registers, a per-block register tile (as `T.alloc_fragment`; per-thread scalars are
      `T.alloc_local` / `T.alloc_var`);
    - "l1": the block's shared memory (as `T.alloc_shared`);
    - "global": per-launch scratch in this PE's global memory, zero when the kernel starts, seen by
      every block of this PE (not by peers: use "symmetric" for that);
    - "symmetric": symmetric scratch that peers can put into, get from and wait on (as
      `T.alloc_symmetric`), zero when the kernel starts.

    `left_zero=True` ("global" only): the kernel promises to leave every element zero when it ends, as
    a ticket counter whose last taker takes the count back (`T.atomic_fetch_add(word, -n, prev)`). The
    interpreter checks the promise at the end of every launch; on the GPU a kernel whose scratch is all
    such buffers skips the end-of-call pass that zeroes it for the next launch (every block counts itself
    out, the last one clears: ~4.6 us of a one-wave kernel, benchmarks/NOTES.md).

    Named in messages and IR text by `name`, else by the variable it is assigned to.
    """
    lvl = _level(level)
    current_trace("alloc")  # outside a kernel, that is the error to report first
    if left_zero and lvl is not MemLevel.GLOBAL:
        raise KernelTraceError(
            f'T.alloc: left_zero=True is a promise about level="global" scratch; level="{lvl.value}" has no '
            "end-of-call zeroing to skip", user_source_loc())
    dims = _shape(shape, f'alloc(level="{lvl.value}")')
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise KernelTraceError(f'T.alloc(level="{lvl.value}"): {dtype!r} is not a dtype', user_source_loc()) from None
    return _alloc("alloc", _NAME_BASE[lvl], dims, dt, LEVEL_KINDS[lvl], name, level=lvl, left_zero=left_zero)


__all__ = ["MemLevel", "alloc"]
