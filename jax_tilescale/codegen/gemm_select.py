"""Which lowering a kernel's T.gemm loops take: the Hopper plan (gemm_sm90), the mma.sync plan
(gemm_sm80), or the portable rules of compute.py.

`auto` (the default): on sm_90 the Hopper plan, and when it takes no loop (the kernel communicates,
threads are not whole warpgroups, ...) the mma.sync plan; on sm_80 and later GPUs other than sm_90
the mma.sync plan; elsewhere the portable path. `sm90`, `mma` and `portable` force one lowering
(where it cannot apply, the loops take the portable path and the notes say why), for tests and
for benchmarks that compare the lowerings on one GPU. The choice is `generate_cuda(...,
gemm_lowering=)`, else $TILESCALE_GEMM_LOWERING (read here only, when a kernel is compiled), else
`auto`.
"""

from __future__ import annotations

import os

from ..ir.nodes import KernelIR
from . import gemm_sm80, gemm_sm90
from .context import GemmPlan

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
            return hopper, [f"portable path: wgmma: {r}" for r in why]
        hopper_why = why
    else:
        hopper_why = []
    mma, why = gemm_sm80.plan_with_reasons(kernel, arch)
    if mma is None:
        return None, [*(f"portable path: wgmma: {r}" for r in hopper_why),
                      *(f"portable path: mma.sync: {r}" for r in why)]
    return mma, [
        *(f"mma.sync path, not wgmma: {r}" for r in hopper_why),
        *(f"portable path: mma.sync: {r}" for r in why),
        *(f"mma.sync path: {r}" for r in mma.notes),
    ]
