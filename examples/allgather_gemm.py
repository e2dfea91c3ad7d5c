"""All-gather + GEMM, TileScale's allgather_gemm pattern: A is sharded by rows over the PEs, B by
columns; every PE gathers all of A into a symmetric buffer (putmem_signal_nbi_block to every PE,
one signal per row block) and multiplies it with its columns of B as the row blocks arrive
(signal_wait_until, then a T.Pipelined loop over K with T.gemm into a float32 fragment).

C = A @ B, each PE holding its columns, checked against a float64 product on the host, on random data.
`python examples/allgather_gemm.py` runs it on simulated CPU devices; on GPUs run it through the
launcher (`python -m jax_tilescale.launch -n 2 examples/allgather_gemm.py`). The kernel
communicates, so its GEMM does not take the Hopper lowering (a producer warpgroup would miss
NVSHMEM's block-wide calls) but the mma.sync one, which keeps to the kernel's own threads and
__syncthreads (jax_tilescale/codegen/gemm_sm80.py): cp.async into a 3-stage ring, ldmatrix,
tensor-core mma.sync.
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
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
    return jax.jit(jax.shard_map(kern, mesh=mesh, in_specs=(P("x", None), P(None, "x")), out_specs=P(None, "x"),
                                 check_vma=False))


# --- check + entry point ----------------------------------------------------------------------
def check(mesh: jax.sharding.Mesh, m_per_pe: int = 64, k: int = 128, n_per_pe: int = 64, dtype: str = "bfloat16",
          seed: int = 0, **blocks) -> bool:
    """A @ B through the kernel vs a float64 product on the host (tolerance per dtype, relative to max |C|)."""
    ka, kb = jax.random.split(jax.random.key(seed))
    a = jax.random.normal(ka, (mesh.size * m_per_pe, k), jnp.float32).astype(dtype)
    b = jax.random.normal(kb, (k, mesh.size * n_per_pe), jnp.float32).astype(dtype)
    got = ag_gemm_fn(mesh, m_per_pe, k, n_per_pe, jnp.dtype(dtype), **blocks)(
        jax.device_put(a, NamedSharding(mesh, P("x", None))), jax.device_put(b, NamedSharding(mesh, P(None, "x"))))
    # on the host, so that every process holds the same reference (GPU dots may differ per process)
    want = (np.asarray(a, np.float64) @ np.asarray(b, np.float64)).astype(np.float32)
    scale = float(np.max(np.abs(want)))
    want = jax.device_put(want, NamedSharding(mesh, P(None, "x")))
    return ts.testing.allclose(got.astype(jnp.float32), want, atol=TOLERANCE[dtype] * scale)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--m", type=int, default=128, help="rows of A per PE")
    ap.add_argument("--k", type=int, default=128)
    ap.add_argument("--n", type=int, default=64, help="columns of B per PE")
    ap.add_argument("--dtype", default="bfloat16")
    a = ap.parse_args()
    platform = ts.platform.setup()
    mesh = jax.make_mesh((platform.num_devices,), ("x",))
    ok = check(mesh, a.m, a.k, a.n, a.dtype)
    ts.testing.report("allgather_gemm", platform, {
        f"{mesh.size} PEs, A {a.m}x{a.k} per PE, B {a.k}x{a.n} per PE, {a.dtype}, random data, "
        f"close to the float64 product": ok,
    })


if __name__ == "__main__":
    main()
