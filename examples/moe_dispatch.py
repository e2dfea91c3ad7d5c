"""MoE token dispatch that exchanges the token counts on the device, as DeepEP's and
Triton-distributed's dispatch kernels do: nothing about the routing crosses the host or an XLA
collective.

Each PE holds `tokens` rows sorted by expert and `counts[e]`, how many of them go to expert e; the
`npes * experts_per_pe` experts are spread over the PEs, PE q owning experts q * experts_per_pe ...
The kernel runs in two steps:

1. counts: block bx puts this PE's whole count vector into row `me` of PE (me + bx) % npes's
   symmetric `all_counts` with a signal; every PE waits for all npes rows;
2. tokens: each block T.loads the counts it needs from `all_counts` (after that wait, which is what
   makes them valid) and computes, for each expert of its destination PE, where its rows start in
   this PE's tokens and where they land in the destination's receive buffer, then puts them with
   a run-time byte count (zero rows for an empty expert) and a signal; every PE waits for all
   `npes * experts_per_pe` segments and copies its receive buffer out.

The receive buffer is grouped by local expert, then by source PE (DeepEP's layout for the expert
GEMMs that follow): rows of expert j from PE 0, from PE 1, ..., then expert j + 1; rows past the
last are zero. The second output is the count matrix the receiver saw: [source PE, local expert].
Checked against a numpy reference on random tokens and skewed random routings (empty experts, one
PE sending everything to one expert). Needs at least 2 devices. On GPUs:
`python -m jax_tilescale.launch -n 2 examples/moe_dispatch.py`; with no GPU:
`python examples/moe_dispatch.py` (interpreter).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

import jax_tilescale as ts
from jax_tilescale import language as T

COUNT_DTYPE = jnp.int32


# --- config + kernel --------------------------------------------------------------------------
def moe_dispatch(tokens: int, hidden: int, npes: int, experts_per_pe: int, dtype: jnp.dtype) -> ts.TileKernel:
    """x [tokens, hidden] sorted by expert, counts [npes * experts_per_pe] -> recv [npes * tokens,
    hidden] (grouped by local expert, then source PE), recv_counts [npes, experts_per_pe]."""
    experts = npes * experts_per_pe
    row_bytes = hidden * jnp.dtype(dtype).itemsize
    capacity = npes * tokens  # a PE may receive every token of every PE

    @ts.kernel(out_shape=(jax.ShapeDtypeStruct((capacity, hidden), dtype),
                          jax.ShapeDtypeStruct((npes, experts_per_pe), COUNT_DTYPE)),
               grid=(npes,), threads=128)
    def dispatch(x, counts, recv, recv_counts):
        me, npes_ = T.get_pe(), T.get_pe_num()
        bx = T.program_id(0)
        dst = (me + bx) % npes_
        all_counts = T.alloc_symmetric((npes, experts), COUNT_DTYPE)  # row p: PE p's counts
        inbox = T.alloc_symmetric((capacity, hidden), dtype)  # zero at launch: rows nobody sends stay zero
        arrived = T.alloc_signal(2)  # [0]: count rows, [1]: token segments

        # 1. Every PE's counts to every PE (block bx serves one destination).
        T.putmem_signal_nbi(all_counts[me, :], counts[:], sig=arrived[0], value=1, op=T.SignalOp.ADD, pe=dst)
        T.signal_wait_until(arrived[0], T.Cmp.EQ, npes_)  # all rows are here: they may be loaded now

        def count(pe, expert):
            return T.load(all_counts[pe, expert])  # delivered by the wait above

        # 2. This PE's rows for each expert of PE dst, to where dst's layout puts them.
        for j in range(experts_per_pe):
            expert = dst * experts_per_pe + j
            # rows of this PE before the expert's (the tokens are sorted by expert)
            src_row = sum(T.if_then_else(e < expert, count(me, e), 0) for e in range(experts))
            # on dst: every PE's rows of dst's earlier experts, then earlier PEs' rows of this one
            dst_row = sum(count(p, dst * experts_per_pe + k) for k in range(j) for p in range(npes))
            dst_row += sum(T.if_then_else(p < me, count(p, expert), 0) for p in range(npes))
            T.putmem_signal_nbi_block(inbox[dst_row, :], x[src_row, :], count(me, expert) * row_bytes,
                                      arrived[1], 1, T.SignalOp.ADD, dst)
        T.signal_wait_until(arrived[1], T.Cmp.EQ, npes_ * experts_per_pe)  # one segment per PE and expert

        rows = T.ds(bx * tokens, tokens)
        T.copy(inbox[rows, :], recv[rows, :])
        if bx == 0:
            T.copy(all_counts[:, T.ds(me * experts_per_pe, experts_per_pe)], recv_counts)

    return dispatch


def dispatch_fn(mesh: jax.sharding.Mesh, tokens: int, hidden: int, experts_per_pe: int, dtype: jnp.dtype):
    """The jitted dispatch over mesh axis "x": (x, counts) sharded by PE -> (recv, recv_counts)."""
    kern = moe_dispatch(tokens, hidden, mesh.size, experts_per_pe, dtype)
    return jax.jit(jax.shard_map(kern, mesh=mesh, in_specs=(P("x"), P("x")), out_specs=(P("x"), P("x"))))


def reference(x: np.ndarray, counts: np.ndarray, experts_per_pe: int) -> tuple[np.ndarray, np.ndarray]:
    """numpy: x [npes, tokens, hidden], counts [npes, experts] -> (recv [npes * capacity, hidden],
    recv_counts [npes * npes, experts_per_pe]), each PE's block in the kernel's layout."""
    npes, tokens, hidden = x.shape
    starts = np.concatenate([np.zeros((npes, 1), np.int64), np.cumsum(counts, axis=1)], axis=1)
    recv = np.zeros((npes, npes * tokens, hidden), x.dtype)
    for q in range(npes):
        segments = [x[p, starts[p, e]:starts[p, e] + counts[p, e]]
                    for e in range(q * experts_per_pe, (q + 1) * experts_per_pe) for p in range(npes)]
        rows = np.concatenate(segments)
        recv[q, :len(rows)] = rows
    recv_counts = np.stack([counts[:, q * experts_per_pe:(q + 1) * experts_per_pe] for q in range(npes)])
    return recv.reshape(-1, hidden), recv_counts.reshape(-1, experts_per_pe)


# --- check + entry point ----------------------------------------------------------------------
def skewed_counts(rng: np.random.Generator, npes: int, experts: int, tokens: int) -> np.ndarray:
    """[npes, experts] int32, each row summing to `tokens`: a Zipf-like routing (a few hot experts,
    empty ones), hot experts differing by PE; PE 0 sends everything to the last expert, and no PE
    routes to expert 0, so some segments and a whole expert are empty."""
    weights = 1.0 / np.arange(1, experts + 1) ** 1.5
    rows = []
    for _ in range(npes):
        p = rng.permutation(weights)
        p[0] = 0.0
        rows.append(np.bincount(rng.choice(experts, size=tokens, p=p / p.sum()), minlength=experts))
    counts = np.stack(rows)
    counts[0] = 0
    counts[0, -1] = tokens
    return counts.astype(np.int32)


def check(mesh: jax.sharding.Mesh, tokens: int = 64, hidden: int = 64, experts_per_pe: int = 2,
          dtype: str = "bfloat16", seed: int = 0) -> ts.testing.Verdict:
    """The kernel on random tokens and skewed random routings vs the numpy reference (on the host)."""
    npes = mesh.size
    rng = np.random.default_rng(seed)
    counts = skewed_counts(rng, npes, npes * experts_per_pe, tokens)
    x = ts.testing.random_array(rng, (npes * tokens, hidden), dtype)
    got = dispatch_fn(mesh, tokens, hidden, experts_per_pe, jnp.dtype(dtype))(
        ts.testing.place(x, mesh, P("x")), ts.testing.place(counts.reshape(-1), mesh, P("x")))
    want = reference(x.reshape(npes, tokens, hidden), counts, experts_per_pe)
    return ts.testing.compare(got, want, "skewed routings: received tokens and counts equal to the numpy reference")


if __name__ == "__main__":
    ts.testing.main(check, mesh=ts.platform.line(min_devices=2),
                    option_help={"tokens": "tokens (rows) per PE", "experts_per_pe": "experts on each PE"})
