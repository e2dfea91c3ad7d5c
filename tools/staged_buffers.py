"""Which buffers of the communicating examples the FFI handler still stages, and why (issue 14's report).

Peers may only address symmetric (NVSHMEM heap) memory, and XLA's buffers are not, so the handler runs
a kernel on symmetric copies of the buffers peers touch (docs/calling_convention.md): an output that
peers write or read is copied out after the launch, an input that peers read is copied in before it.
This prints, for each example kernel traced for two PEs, every buffer with its flag (the `staged`
attribute the handler gets, codegen/staging.py) and the statements that make it remote, and the bytes
copied per call at the given size. A kernel that keeps its peer traffic in `T.alloc_symmetric` /
`T.alloc_signal` buffers stages nothing (all_to_all's inbox). Since ABI 4 a call-free kernel's staged
params are zero-copy ("XLA's buffer"): no copy where the buffer lies in the pool every peer mapped
(one machine; docs/calling_convention.md, "Zero-copy"), so the bytes column counts them as 0; with
`--calls` (as with TILESCALE_CALL_FREE=0, or on several machines) they are staged and copied: by the
handler around the launch, or (ABI 6) by the kernel itself, "by kernel" (a staged input copied in before
its entry barrier, codegen/stage_in.py; a staged output a window as each signal arrives, stage_out.py).

    python tools/staged_buffers.py [--calls]
"""

from __future__ import annotations

import os
import sys

import jax
import jax.numpy as jnp

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import all_to_all
import allgather
import allgather_gemm
import simple_shift

from jax_tilescale import abi
from jax_tilescale.codegen import generate_cuda
from jax_tilescale.ir.nodes import walk_stmts

NPES = 2
S = jax.ShapeDtypeStruct
F32, BF16 = jnp.float32, jnp.bfloat16


def _kernels():
    """(example, kernel, argument shapes) at the sizes the GPU checks use, for two PEs."""
    m, n = 4096, 1024
    yield "simple_shift.py", simple_shift.simple_shift(m, n, F32), (S((m, n), F32),)
    yield "allgather.py (push)", allgather.allgather(m, n, NPES, F32), (S((m, n), F32),)
    yield "allgather.py (pull)", allgather.allgather_pull(m, n, NPES, F32), (S((m, n), F32),)
    tokens, hidden = 1024, 1024
    yield ("all_to_all.py", all_to_all.all_to_all(tokens, hidden, NPES, BF16),
           (S((tokens, hidden), BF16), S((NPES + 1,), jnp.int32), S((NPES,), jnp.int32)))
    mp, k, np_ = 4096, 8192, 4096
    yield ("allgather_gemm.py", allgather_gemm.allgather_gemm(mp, k, np_, NPES, BF16),
           (S((mp, k), BF16), S((k, np_), BF16)))


def _why(kernel_ir, buf) -> str:
    """The statements (by name and line) that make `buf` remote."""
    seen = []
    for s in walk_stmts(kernel_ir.body):
        if not s.communicates:
            continue
        names = {getattr(getattr(s, f, None), "buffer", None) for f in ("dst", "src", "remote", "word")}
        if buf in names:
            seen.append(f"{s.op_name} at line {s.loc.lineno}")
    return ", ".join(dict.fromkeys(seen)) or "-"


def _staging(flag: int, nbytes: int) -> tuple[str, int, int]:
    """(what happens to a param with `staged` flag `flag`, bytes the handler copies, bytes the kernel copies)."""
    if flag & abi.STAGE_P2P:
        return "XLA's buffer", 0, 0  # zero-copy (inside the mapped pool)
    if flag & abi.STAGE_KERNEL_OUT:
        return "kernel copies out", 0, nbytes  # a window as each signal arrives (codegen/stage_out.py)
    if flag & abi.STAGE_KERNEL_IN:
        return "kernel copies in", 0, nbytes  # before its entry barrier (codegen/stage_in.py)
    out, into = bool(flag & abi.STAGE_COPY_OUT), bool(flag & abi.STAGE_COPY_IN)
    what = {(False, False): "no", (True, False): "copied out", (False, True): "copied in",
            (True, True): "in and out"}[(out, into)]
    return what, nbytes * (out + into), 0


def main() -> None:
    one_machine = "--calls" not in sys.argv[1:]
    print(f"{'example':22s} {'buffer':13s} {'kind':7s} {'staged':18s} {'by handler':>11s} {'by kernel':>10s}  why")
    for name, kern, args in _kernels():
        ir = kern.trace(*args, mesh_axes=("x",), num_pes=NPES)
        module = generate_cuda(ir, "sm_90", p2p_peers=one_machine)
        total = [0, 0]
        for buf, flag in zip(ir.params, module.staged):
            what, handler, kernel = _staging(flag, buf.nbytes)
            total = [total[0] + handler, total[1] + kernel]
            why = _why(ir, buf) if flag else "only this PE touches it"
            print(f"{name:22s} {buf.name:13s} {buf.kind.value:7s} {what:18s} {handler:11d} {kernel:10d}  {why}")
        print(f"{name:22s} {'total':13s} {'':7s} {'':18s} {total[0]:11d} {total[1]:10d}")


if __name__ == "__main__":
    main()
