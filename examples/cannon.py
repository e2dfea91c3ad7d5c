"""Cannon's algorithm on a P x P mesh (axes "r", "c"): PE (i, j) holds A_ij and B_ij. After the
initial skew (A_ij to PE (i, j - i), B_ij to PE (i - j, j)) each of P steps multiplies the blocks
held (T.gemm into a float32 fragment) and shifts A one PE left and B one PE up, with
putmem_signal_nbi_block into the next slot of a symmetric buffer and signal_wait_until on its
signal (one slot per step, so no step overwrites blocks still in use).

Checked against a float64 product on the host, on random data. Needs a square number of devices,
at least 4 (a 2 x 2 mesh or larger): `python examples/cannon.py` runs it on 4 simulated CPU devices
(`--cpu-devices 9`: 3 x 3); on GPUs, `python -m jax_tilescale.launch -n 4 examples/cannon.py`.
Its GEMM takes the portable lowering.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import jax
import jax.numpy as jnp

import jax_tilescale as ts
from jax_tilescale import language as T


def _summa_module():
    """summa.py's mesh and check helpers (examples are scripts, not a package)."""
    name = "examples_summa"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("summa.py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


# --- config + kernel --------------------------------------------------------------------------
def cannon(bm: int, bk: int, bn: int, p: int, dtype: jnp.dtype, block_k: int = 32) -> ts.TileKernel:
    """Per PE: A block [bm, bk], B block [bk, bn] -> C block [bm, bn] on a p x p mesh, p >= 2."""
    if p < 2:
        raise ValueError(f"cannon: the mesh must be at least 2 x 2 (got {p} x {p})")

    def multiply(a_buf, b_buf, s, a_s, b_s, acc):
        for ko in T.Pipelined(bk // block_k, num_stages=3):
            T.copy(a_buf[T.ds(s, 1), :, T.ds(ko * block_k, block_k)], a_s)
            T.copy(b_buf[T.ds(s, 1), T.ds(ko * block_k, block_k), :], b_s)
            T.gemm(a_s, b_s, acc)

    @ts.kernel(out_shape=jax.ShapeDtypeStruct((bm, bn), dtype), grid=(1,), threads=128)
    def cannon_kernel(a, b, c):
        i, j = T.axis_index("r"), T.axis_index("c")
        a_buf = T.alloc_symmetric((p, bm, bk), dtype)  # slot s: the A block held in step s
        b_buf = T.alloc_symmetric((p, bk, bn), dtype)
        a_sig, b_sig = T.alloc_signal(p), T.alloc_signal(p)
        a_s = T.alloc_shared((bm, block_k), dtype)
        b_s = T.alloc_shared((block_k, bn), dtype)
        acc = T.alloc_fragment((bm, bn), jnp.float32)
        left, up = T.pe_of(c=(j + p - 1) % p), T.pe_of(r=(i + p - 1) % p)
        # skew: PE (i, j) starts with A_i,(j+i) and B_(i+j),j
        T.putmem_signal_nbi_block(a_buf[T.ds(0, 1), :, :], a, sig=a_sig[0], value=1, op=T.SignalOp.SET,
                                  pe=T.pe_of(c=(j + p - i) % p))
        T.putmem_signal_nbi_block(b_buf[T.ds(0, 1), :, :], b, sig=b_sig[0], value=1, op=T.SignalOp.SET,
                                  pe=T.pe_of(r=(i + p - j) % p))
        T.clear(acc)
        for s in T.serial(p - 1):
            T.signal_wait_until(a_sig[s], T.Cmp.EQ, 1)
            T.signal_wait_until(b_sig[s], T.Cmp.EQ, 1)
            T.putmem_signal_nbi_block(a_buf[T.ds(s + 1, 1), :, :], a_buf[T.ds(s, 1), :, :], sig=a_sig[s + 1],
                                      value=1, op=T.SignalOp.SET, pe=left)
            T.putmem_signal_nbi_block(b_buf[T.ds(s + 1, 1), :, :], b_buf[T.ds(s, 1), :, :], sig=b_sig[s + 1],
                                      value=1, op=T.SignalOp.SET, pe=up)
            multiply(a_buf, b_buf, s, a_s, b_s, acc)
        T.signal_wait_until(a_sig[p - 1], T.Cmp.EQ, 1)
        T.signal_wait_until(b_sig[p - 1], T.Cmp.EQ, 1)
        multiply(a_buf, b_buf, p - 1, a_s, b_s, acc)
        T.copy(acc, c)

    return cannon_kernel


# --- check + entry point ----------------------------------------------------------------------
def check(mesh: jax.sharding.Mesh, bm: int = 64, bk: int = 64, bn: int = 64, dtype: str = "bfloat16",
          seed: int = 0) -> ts.testing.Verdict:
    return _summa_module().check_2d(cannon, mesh, bm, bk, bn, dtype, seed)


if __name__ == "__main__":
    ts.testing.main(check, mesh=ts.platform.square(), option_help=_summa_module().BLOCK_HELP)
