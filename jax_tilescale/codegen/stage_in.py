"""Staged inputs copied in by the kernel itself (issue 14, item 3; docs/calling_convention.md, "Staging
copies in the kernel").

A kernel with NVSHMEM's calls (across machines, or with $TILESCALE_CALL_FREE=0) whose peers read an input
(gets, remote waits) runs on a symmetric copy of it, which the handler used to fill with a device-to-device
copy before the launch: a separate pass, and on the host one more driver call per input and launch. Here
the kernel fills it at its start, before its entry barrier: the warps of whichever blocks are running
claim 64 KiB chunks one at a time from a counter in the scratch (so the copy never waits for a block that
is not resident), count the chunks they finished, and every block goes on once all are done
(`ts_copy_in`, tilescale_call.cuh). Its arrival at the entry barrier then tells the peers the copy is
there, as the handler's copy did in stream order. The handler passes XLA's buffer in `TsLaunchArgs.home`
(`TS_STAGE_KERNEL_IN`) and copies nothing in.

Every staged input qualifies (an aliased output, staged both ways, stays the handler's), up to
`TS_MAX_HOMES` params together with the outputs the kernel copies out (codegen/stage_out.py);
$TILESCALE_KERNEL_STAGING=0 leaves every staging copy to the handler, for comparison.
"""

from __future__ import annotations

import os

from .. import abi
from ..ir.kernel_ir import KernelIR
from ..ir.nodes import Buffer, BufferKind
from .common import c_string, comment

ENV_VAR = "TILESCALE_KERNEL_STAGING"  # "0": the handler does every staging copy (for comparison)


def kernel_staging_on() -> bool:
    return os.environ.get(ENV_VAR, "1") != "0"


def kernel_copied_in(kernel: KernelIR, call_free: bool) -> tuple[Buffer, ...]:
    """The staged inputs the kernel copies in itself, in param order."""
    if call_free or not kernel.uses_nvshmem() or not kernel_staging_on():
        return ()
    copied = kernel.copied_in()
    return tuple(b for b in kernel.params if b.kind is BufferKind.INPUT and b in copied)[:abi.MAX_HOMES]


def declarations(kernel: KernelIR, inputs: tuple[Buffer, ...], homes: dict[Buffer, int]) -> list[str]:
    rows = ", ".join(f"{{{homes[b]}, {kernel.params.index(b)}, {b.nbytes}}}" for b in inputs)
    return [f"__device__ const TsCopyIn ts_copy_ins[{len(inputs)}] = {{{rows}}};  // {{home, param, bytes}}"]


def start_lines(kernel: KernelIR, inputs: tuple[Buffer, ...], counters_offset: int) -> list[str]:
    """The kernel's first statement: the copy of `inputs` into their symmetric copies (before the entry
    barrier, which `_call_start` adds after it)."""
    names = ", ".join(b.name for b in inputs)
    return [
        comment(f"staged inputs copied in by the kernel, before the entry barrier: {names} (codegen/stage_in.py)"),
        f"ts_copy_in(args, ts_copy_ins, {len(inputs)}, reinterpret_cast<uint64_t*>(ts_launch_scratch(args, "
        f"ts_launch_seq(args)) + {counters_offset}), {c_string(str(kernel.loc))});",
    ]


__all__ = ["ENV_VAR", "declarations", "kernel_copied_in", "kernel_staging_on", "start_lines"]
