"""Prints the CUDA that a `T.copy` from a distributed view lowers to, for one region on this PE
and one on a peer (issue 17's closing note: the generated source shows the transfer chosen).

Two PEs, `x` sharded by rows (`T.FullRow`, 16 rows per PE); the local kernel copies this PE's
rows of the view into a shared tile, the remote kernel the next PE's rows. For each it prints the
IR and the kernel function of the generated source (from its `__global__` line; the device
header before it is the same for every kernel).

    python tools/view_cuda.py [--arch sm_90]
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp

import jax_tilescale as ts
from jax_tilescale import language as T
from jax_tilescale.codegen import generate_cuda

ROWS, COLS, NPES = 16, 64, 2


def view_copy_kernel(remote: bool) -> ts.TileKernel:
    @ts.kernel(out_shape=jax.ShapeDtypeStruct((ROWS, COLS), jnp.float32), grid=(1,),
               name="view_copy_remote" if remote else "view_copy_local")
    def kern(x, out):
        me, npes = T.get_pe(), T.get_pe_num()
        owner = (me + 1) % npes if remote else me
        tile = T.alloc((ROWS, COLS), jnp.float32, level="l1")
        T.copy(T.view(x, T.FullRow)[T.ds(owner * ROWS, ROWS), :], tile)
        T.copy(tile, out)

    return kern


def lowered(remote: bool, arch: str = "sm_90", one_machine: bool = True) -> tuple[str, str]:
    """(IR text, the generated kernel function) of the local or remote view copy; `one_machine=False`:
    as generated for a job over several machines (NVSHMEM's calls, a getmem where the peer has no
    load/store mapping), else call-free (loads through the peer's mapping only)."""
    kern = view_copy_kernel(remote)
    sds = jax.ShapeDtypeStruct((ROWS, COLS), jnp.float32)
    ir = kern.trace(sds, mesh_axes=("x",), num_pes=NPES)
    source = generate_cuda(ir, arch, p2p_peers=one_machine).source
    return kern.ir_text(sds, mesh_axes=("x",), num_pes=NPES), source[source.index('extern "C" __global__'):]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--machines", action="store_true", help="as generated for a job over several machines")
    args = ap.parse_args()
    for remote in (False, True):
        ir, cuda = lowered(remote, args.arch, one_machine=not args.machines)
        title = "a region on a peer" if remote else "a region on this PE"
        print(f"===== {title}: IR =====\n{ir}\n===== {title}: CUDA =====\n{cuda}")


if __name__ == "__main__":
    main()
