"""Which kernels are generated *call-free* (`TS_CALL_FREE` in tilescale_device.cuh), and why not.

A kernel that communicates is compiled relocatable (`-rdc`) to reach NVSHMEM's device state, and
there ptxas serialises every wgmma of a kernel that still contains a call instruction, even one
never taken (benchmarks/NOTES.md, issue 15: the AllGather-GEMM ran at 0.86x and the GEMM-
ReduceScatter at 0.84x of the plain GEMM, whose wgmma pipeline runs freely). And a kernel without
calls reaches its peers only through its mapping of their memory, which can then be XLA's own buffers
(zero-copy, codegen/staging.py) instead of staged copies in symmetric memory. So every kernel that
communicates, on one machine, is generated without calls when each of its statements has a call-free
form ($TILESCALE_CALL_FREE=0 keeps NVSHMEM's calls everywhere, for comparison):

- puts and gets: copy loops of plain loads and stores through the peer's mapping (`nvshmem_ptr`,
  inlined); a put fences nothing itself: what makes its data count for a peer orders its stores
  (a blocking block put ends with the block's barrier);
- signals (fused into a put or on their own): one release atomic at system scope on the peer's
  word, by one thread after the block's threads meet (cumulative over their stores);
- quiet and fence: a system-scope fence (P2P stores need nothing more);
- barriers, the entry and end-of-call barriers: the header's helpers, inlined, their signals as
  above;
- failed checks: the call site's host-mapped record instead of printf (the watcher reports it).

The price: every peer must be load/store reachable (NVLink, or the same GPU), so the lowering asks
for it only when the job runs on one machine; a peer that is still not reachable stops the kernel
with a reported error naming the statement. Collectives that move data
(broadcast, fcollect), puts and gets of a run-time size or of one thread, and kernels that read
the node index keep NVSHMEM's calls (and serialised wgmma); the generated header says which
statement kept them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..ir.kernel_ir import KernelIR
from ..ir.nodes import (
    BarrierAll,
    Fence,
    Get,
    PeerCopy,
    Put,
    Quiet,
    RemoteSignal,
    Scope,
    SignalWait,
    Stmt,
    TeamBarrier,
    WaitUntil,
    walk_stmts,
)

# Statements whose call-free form needs nothing more than their type.
_ALWAYS = (RemoteSignal, Quiet, Fence, SignalWait, WaitUntil, BarrierAll, TeamBarrier)
_COPY_SCOPES = (Scope.BLOCK, Scope.WARP)  # copy loops over the block's or warp 0's threads


@dataclass(frozen=True)
class CallFree:
    """The decision for one kernel: `on`, or why not (`reason`, "" where the question does not
    arise: a kernel without communication has no NVSHMEM calls)."""

    on: bool
    reason: str = ""


def _blocker(s: Stmt) -> str | None:
    """Why `s` keeps an NVSHMEM call, or None."""
    if isinstance(s, _ALWAYS):
        return None
    if isinstance(s, (Put, Get)):
        if s.size is not None:
            return f"T.{s.op_name} with a run-time size"
        if s.scope not in _COPY_SCOPES:
            return f"T.{s.op_name} of one thread"
        return None
    if isinstance(s, PeerCopy):
        return None if s.scope in _COPY_SCOPES else f"T.{s.op_name} of one thread"
    return f"T.{getattr(s, 'op_name', type(s).__name__)} (no call-free form)"


ENV_VAR = "TILESCALE_CALL_FREE"


def call_free(kernel: KernelIR, p2p_peers: bool = True) -> CallFree:
    """Whether `kernel` is generated call-free. `p2p_peers`: every PE the kernel may talk to is load/store
    reachable (the launch is on one node); otherwise the kernel keeps NVSHMEM's calls, which reach other
    nodes too."""
    if not kernel.uses_nvshmem():
        return CallFree(False)
    if os.environ.get(ENV_VAR, "1") == "0":
        return CallFree(False, f"${ENV_VAR}=0")
    if not p2p_peers:
        return CallFree(False, "the launch spans several nodes, where peers need NVSHMEM's network path")
    if kernel.reads_node():
        return CallFree(False, "it reads the node index (T.Scale('node'), an NVSHMEM query)")
    for s in walk_stmts(kernel.body):
        if s.communicates:
            why = _blocker(s)
            if why is not None:
                return CallFree(False, f"{why} at {s.loc}")
    return CallFree(True)


def header_lines(decision: CallFree) -> list[str]:
    """The generated source's lines for the decision: the define, or a comment saying what kept the
    calls (and with them serialised wgmma)."""
    if decision.on:
        return ["// call-free: communicates without NVSHMEM calls (codegen/call_free.py): wgmma at full rate, "
                "zero-copy params", "#define TS_CALL_FREE 1"]
    if decision.reason:
        return [f"// not call-free (any wgmma serialised by ptxas, every peer-touched param staged): {decision.reason} "
                "(codegen/call_free.py)"]
    return []
