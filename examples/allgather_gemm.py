"""All-gather + GEMM (column-parallel linear layer), with the communication under the tensor cores.

A is sharded by rows over the PEs, B by columns: PE p holds A_p [m_per_pe, k] and B's columns
B_p [k, n_per_pe], and computes C's columns C_p = all_gather(A) @ B_p [npes * m_per_pe, n_per_pe].

One block per tile of C_p, visited in the order the rows of A become available: first the tiles of
the local shard (no wait), then those of PE me-1, me-2, ... (the order the shards arrive in, since
every PE sends to me+1 first). The first `tiles_m` blocks (local tiles, which never wait, and are
dispatched first) each send one row block of the local shard to every peer with
`putmem_signal_nbi_block` (the signal says the row block landed); a tile of a peer's shard waits
for its row block's signal, then runs the same GEMM as `examples/gemm.py` reading A from where the
row block landed (the `landed` output: the peers' shards in arrival order). Blocks only ever wait
for blocks dispatched before them (on every PE), so the kernel cannot deadlock when the GPU
dispatches blocks in order, as it does.

On an H100/H200 the GEMM takes the Hopper lowering for kernels that communicate
(jax_tilescale/codegen/gemm_sm90_comm.py): the sends and waits run on every thread of the block
before the TMA producer and wgmma consumer warpgroups split, the producer reads the local or the
landed tile with TMA (it mirrors the `if` that picks it), the tile is stored with TMA. With one
PE nothing is sent, but each tile still waits on its row block's (zero) signal: the kernel keeps
its NVSHMEM waits and end-of-call barrier, and shows what they cost next to `examples/gemm.py`.

Rows per PE must be a multiple of block_m (a row block never straddles two shards); n and k may
be anything. `python examples/allgather_gemm.py` runs it on simulated CPU devices and checks C
against a float64 product on the host; on GPUs run it through the launcher
(`python -m jax_tilescale.launch -n 2 examples/allgather_gemm.py`).
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
# examples/gemm.py's default tiles (wgmma 128 x 256 per block, two consumer warpgroups)
FAST = dict(block_m=128, block_n=256, block_k=64, num_stages=4, threads=256, group_m=8)


# --- config + kernel --------------------------------------------------------------------------
def allgather_gemm(m_per_pe: int, k: int, n_per_pe: int, npes: int, dtype: jnp.dtype, block_m: int = 128,
                   block_n: int = 256, block_k: int = 64, num_stages: int = 4, threads: int = 256,
                   group_m: int = 8) -> ts.TileKernel:
    """Inputs: A rows [m_per_pe, k], B columns [k, n_per_pe]; outputs C columns [npes * m_per_pe,
    n_per_pe] and, with more than one PE, `landed` [(npes - 1) * m_per_pe, k]: the peers' rows of
    A in arrival order (slot j holds PE me-1-j's shard)."""
    if m_per_pe % block_m:
        raise ValueError(f"rows per PE ({m_per_pe}) must be a multiple of block_m ({block_m}): a row block of the "
                         "gathered A must come from one PE")
    tiles_m, tiles_n = m_per_pe // block_m, T.ceildiv(n_per_pe, block_n)
    per_shard = tiles_m * tiles_n
    group = GEMM_EXAMPLE.group_rows(tiles_m, group_m)
    c_shape = jax.ShapeDtypeStruct((npes * m_per_pe, n_per_pe), dtype)
    outs = (c_shape, jax.ShapeDtypeStruct(((npes - 1) * m_per_pe, k), dtype)) if npes > 1 else c_shape

    @ts.kernel(out_shape=outs, grid=(tiles_n, tiles_m * npes), threads=threads)
    def ag_gemm(a, b, c, *landed_out):
        me = T.get_pe()
        pid = T.program_id(1) * tiles_n + T.program_id(0)
        step = pid // per_shard  # 0: the local shard; j > 0: PE me - j's, the j-th to arrive
        src = (me + npes - step) % npes
        t = pid % per_shard  # the tile within the shard, grouped so neighbours share B in L2
        tm, tn = GEMM_EXAMPLE.grouped_tile(t, tiles_m, tiles_n, group)
        arrived = T.alloc_signal(npes * tiles_m)  # [slot j + 1, row block]: 1 once it landed here
        A_s = T.alloc_shared((block_m, block_k), dtype)
        B_s = T.alloc_shared((block_k, block_n), dtype)
        C_f = T.alloc_fragment((block_m, block_n), jnp.float32)
        if npes > 1:
            landed = landed_out[0]
            # the first tiles_m blocks send row block pid of the local shard to every peer, nearest first
            if pid < tiles_m:
                for j in T.serial(npes - 1):
                    T.putmem_signal_nbi_block(landed[T.ds(j * m_per_pe + pid * block_m, block_m), :],
                                              a[T.ds(pid * block_m, block_m), :],
                                              sig=arrived[(j + 1) * tiles_m + pid], value=1, op=T.SignalOp.SET,
                                              pe=(me + 1 + j) % npes)
        # the tile's row block is here: at once for the local shard (its word stays 0)
        T.signal_wait_until(arrived[step * tiles_m + tm], T.Cmp.EQ, T.min(step, 1))
        T.clear(C_f)
        if npes == 1 or step == 0:
            for ko in T.Pipelined(T.ceildiv(k, block_k), num_stages=num_stages):
                T.copy(a[T.ds(tm * block_m, block_m), T.ds(ko * block_k, block_k)], A_s)
                T.copy(b[T.ds(ko * block_k, block_k), T.ds(tn * block_n, block_n)], B_s)
                T.gemm(A_s, B_s, C_f)
        else:
            for ko in T.Pipelined(T.ceildiv(k, block_k), num_stages=num_stages):
                T.copy(landed[T.ds((step - 1) * m_per_pe + tm * block_m, block_m), T.ds(ko * block_k, block_k)], A_s)
                T.copy(b[T.ds(ko * block_k, block_k), T.ds(tn * block_n, block_n)], B_s)
                T.gemm(A_s, B_s, C_f)
        T.copy(C_f, c[T.ds(src * m_per_pe + tm * block_m, block_m), T.ds(tn * block_n, block_n)])

    return ag_gemm


def ag_gemm(a: jax.Array, b: jax.Array, npes: int, **config: int) -> jax.Array:
    """Inside `jax.shard_map` (A sharded by rows, B by columns over `npes` PEs): this PE's columns
    of all_gather(A) @ B."""
    kern = allgather_gemm(a.shape[0], a.shape[1], b.shape[1], npes, a.dtype, **config)
    out = kern(a, b)
    return out[0] if npes > 1 else out


def ag_gemm_fn(mesh: jax.sharding.Mesh, **config: int):
    """all_gather(A) @ B for A sharded by rows and B by columns over `mesh`'s axis x."""
    return jax.jit(jax.shard_map(lambda a, b: ag_gemm(a, b, mesh.size, **config), mesh=mesh,
                                 in_specs=(P("x", None), P(None, "x")), out_specs=P(None, "x")))


# --- check + entry point ----------------------------------------------------------------------
def check(mesh: jax.sharding.Mesh, m: int = 128, k: int = 128, n: int = 64, dtype: str = "bfloat16", seed: int = 0,
          **config: int) -> ts.testing.Verdict:
    """A [PEs * m, k] @ B [k, PEs * n] through the kernel vs a float64 product on the host (tolerance
    per dtype, relative to max |C|); m rows of A and n columns of B per PE."""
    rng = np.random.default_rng(seed)
    a = ts.testing.random_array(rng, (mesh.size * m, k), dtype)
    b = ts.testing.random_array(rng, (k, mesh.size * n), dtype)
    config = {"block_m": 64, "block_n": 64, "block_k": 64, "threads": 128, **config} if m < 128 else config
    got = ag_gemm_fn(mesh, **config)(ts.testing.place(a, mesh, P("x", None)), ts.testing.place(b, mesh, P(None, "x")))
    want = a.astype(np.float64) @ b.astype(np.float64)
    return ts.testing.compare(got, want, "C close to the float64 product", atol_of_max=TOLERANCE[dtype])


if __name__ == "__main__":
    ts.testing.main(check, mesh=ts.platform.line(min_devices=1),
                    option_help={"m": "rows of A per PE", "n": "columns of B per PE"})
