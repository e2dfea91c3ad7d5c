"""Staged inputs copied in by the kernel itself (issue 14, item 3; docs/calling_convention.md, "Staging
copies in the kernel").

A kernel with NVSHMEM's calls (across machines, or with $TILESCALE_CALL_FREE=0) whose peers read an input
(gets, remote waits) runs on a symmetric copy of it, which the handler used to fill with a device-to-device
copy before the launch: a separate pass, and on the host one more driver call per input and launch. Here
the kernel fills it at its start, before its entry barrier: the warps of whichever blocks are running
claim chunks one at a time from a counter in the scratch (so the copy never waits for a block that
is not resident), count the chunks they finished, and every block goes on once all are done
(`ts_copy_in`, tilescale_call.cuh). Its arrival at the entry barrier then tells the peers the copy is
there, as the handler's copy did in stream order. The handler passes XLA's buffer in `TsLaunchArgs.home`
(`TS_STAGE_KERNEL_IN`) and copies nothing in.

A warp copies a chunk (`TS_COPY_IN_CHUNK`, 4 KiB) with one batch of loads (`ts_copy_pieces`: every load
before any store), so the kernel takes inputs only while the chunks number at most the warps of its grid
(and at most `MAX_COPY_IN_WARPS`): then the copy costs about one claim and one chunk per warp, a few
microseconds. Measured (benchmarks/NOTES.md, 2026-12-02) with 64 KiB chunks and no such bound: a 4 KiB input
1.5-5.2 us faster than the handler's copy per call, a 1 MiB input (16 chunks, one warp each) 22-26 us slower;
with 4 KiB chunks and the bound, the 1 MiB input 3.5 us faster in a jitted loop, 1.5 us slower in a
written-out chain of calls, and with the batched loads 16.8-16.9 us in that chain against the handler's
16.8-18.5. Inputs beyond the bound, and aliased outputs (staged both ways), stay the handler's, up to
`TS_MAX_HOMES` params together with the outputs the kernel copies out (codegen/stage_out.py);
$TILESCALE_KERNEL_STAGING=0 leaves every staging copy to the handler, for comparison.
"""

from __future__ import annotations

import math
import os

from .. import abi
from ..ir.kernel_ir import KernelIR
from ..ir.nodes import Buffer, BufferKind
from .common import c_string, comment
from .expr_printer import SEQ_NAME

ENV_VAR = "TILESCALE_KERNEL_STAGING"  # "0": the handler does every staging copy (for comparison)
MAX_COPY_IN_WARPS = 1024  # chunks the kernel copies in, at most (beyond, a warp would copy several)


def kernel_staging_on() -> bool:
    return os.environ.get(ENV_VAR, "1") != "0"


def kernel_copied_in(kernel: KernelIR, call_free: bool) -> tuple[Buffer, ...]:
    """The staged inputs the kernel copies in itself, in param order."""
    if call_free or not kernel.uses_nvshmem() or not kernel_staging_on():
        return ()
    copied = kernel.copied_in()
    room = min(math.prod(kernel.grid) * (kernel.threads // 32), MAX_COPY_IN_WARPS)
    taken: list[Buffer] = []
    for b in kernel.params:
        if b.kind is not BufferKind.INPUT or b not in copied or len(taken) == abi.MAX_HOMES:
            continue
        chunks = -(-b.nbytes // abi.COPY_IN_CHUNK)
        if chunks <= room:
            taken.append(b)
            room -= chunks
    return tuple(taken)


def declarations(kernel: KernelIR, inputs: tuple[Buffer, ...]) -> list[str]:
    """The table of `inputs` (kernel_copied_in's), at file scope; they take the first home slots (the
    handler numbers them in param order, and inputs come first)."""
    rows = ", ".join(f"{{{home}, {kernel.params.index(b)}, {b.nbytes}}}" for home, b in enumerate(inputs))
    return [f"__device__ const TsCopyIn ts_copy_ins[{len(inputs)}] = {{{rows}}};  // {{home, param, bytes}}"]


def start_lines(kernel: KernelIR, inputs: tuple[Buffer, ...], counters_offset: int) -> list[str]:
    """The kernel's first statement: the copy of `inputs` into their symmetric copies (before the entry
    barrier, which `_call_start` adds after it)."""
    names = ", ".join(b.name for b in inputs)
    return [
        comment(f"staged inputs copied in by the kernel, before the entry barrier: {names} (codegen/stage_in.py)"),
        f"ts_copy_in(args, ts_copy_ins, {len(inputs)}, reinterpret_cast<uint64_t*>(ts_launch_scratch(args, "
        f"{SEQ_NAME}) + {counters_offset}), {c_string(str(kernel.loc))});",
    ]


__all__ = ["ENV_VAR", "declarations", "kernel_copied_in", "kernel_staging_on", "start_lines"]
