"""tools/swap_probe.py's own kernels (the pick's frame with either operand's major swapped, the swapped frame with B
given as B^T or storing C^T) through the interpreter on small tiles, against jnp.dot in float32 on random data at
ragged shapes: what the GPU probe times must be the product (on the GPU it checks the same before it times)."""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jax_tilescale.codegen.gemm_table import GemmConfig
from tests.conftest import load_tool

probe = load_tool("swap_probe")
M, N, K, SMS = 150, 100, 40, 3
SMALL = dict(block_k=16, num_stages=2, threads=128, persistent=True, group_m=2)


def _inputs(seed):
    rng = np.random.default_rng(seed)
    a = jnp.asarray(rng.standard_normal((M, K)), jnp.float32)
    b = jnp.asarray(rng.standard_normal((K, N)), jnp.float32)
    return a, b, np.asarray(jnp.dot(a, b, precision=jax.lax.Precision.HIGHEST))


@pytest.mark.parametrize("a_t,b_t", list(itertools.product((False, True), repeat=2)))
def test_layout_kernels_compute_the_product(a_t, b_t):
    a, b, want = _inputs(int(a_t) * 2 + int(b_t))
    cfg = GemmConfig(block_m=64, block_n=32, **SMALL)
    kern = probe.layout_kernel(M, N, K, jnp.float32, cfg, SMS, a_t, b_t)
    got = jax.jit(kern)(a.T if a_t else a, b.T if b_t else b)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-4)


def test_swapped_probe_kernels_compute_the_product():
    a, b, want = _inputs(7)
    cfg = GemmConfig(block_m=16, block_n=64, swap=True, **SMALL)
    kk = jax.jit(probe.swapped_kk_kernel(M, N, K, jnp.float32, cfg, SMS))(a, b.T)
    np.testing.assert_allclose(np.asarray(kk), want, rtol=1e-4, atol=1e-4)
    ct = jax.jit(probe.swapped_ct_kernel(M, N, K, jnp.float32, cfg, SMS))(a, b)
    np.testing.assert_allclose(np.asarray(ct), want.T, rtol=1e-4, atol=1e-4)
