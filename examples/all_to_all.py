"""MoE-style all-to-all with variable splits, as in TileScale's all_to_all example: PE p holds
`tokens` rows sorted by destination PE, `splits[q]` of them for PE q, and `splits_cumsum` (the
start of each destination's segment). Block bx puts the segment for PE (p + bx) % npes, a
run-time number of rows read from `splits_cumsum` (T.load), with a signal; each PE waits until
all npes segments meant for it have arrived, then copies its receive buffer out. The received
segments are packed in source-PE order; rows past them are zero.

Where PE p's segment lands on PE q (`recv_offsets[q]`: the rows that PEs before p send to q) is
computed in JAX from the all-gathered splits, as a MoE layer's dispatch step does (that
`jax.lax.all_gather` is an XLA collective, which NCCL refuses for two PEs sharing one GPU; there,
`check(..., offsets="host")` computes them in numpy and passes them in, the kernels unchanged).
Checked against jax.lax.all_to_all on the segments padded to `tokens` rows, then packed, on random
tokens and random splits. `all_to_all_equal` is the equal-split case (`jax.lax.all_to_all` itself,
no splits, no staging scratch of the kernel's own), checked against it too. Needs at least 2 devices. On GPUs:
`python -m jax_tilescale.launch -n 2 examples/all_to_all.py`; with no GPU:
`python examples/all_to_all.py` (interpreter).
"""

from __future__ import annotations

import math
from typing import Literal

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

import jax_tilescale as ts
from jax_tilescale import language as T


# --- config + kernel --------------------------------------------------------------------------
def all_to_all(tokens: int, hidden: int, npes: int, dtype: jnp.dtype) -> ts.TileKernel:
    """send [tokens, hidden], splits_cumsum [npes + 1], recv_offsets [npes] -> recv [npes * tokens, hidden]."""
    row_bytes = hidden * jnp.dtype(dtype).itemsize
    capacity = npes * tokens  # a PE may receive every token of every PE

    @ts.kernel(out_shape=jax.ShapeDtypeStruct((capacity, hidden), dtype), grid=(npes,), threads=128)
    def moe_all_to_all(send, splits_cumsum, recv_offsets, recv):
        me, npes_ = T.get_pe(), T.get_pe_num()
        bx = T.program_id(0)
        peer = (me + bx) % npes_
        arrived = T.alloc_signal(1)
        inbox = T.alloc_symmetric((capacity, hidden), dtype)  # zero at launch: unsent rows stay zero
        m_start, m_end = splits_cumsum[peer], splits_cumsum[peer + 1]
        T.putmem_signal_nbi_block(inbox[recv_offsets[peer], :], send[m_start, :], (m_end - m_start) * row_bytes,
                                  arrived[0], 1, T.SignalOp.ADD, peer)
        T.signal_wait_until(arrived[0], T.Cmp.EQ, npes_)  # one segment from every PE, itself included
        rows = T.ds(bx * tokens, tokens)
        T.copy(inbox[rows, :], recv[rows, :])

    return moe_all_to_all


def all_to_all_equal(rows_per_peer: int, hidden: int, npes: int, dtype: jnp.dtype, block_m: int = 64) -> ts.TileKernel:
    """Equal splits, `jax.lax.all_to_all(x, split_axis=0, concat_axis=0, tiled=True)`: send [npes *
    rows_per_peer, hidden] (segment q for PE q) -> recv [npes * rows_per_peer, hidden] (segment p
    from PE p). Block (bx, by) puts rows bx of the segment for PE (me + by) % npes straight into
    that PE's output (as allgather.py's push: no signals, the end of the kernel completes them)."""

    @ts.kernel(out_shape=jax.ShapeDtypeStruct((npes * rows_per_peer, hidden), dtype),
               grid=(rows_per_peer // block_m, npes), threads=128)
    def equal_all_to_all(send, recv):
        bx, by = T.program_id(0), T.program_id(1)
        me = T.get_pe()
        peer = (me + by) % T.get_pe_num()
        row = bx * block_m
        T.putmem_nbi_block(recv[T.ds(me * rows_per_peer + row, block_m), :],
                           send[T.ds(peer * rows_per_peer + row, block_m), :], pe=peer)

    return equal_all_to_all


def equal_fn(mesh: jax.sharding.Mesh, rows_per_peer: int, hidden: int, dtype: jnp.dtype, block_m: int = 64):
    """The jitted equal-split all-to-all over mesh axis "x" (rows sharded by PE)."""
    kern = all_to_all_equal(rows_per_peer, hidden, mesh.size, jnp.dtype(dtype), block_m)
    return jax.jit(jax.shard_map(kern, mesh=mesh, in_specs=P("x"), out_specs=P("x")))


def equal_reference(shard: jax.Array) -> jax.Array:
    return jax.lax.all_to_all(shard, "x", split_axis=0, concat_axis=0, tiled=True)


def dispatch_fn(mesh: jax.sharding.Mesh, tokens: int, hidden: int, dtype: jnp.dtype,
                offsets: Literal["device", "host"] = "device"):
    """The jitted all-to-all over mesh axis "x": (send, splits) sharded by PE -> packed receive buffers.
    `offsets="host"`: the function takes (send, splits, recv_offsets), the offsets from
    `recv_offsets_on_host`, and runs no XLA collective."""
    if offsets not in ("device", "host"):
        raise ValueError(f"offsets must be 'device' (jax.lax.all_gather) or 'host' (got {offsets!r})")
    npes = mesh.size
    kern = all_to_all(tokens, hidden, npes, dtype)

    def cumsum_of(splits):
        return jnp.concatenate([jnp.zeros(1, jnp.int32), jnp.cumsum(splits).astype(jnp.int32)])

    if offsets == "host":
        return jax.jit(jax.shard_map(lambda send, splits, recv_offsets: kern(send, cumsum_of(splits), recv_offsets),
                                     mesh=mesh, in_specs=(P("x"),) * 3, out_specs=P("x")))

    def body(send, splits):
        all_splits = jax.lax.all_gather(splits, "x")  # [npes (source), npes (destination)]
        me = jax.lax.axis_index("x")
        before_me = jnp.arange(npes)[:, None] < me
        recv_offsets = jnp.sum(jnp.where(before_me, all_splits, 0), axis=0).astype(jnp.int32)
        return kern(send, cumsum_of(splits), recv_offsets)

    return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(P("x"), P("x")), out_specs=P("x")))


def recv_offsets_on_host(splits: np.ndarray) -> np.ndarray:
    """[npes, npes] splits (row p: PE p's) -> [npes, npes] int32, row p: where PE p's segment for each
    PE q lands on q (the rows that PEs before p send to q), what `dispatch_fn`'s all_gather computes."""
    splits = np.asarray(splits)
    return (np.cumsum(splits, axis=0) - splits).astype(np.int32)


def lax_body(npes: int, tokens: int):
    """jax.lax.all_to_all on the segments padded to `tokens` rows, then packed in source order."""

    def body(send, splits):
        cumsum = jnp.concatenate([jnp.zeros(1, jnp.int32), jnp.cumsum(splits).astype(jnp.int32)])
        rows = jnp.arange(tokens)
        # padded[q, r] = row cumsum[q] + r of send when r < splits[q], else zero
        take = cumsum[:-1, None] + rows[None, :]
        valid = rows[None, :] < splits[:, None]
        padded = jnp.where(valid[..., None], send[jnp.clip(take, 0, tokens - 1)], 0)
        got = jax.lax.all_to_all(padded, "x", split_axis=0, concat_axis=0, tiled=True)  # [npes (source), tokens, h]
        counts = jax.lax.all_to_all(splits.reshape(npes, 1), "x", 0, 0, tiled=True).reshape(npes)
        # Pack: row r of source s goes to offset(s) + r; the rest of the capacity stays zero.
        offsets = jnp.concatenate([jnp.zeros(1, jnp.int32), jnp.cumsum(counts).astype(jnp.int32)])[:-1]
        dest = jnp.where(rows[None, :] < counts[:, None], offsets[:, None] + rows[None, :], npes * tokens)
        out = jnp.zeros((npes * tokens + 1, send.shape[1]), send.dtype)
        return out.at[dest.reshape(-1)].set(got.reshape(npes * tokens, -1))[:-1]

    return body


# --- check + entry point ----------------------------------------------------------------------
def random_splits(rng: np.random.Generator, npes: int, tokens: int) -> np.ndarray:
    """[npes, npes] int32: row p is how many of PE p's tokens go to each PE (a random routing)."""
    dest = rng.integers(0, npes, size=(npes, tokens))
    dest[0, :] = npes - 1  # one PE sends everything to one peer: empty segments, a full one
    return np.stack([np.bincount(d, minlength=npes) for d in dest]).astype(np.int32)


def check(mesh: jax.sharding.Mesh, tokens: int = 64, hidden: int = 64, dtype: str = "bfloat16",
          seed: int = 0, offsets: Literal["device", "host"] = "device") -> ts.testing.Verdict:
    """The kernel on random tokens and random splits vs the jax.lax.all_to_all reference (on the host).
    `offsets="host"`: the receive offsets computed in numpy (no XLA collective on the devices)."""
    rng = np.random.default_rng(seed)
    splits_2d = random_splits(rng, mesh.size, tokens)
    splits = splits_2d.reshape(-1)
    x = ts.testing.random_array(rng, (mesh.size * tokens, hidden), dtype)
    inputs = [x, splits] + ([recv_offsets_on_host(splits_2d).reshape(-1)] if offsets == "host" else [])
    got = dispatch_fn(mesh, tokens, hidden, jnp.dtype(dtype), offsets)(
        *(ts.testing.place(a, mesh, P("x")) for a in inputs))
    want = ts.testing.lax_on_host(lax_body(mesh.size, tokens), mesh, (P("x"), P("x")), P("x"))(x, splits)
    ragged = ts.testing.compare(got, want, "random splits: every element equal to the jax.lax.all_to_all reference")
    rows_per_peer = max(1, tokens // mesh.size)
    y = ts.testing.random_array(rng, (mesh.size * mesh.size * rows_per_peer, hidden), dtype)
    (want_equal,) = ts.testing.lax_on_host(equal_reference, mesh, P("x"), P("x"))(y)
    got_equal = equal_fn(mesh, rows_per_peer, hidden, jnp.dtype(dtype), block_m=math.gcd(rows_per_peer, 8))(
        ts.testing.place(y, mesh, P("x")))
    return ragged & ts.testing.compare(got_equal, want_equal, "equal splits: every element equal to jax.lax.all_to_all")


if __name__ == "__main__":
    ts.testing.main(check, mesh=ts.platform.line(min_devices=2), option_help={
        "tokens": "tokens (rows) per PE",
        "offsets": "where the receive offsets are computed: 'device' (jax.lax.all_gather, as a MoE layer does) or "
                   "'host' (numpy; for PEs sharing one GPU, where NCCL refuses the all_gather)"})
