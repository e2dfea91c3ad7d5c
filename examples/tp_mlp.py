"""A tensor-parallel MLP block with its communication under the GEMMs: AG-GEMM -> GELU -> GEMM-RS.

Megatron's layout: the activations X [tokens, hidden] are sharded by rows (sequence parallel), W1
[hidden, ffn] by columns and W2 [ffn, hidden] by rows. PE p computes H_p = all_gather(X) @ W1_p
(examples/allgather_gemm.py), applies the activation (tanh GELU, an XLA element-wise op between the
two calls), and Y_p = psum_scatter(H_p @ W2_p) by rows (examples/gemm_reducescatter.py): every PE
ends with its rows of Y = gelu(X @ W1) @ W2, sharded like X.

Checked against the same block written with XLA's collectives (`all_gather`, `jnp.dot`,
`psum_scatter`) in float32, on random data. `python examples/tp_mlp.py` runs it on simulated CPU
devices; on GPUs `python -m jax_tilescale.launch -n 2 examples/tp_mlp.py`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

import jax_tilescale as ts

TOLERANCE = {"float32": 1e-4, "float16": 1e-2, "bfloat16": 3e-2}  # relative to max |Y|


# --- config + kernels -------------------------------------------------------------------------
def tp_mlp(x: jax.Array, w1: jax.Array, w2: jax.Array, npes: int, ag_config: dict | None = None,
           rs_config: dict | None = None) -> jax.Array:
    """Inside `jax.shard_map` over `npes` PEs: this PE's rows of gelu(all_gather(X) @ W1) @ W2, for X
    sharded by rows, W1 by columns and W2 by rows."""
    h = ts.testing.sibling(__file__, "allgather_gemm").ag_gemm(x, w1, npes, **(ag_config or {}))
    h = jax.nn.gelu(h.astype(jnp.float32), approximate=True).astype(x.dtype)
    return ts.testing.sibling(__file__, "gemm_reducescatter").gemm_rs(h, w2, npes, **(rs_config or {}))


def tp_mlp_fn(mesh: jax.sharding.Mesh, **configs):
    return jax.jit(jax.shard_map(lambda x, w1, w2: tp_mlp(x, w1, w2, mesh.size, **configs), mesh=mesh,
                                 in_specs=(P("x", None), P(None, "x"), P("x", None)), out_specs=P("x", None)))


def xla_mlp(x: jax.Array, w1: jax.Array, w2: jax.Array) -> jax.Array:
    """The same block with XLA's collectives (inside shard_map over axis x), in float32."""
    xg = jax.lax.all_gather(x.astype(jnp.float32), "x", axis=0, tiled=True)
    h = jax.nn.gelu(jnp.dot(xg, w1.astype(jnp.float32)), approximate=True)
    return jax.lax.psum_scatter(jnp.dot(h, w2.astype(jnp.float32)), "x", scatter_dimension=0, tiled=True)


# --- check + entry point ----------------------------------------------------------------------
def check(mesh: jax.sharding.Mesh, tokens: int = 64, hidden: int = 64, ffn: int = 128, dtype: str = "bfloat16",
          seed: int = 0) -> ts.testing.Verdict:
    """Y through the two kernels vs the XLA block in float32 (tokens rows of X per PE)."""
    rng = np.random.default_rng(seed)
    npes = mesh.size
    x = ts.testing.random_array(rng, (npes * tokens, hidden), dtype)
    w1 = ts.testing.random_array(rng, (hidden, npes * ffn), dtype)
    w2 = ts.testing.random_array(rng, (npes * ffn, hidden), dtype)
    small = dict(block_m=64, block_n=64, block_k=64, threads=128)
    cfg = dict(ag_config=small, rs_config=small) if tokens < 128 else {}
    got = tp_mlp_fn(mesh, **cfg)(ts.testing.place(x, mesh, P("x", None)), ts.testing.place(w1, mesh, P(None, "x")),
                                 ts.testing.place(w2, mesh, P("x", None)))
    (want,) = ts.testing.lax_on_host(xla_mlp, mesh, (P("x", None), P(None, "x"), P("x", None)), P("x", None))(
        np.asarray(x, np.float32), np.asarray(w1, np.float32), np.asarray(w2, np.float32))
    return ts.testing.compare(got, want, "Y close to the XLA block in float32", atol_of_max=TOLERANCE[dtype])


if __name__ == "__main__":
    ts.testing.main(check, mesh=ts.platform.line(min_devices=1))
