"""Which kernel params the handler stages in symmetric memory, and which of those it may hand over as
XLA's own buffers instead (zero-copy): the `staged` attribute (docs/calling_convention.md).

Every global buffer that peers touch must be reachable by them during the launch. NVSHMEM's calls reach
only symmetric memory, so such a buffer is staged: the kernel runs on a symmetric copy in the workspace,
copied in before the launch and out after it. A call-free kernel (codegen/call_free.py) reaches peers
only by loads and stores through its mapping of their memory, which can be XLA's own allocation when
every process of the machine has mapped every other's (runtime/peer_memory.py): its staged params get
`TS_STAGE_P2P`, and the handler hands over XLA's buffer wherever that holds, with no copy.
"""

from __future__ import annotations

from .. import abi
from ..ir.kernel_ir import KernelIR
from ..ir.nodes import Buffer, BufferKind


def staged_flags(k: KernelIR) -> list[int]:
    """The copy flags, one per param (`TS_STAGE_COPY_*`).

    Outputs that peers write or read are staged and copied out afterwards (abi.STAGE_COPY_OUT): XLA
    must get what the kernel and its peers wrote, and an output has no contents to copy in. Inputs that
    peers read (gets, loads through nvshmem_ptr, remote waits) are staged and copied in before
    (abi.STAGE_COPY_IN). An aliased pair (`KernelIR.aliases`) is one memory: the kernel addresses the
    input through its output's pointer, so the input is never staged, and an output whose memory
    peers touch (through either ref) is staged both ways (`KernelIR.copied_in`): in, since the
    elements the kernel leaves alone hold the input's values, and out, what XLA returns.
    """
    touched, copied_in = k.peer_memory(), k.copied_in()
    flags = []
    for b in k.params:
        flag = 0
        if b.kind is BufferKind.OUTPUT and b in touched:
            flag |= abi.STAGE_COPY_OUT
        if b in copied_in:
            flag |= abi.STAGE_COPY_IN
        flags.append(flag)
    return flags


def handler_flags(k: KernelIR, call_free: bool, kernel_in: tuple[int, ...] = (),
                  kernel_out: tuple[int, ...] = ()) -> tuple[int, ...]:
    """The `staged` attribute: the copy flags, with TS_STAGE_P2P on every staged param of a call-free
    kernel (it reaches peers only by loads and stores, so the handler may hand over XLA's buffer), and
    TS_STAGE_KERNEL_IN / TS_STAGE_KERNEL_OUT on the params (indices) that the kernel copies in or out
    itself (codegen/stage_in.py, stage_out.py). The handler gives those params the home slots in param
    order, which is the order the code generator numbers them in (inputs first)."""
    p2p = abi.STAGE_P2P if call_free else 0
    flags = [flag | p2p if flag else 0 for flag in staged_flags(k)]
    for i in kernel_in:
        assert flags[i] == abi.STAGE_COPY_IN and not call_free, (i, flags[i])
        flags[i] |= abi.STAGE_KERNEL_IN
    for i in kernel_out:
        assert flags[i] & abi.STAGE_COPY_OUT and not call_free, (i, flags[i])
        flags[i] |= abi.STAGE_KERNEL_OUT
    homes = [i for i, f in enumerate(flags) if f & (abi.STAGE_KERNEL_IN | abi.STAGE_KERNEL_OUT)]
    assert homes == sorted([*kernel_in, *kernel_out]) and len(homes) <= abi.MAX_HOMES, homes
    return tuple(flags)


def zero_copy_params(k: KernelIR, flags: tuple[int, ...]) -> dict[Buffer, int]:
    """The params `flags` (handler_flags) marks TS_STAGE_P2P, each with its param index. The generated
    code addresses a peer's copy of such a buffer through what the peer publishes at the start of each
    launch (TS_CTL_PUB)."""
    return {b: i for i, (b, flag) in enumerate(zip(k.params, flags)) if flag & abi.STAGE_P2P}
