"""All-gather + GEMM, TileScale's allgather_gemm pattern: A is sharded by rows over the PEs, B by
columns; every PE gathers all of A into a symmetric buffer (putmem_signal_nbi_block to every PE,
one signal per row block) and multiplies it with its columns of B as the row blocks arrive
(signal_wait_until, then a T.Pipelined loop over K with T.gemm into a float32 fragment).

C = A @ B, each PE holding its columns, checked against a float64 product on the host, on random data.
Needs at least 2 devices. `python examples/allgather_gemm.py` runs it on simulated CPU devices; on
GPUs run it through the launcher (`python -m jax_tilescale.launch -n 2 examples/allgather_gemm.py`). The kernel
communicates, so its GEMM does not take the Hopper lowering (a producer warpgroup would miss
NVSHMEM's block-wide calls) but the mma.sync one, which keeps to the kernel's own threads and
__syncthreads (jax_tilescale/codegen/gemm_sm80.py): cp.async into a 3-stage ring, ldmatrix,
tensor-core mma.sync.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

import jax_tilescale as ts
from jax_tilescale import language as T

TOLERANCE = {"float32": 1e-5, "float16": 5e-3, "bfloat16": 2e-2}  # relative to max |C|


# --- config + kernel --------------------------------------------------------------------------
def allgather_gemm(m_per_pe: int, k: int, n_per_pe: int, npes: int, dtype: jnp.dtype, block_m: int = 64,
                   block_n: int = 64, block_k: int = 32) -> ts.TileKernel:
    """Inputs: A rows [m_per_pe, k], B columns [k, n_per_pe]; output C columns [npes * m_per_pe, n_per_pe].

    Grid: one block per row block of the gathered A (npes * m_per_pe // block_m). Block bx first
    sends row block bx % mb of this PE's A to PE (me + bx // mb) % npes (so each (peer, row block)
    pair is sent once), then waits for row block bx of the gathered A and computes C's rows bx.
    """
    mb = m_per_pe // block_m
    m = npes * m_per_pe

    @ts.kernel(out_shape=jax.ShapeDtypeStruct((m, n_per_pe), dtype), grid=(npes * mb,), threads=128)
    def ag_gemm(a, b, c):
        bx, me = T.program_id(0), T.get_pe()
        gathered = T.alloc_symmetric((m, k), dtype)
        arrived = T.alloc_signal(npes * mb)
        a_s = T.alloc_shared((block_m, block_k), dtype)
        b_s = T.alloc_shared((block_k, block_n), dtype)
        acc = T.alloc_fragment((block_m, block_n), jnp.float32)
        # all-gather: my row block bx % mb to PE (me + bx // mb) % npes, flagged by its global row block
        r = bx % mb
        T.putmem_signal_nbi_block(gathered[T.ds(me * m_per_pe + r * block_m, block_m), :],
                                  a[T.ds(r * block_m, block_m), :], sig=arrived[me * mb + r], value=1,
                                  op=T.SignalOp.SET, pe=(me + bx // mb) % npes)
        # GEMM on the row block as soon as it is here
        T.signal_wait_until(arrived[bx], T.Cmp.EQ, 1)
        rows = T.ds(bx * block_m, block_m)
        for nt in T.serial(n_per_pe // block_n):
            T.clear(acc)
            for ko in T.Pipelined(k // block_k, num_stages=3):
                T.copy(gathered[rows, T.ds(ko * block_k, block_k)], a_s)
                T.copy(b[T.ds(ko * block_k, block_k), T.ds(nt * block_n, block_n)], b_s)
                T.gemm(a_s, b_s, acc)
            T.copy(acc, c[rows, T.ds(nt * block_n, block_n)])  # fp32 -> dtype, round to nearest

    return ag_gemm


def ag_gemm_fn(mesh: jax.sharding.Mesh, m_per_pe: int, k: int, n_per_pe: int, dtype: jnp.dtype, **blocks):
    kern = allgather_gemm(m_per_pe, k, n_per_pe, mesh.size, dtype, **blocks)
    return jax.jit(jax.shard_map(kern, mesh=mesh, in_specs=(P("x", None), P(None, "x")), out_specs=P(None, "x")))


# --- check + entry point ----------------------------------------------------------------------
def check(mesh: jax.sharding.Mesh, m: int = 128, k: int = 128, n: int = 64, dtype: str = "bfloat16", seed: int = 0,
          **blocks: int) -> ts.testing.Verdict:
    """A [PEs * m, k] @ B [k, PEs * n] through the kernel vs a float64 product on the host (tolerance
    per dtype, relative to max |C|); m rows of A and n columns of B per PE."""
    rng = np.random.default_rng(seed)
    a = ts.testing.random_array(rng, (mesh.size * m, k), dtype)
    b = ts.testing.random_array(rng, (k, mesh.size * n), dtype)
    got = ag_gemm_fn(mesh, m, k, n, jnp.dtype(dtype), **blocks)(ts.testing.place(a, mesh, P("x", None)),
                                                                 ts.testing.place(b, mesh, P(None, "x")))
    want = a.astype(np.float64) @ b.astype(np.float64)
    return ts.testing.compare(got, want, "C close to the float64 product", atol_of_max=TOLERANCE[dtype])


if __name__ == "__main__":
    ts.testing.main(check, mesh=ts.platform.line(min_devices=2),
                    option_help={"m": "rows of A per PE", "n": "columns of B per PE"})
