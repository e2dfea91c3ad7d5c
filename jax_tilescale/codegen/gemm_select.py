"""Which lowering a kernel's T.gemm loops take: the Hopper plan (gemm_sm90), the mma.sync plan
(gemm_sm80), or the portable rules of compute.py.

`auto` (the default): on sm_90 the Hopper plan, and when it takes no loop (threads are not whole
warpgroups, a block-scoped NVSHMEM call between its producer/consumer split, ...) the mma.sync
plan; on sm_80 and later GPUs other than sm_90 the mma.sync plan; elsewhere the portable path.
`sm90`, `mma` and `portable` force one lowering (where it cannot apply, the loops take the
portable path and the notes say why), for tests and for benchmarks that compare the lowerings on
one GPU. The choice is `generate_cuda(..., gemm_lowering=)`, else $TILESCALE_GEMM_LOWERING (read
here only, when a kernel is compiled), else `auto`.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable

import numpy as np

from ..errors import KernelTraceError
from ..ir.kernel_ir import KernelIR
from ..ir.nodes import BufferKind, Gemm, walk_stmts
from . import gemm_sm80, gemm_sm90
from .context import GemmPlan
from .layout import max_shared_bytes

LOWERING_VAR = "TILESCALE_GEMM_LOWERING"
LOWERINGS = ("auto", "sm90", "mma", "portable")


def requested_lowering(value: str | None = None) -> str:
    """`value`, else $TILESCALE_GEMM_LOWERING, else "auto"; checked against LOWERINGS."""
    text = value if value is not None else os.environ.get(LOWERING_VAR, "")
    choice = text.strip().lower() or "auto"
    if choice not in LOWERINGS:
        source = "gemm_lowering" if value is not None else f"${LOWERING_VAR}"
        raise ValueError(f"{source} must be one of {', '.join(LOWERINGS)}, not {text!r}")
    return choice


def select_plan(kernel: KernelIR, arch: str, lowering: str | None = None) -> tuple[GemmPlan | None, list[str]]:
    """(plan, notes): the kernel's one GEMM plan (a `gemm_sm90.Sm90Plan` or a `gemm_sm80.Sm80Plan`;
    the rest of the code generator asks only what `context.GemmPlan` states) or None (portable),
    and one line per GEMM loop that did not take the chosen lowering (or took it with changes),
    each saying which path it took and why."""
    choice = requested_lowering(lowering)
    if choice == "portable":
        return None, []
    if choice == "sm90" or (choice == "auto" and arch.startswith("sm_90")):
        hopper, why = gemm_sm90.plan_with_reasons(kernel, arch)
        if hopper is not None or choice == "sm90":
            return hopper, [*(f"portable path: wgmma: {r}" for r in why), *(hopper.notes if hopper else ())]
        hopper_why = why
    else:
        hopper_why = []
    mma, why = gemm_sm80.plan_with_reasons(kernel, arch)
    if mma is None:
        _refuse_portable_float8(kernel, [*hopper_why, *why])
        return None, [*(f"portable path: wgmma: {r}" for r in hopper_why),
                      *(f"portable path: mma.sync: {r}" for r in why)]
    return mma, [
        *(f"mma.sync path, not wgmma: {r}" for r in hopper_why),
        *(f"portable path: mma.sync: {r}" for r in why),
        *(f"mma.sync path: {r}" for r in mma.notes),
    ]


def stages_that_fit(plan: GemmPlan, lays_out: Callable[[GemmPlan], object]) -> int | None:
    """The most stages (below the plan's deepest ring, at least 2) whose rings let `lays_out` place the kernel's
    shared memory, or None: each loop's ring cut to that depth in a copy of the plan."""
    for stages in range(max(gl.stages for gl in plan.loops) - 1, 1, -1):
        trial = dataclasses.replace(plan, loops=[dataclasses.replace(gl, stages=min(gl.stages, stages))
                                                 for gl in plan.loops])
        try:
            lays_out(trial)
        except KernelTraceError:
            continue
        return stages
    return None


def shared_memory_refusal(kernel: KernelIR, plan: GemmPlan | None, notes: list[str], error: KernelTraceError,
                          arch: str, lays_out: Callable[[GemmPlan], object]) -> KernelTraceError:
    """The layout's "needs N bytes of shared memory" `error`, told in terms of the GEMM: when a
    T.gemm accumulator that no tensor-core lowering took lives in shared memory (the portable
    path), say so, why the lowerings refused its loop (`notes`), and how large a fragment fits;
    when the plan's stage rings are what does not fit, how many stages would (`lays_out` places a
    plan's shared memory or raises)."""
    registers = plan.register_buffers() if plan is not None else frozenset()
    accs = {s.c.buffer for s in walk_stmts(kernel.body) if isinstance(s, Gemm)}
    in_smem = [b for b in kernel.allocs if b in accs and b not in registers and b.kind is BufferKind.FRAGMENT]
    if not in_smem:
        if plan is None:
            return error
        fits = stages_that_fit(plan, lays_out)
        if fits is not None:
            return KernelTraceError(f"{error.message}: the pipelined loop's stages are what does not fit: take "
                                    f"num_stages={fits}", error.loc)
        return KernelTraceError(f"{error.message}: even 2 stages of the pipelined loop's tiles do not fit: "
                                "take a smaller tile", error.loc)
    others = sum(b.nbytes for b in kernel.allocs
                 if b.kind in (BufferKind.SHARED, BufferKind.FRAGMENT) and b not in in_smem)
    room = max(0, max_shared_bytes(arch) - others - 256 * len(kernel.allocs)) // len(in_smem)
    frags = ", ".join(f"{b.name} ({' x '.join(map(str, b.shape))} {b.dtype.name}, {b.nbytes} bytes)" for b in in_smem)
    why = "; ".join(notes) if notes else "no tensor-core lowering applies on this target"
    fits = room // np.dtype(np.float32).itemsize
    return KernelTraceError(
        f"{error.message}. The GEMM accumulator {frags} lives in shared memory because its loop took "
        f"the portable path ({why}). Use a smaller tile: an accumulator of at most {fits} float32 "
        f"elements fits beside the other tiles (e.g. block_m x block_n = 128 x {max(8, fits // 128 // 8 * 8)}), "
        "or make the loop one a tensor-core lowering takes (the reasons above)", error.loc)


def _refuse_portable_float8(kernel: KernelIR, why: list[str]) -> None:
    """float8 tiles have only the Hopper lowering (wgmma reads them; the portable rules have no
    float8 arithmetic): a float8 T.gemm it does not take is an error naming the reasons."""
    fp8 = [s for s in walk_stmts(kernel.body) if isinstance(s, Gemm) and s.a.buffer.dtype.itemsize == 1]
    if fp8:
        raise KernelTraceError(
            "a float8 T.gemm runs only on the Hopper lowering (sm_90, TMA + wgmma), which did not take it: "
            + ("; ".join(why) or "the target is not sm_90"), fp8[0].loc)
