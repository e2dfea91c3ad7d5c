"""GEMM + reduce-scatter (row-parallel linear layer), each partial tile sent as soon as it is done.

K is sharded over the PEs: PE p holds A's columns A_p [m, k_per_pe] and B's rows B_p [k_per_pe, n],
and its partial product A_p @ B_p [m, n]. The output is the sum over PEs, scattered by rows: PE q
gets C_q = sum_p (A_p @ B_p)[q * m_per_pe : (q + 1) * m_per_pe] (`jax.lax.psum_scatter` of the
partial products along rows).

One block per tile of the partial product, visited owner by owner: first the tiles PE me+1 owns,
then me+2's, ..., and the tiles this PE owns last. A tile another PE owns is multiplied, copied
from the registers into a float32 shared tile, and sent to its owner with
`putmem_signal_nbi_block` (slot j of the owner's `landed` output for the sender j+1 steps before
it; the signal counts arrivals). A tile this PE owns waits until every peer's partial tile has
arrived (its counter equals npes - 1), adds them to its accumulators in float32, in PE order, and
stores the sum. A block only waits for tiles its peers computed before their own tiles, i.e.
blocks dispatched earlier on every PE: no deadlock when blocks are dispatched in order.

On an H100/H200 the GEMM takes the Hopper lowering for kernels that communicate
(jax_tilescale/codegen/gemm_sm90_comm.py): the block put runs on every thread of the block after
the producer and consumer warpgroups meet. With one PE nothing is sent, but every tile still waits
on its (zero) arrival counter, so the kernel keeps its NVSHMEM wait and end-of-call barrier.

m, n and k may be anything (rows per PE: m / PEs). `python examples/gemm_reducescatter.py` runs it
on simulated CPU devices and checks each PE's rows against a float64 product on the host; on GPUs
`python -m jax_tilescale.launch -n 2 examples/gemm_reducescatter.py`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

import jax_tilescale as ts
from jax_tilescale import language as T

GEMM_EXAMPLE = ts.testing.sibling(__file__, "gemm")  # examples/gemm.py: the grouped tile order

TOLERANCE = {"float32": 1e-5, "float16": 5e-3, "bfloat16": 2e-2}  # relative to max |C|


# --- config + kernel --------------------------------------------------------------------------
def gemm_reducescatter(m: int, k_per_pe: int, n: int, npes: int, dtype: jnp.dtype, block_m: int = 128,
                       block_n: int | None = None, block_k: int = 64, num_stages: int = 4, threads: int = 256,
                       group_m: int = 8) -> ts.TileKernel:
    """Inputs: A columns [m, k_per_pe], B rows [k_per_pe, n]; outputs C rows [m / npes, n] and, with
    more than one PE, `landed` [(npes - 1) * tiles, block_m, block_n] float32: the peers' partial
    tiles of this PE's rows. `block_n` defaults to 256 with one PE (examples/gemm.py's tiles) and
    128 with more (the float32 tile a block sends must fit in shared memory beside the stages)."""
    if m % npes:
        raise ValueError(f"m ({m}) must be a multiple of the PE count ({npes})")
    block_n = block_n or (256 if npes == 1 else 128)
    m_per_pe = m // npes
    tiles_m, tiles_n = T.ceildiv(m_per_pe, block_m), T.ceildiv(n, block_n)
    per_owner = tiles_m * tiles_n
    group = GEMM_EXAMPLE.group_rows(tiles_m, group_m)
    c_shape = jax.ShapeDtypeStruct((m_per_pe, n), dtype)
    landed_shape = jax.ShapeDtypeStruct(((npes - 1) * per_owner, block_m, block_n), jnp.float32)
    outs = (c_shape, landed_shape) if npes > 1 else c_shape

    @ts.kernel(out_shape=outs, grid=(tiles_n, tiles_m * npes), threads=threads)
    def gemm_rs(a, b, c, *landed_out):
        me = T.get_pe()
        pid = T.program_id(1) * tiles_n + T.program_id(0)
        step = pid // per_owner  # the tile's owner is PE me + 1 + step: this PE for the last step
        owner = (me + 1 + step) % npes
        t = pid % per_owner  # the tile within the owner's rows, grouped so neighbours share B in L2
        tm, tn = GEMM_EXAMPLE.grouped_tile(t, tiles_m, tiles_n, group)
        arrived = T.alloc_signal(per_owner)  # peers' partial tiles of my tile t that landed here
        A_s = T.alloc_shared((block_m, block_k), dtype)
        B_s = T.alloc_shared((block_k, block_n), dtype)
        C_f = T.alloc_fragment((block_m, block_n), jnp.float32)
        T.clear(C_f)
        for ko in T.Pipelined(T.ceildiv(k_per_pe, block_k), num_stages=num_stages):
            # rows past the owner's end belong to the next owner (or past m: zeros); they are never stored
            T.copy(a[T.ds(owner * m_per_pe + tm * block_m, block_m), T.ds(ko * block_k, block_k)], A_s)
            T.copy(b[T.ds(ko * block_k, block_k), T.ds(tn * block_n, block_n)], B_s)
            T.gemm(A_s, B_s, C_f)
        if npes == 1:
            T.signal_wait_until(arrived[t], T.Cmp.EQ, 0)  # nothing arrives: the wait passes at once
            T.copy(C_f, c[T.ds(tm * block_m, block_m), T.ds(tn * block_n, block_n)])
        else:
            landed = landed_out[0]
            part_s = T.alloc_shared((block_m, block_n), jnp.float32)
            if step < npes - 1:
                T.copy(C_f, part_s)
            else:
                T.signal_wait_until(arrived[t], T.Cmp.EQ, npes - 1)
                for j in T.serial(npes - 1):  # the sender j + 1 steps before me, in PE order from me - 1
                    for i, jj in T.Parallel(block_m, block_n):
                        C_f[i, jj] = C_f[i, jj] + landed[j * per_owner + t, i, jj]
                T.copy(C_f, c[T.ds(tm * block_m, block_m), T.ds(tn * block_n, block_n)])
            if step < npes - 1:  # after the producer and consumers meet: every thread sends
                T.putmem_signal_nbi_block(landed[(npes - 2 - step) * per_owner + t, :, :], part_s,
                                          sig=arrived[t], value=1, op=T.SignalOp.ADD, pe=owner)

    return gemm_rs


def gemm_rs(a: jax.Array, b: jax.Array, npes: int, **config: int) -> jax.Array:
    """Inside `jax.shard_map` (A sharded by columns, B by rows over `npes` PEs): this PE's rows of
    psum_scatter(A @ B) along rows."""
    kern = gemm_reducescatter(a.shape[0], a.shape[1], b.shape[1], npes, a.dtype, **config)
    out = kern(a, b)
    return out[0] if npes > 1 else out


def gemm_rs_fn(mesh: jax.sharding.Mesh, **config: int):
    """psum_scatter(A @ B) by rows, for A sharded by columns and B by rows over `mesh`'s axis x."""
    return jax.jit(jax.shard_map(lambda a, b: gemm_rs(a, b, mesh.size, **config), mesh=mesh,
                                 in_specs=(P(None, "x"), P("x", None)), out_specs=P("x", None)))


# --- check + entry point ----------------------------------------------------------------------
def check(mesh: jax.sharding.Mesh, m: int = 256, k: int = 64, n: int = 128, dtype: str = "bfloat16", seed: int = 0,
          **config: int) -> ts.testing.Verdict:
    """A [m, PEs * k] @ B [PEs * k, n] through the kernel (rows scattered over the PEs) vs a float64
    product on the host (tolerance per dtype, relative to max |C|); k columns of A per PE."""
    rng = np.random.default_rng(seed)
    a = ts.testing.random_array(rng, (m, mesh.size * k), dtype)
    b = ts.testing.random_array(rng, (mesh.size * k, n), dtype)
    config = {"block_m": 64, "block_n": 64, "block_k": 64, "threads": 128, **config} if m < 128 * mesh.size \
        else config
    got = gemm_rs_fn(mesh, **config)(ts.testing.place(a, mesh, P(None, "x")), ts.testing.place(b, mesh, P("x", None)))
    want = a.astype(np.float64) @ b.astype(np.float64)
    return ts.testing.compare(got, want, "C close to the float64 product", atol_of_max=TOLERANCE[dtype])


if __name__ == "__main__":
    ts.testing.main(check, mesh=ts.platform.line(min_devices=1),
                    option_help={"m": "rows of A (and C)", "k": "columns of A per PE"})
