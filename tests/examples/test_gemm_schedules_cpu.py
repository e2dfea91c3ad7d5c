"""examples/gemm.py's split-K and persistent schedules on the interpreter, against jnp.dot in
float32 on random data at ragged shapes, and the tile table's (codegen/gemm_table.py) picks."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jax_tilescale.codegen.gemm_table import DEFAULT, GemmConfig, pick_config
from tests.conftest import load_example

gemm_example = load_example("gemm")
SMALL_TILES = dict(block_m=64, block_n=32, block_k=16, num_stages=2, threads=128)


def _product(m, n, k, dtype, seed, **cfg):
    rng = np.random.default_rng(seed)
    a = jnp.asarray(rng.standard_normal((m, k)), dtype)
    b = jnp.asarray(rng.standard_normal((k, n)), dtype)
    got = jax.jit(gemm_example.gemm(m, n, k, jnp.dtype(dtype), **cfg))(a, b)
    want = jnp.dot(a.astype(jnp.float32), b.astype(jnp.float32), precision=jax.lax.Precision.HIGHEST)
    return got, want


def _assert_close(got, want, dtype):
    tol = 2e-2 if dtype == jnp.bfloat16 else 1e-4
    assert got.shape == want.shape
    err = float(jnp.max(jnp.abs(got.astype(jnp.float32) - want)))
    assert err <= tol * float(jnp.max(jnp.abs(want))), err


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
@pytest.mark.parametrize("m,n,k,split", [(200, 136, 80, 5), (130, 70, 96, 2), (64, 96, 72, 5)])
def test_split_k_matches_dot_at_ragged_shapes(dtype, m, n, k, split):
    """K over `split` blocks per tile (72 = 4.5 k-steps of 16: the last split's last step clips)."""
    kern = gemm_example.gemm(m, n, k, jnp.dtype(dtype), split_k=split, **SMALL_TILES)
    assert isinstance(kern, gemm_example.SplitK) and kern.splits == split
    got, want = _product(m, n, k, dtype, m + n + k, split_k=split, **SMALL_TILES)
    _assert_close(got, want, dtype)


def test_split_k_is_deterministic_and_sums_in_split_order():
    m, n, k = 96, 64, 128
    kern = gemm_example.gemm(m, n, k, jnp.dtype(jnp.float32), split_k=4, **SMALL_TILES)
    rng = np.random.default_rng(5)
    a = jnp.asarray(rng.standard_normal((m, k)), jnp.float32)
    b = jnp.asarray(rng.standard_normal((k, n)), jnp.float32)
    first, second = jax.jit(kern)(a, b), jax.jit(kern)(a, b)
    assert np.array_equal(np.asarray(first), np.asarray(second))
    slabs = np.asarray(jax.jit(kern.kernel)(a, b)).reshape(4, kern.rows, n)[:, :m]
    want = ((slabs[0] + slabs[1]) + slabs[2]) + slabs[3]  # the documented order, in float32
    assert np.array_equal(np.asarray(first), want)


def test_a_split_that_does_not_divide_the_k_steps_is_refused():
    with pytest.raises(ValueError, match=r"split_k=3 does not divide the 5 k-steps of K=72 .*use one of \[1, 5\]"):
        gemm_example.gemm(64, 64, 72, jnp.dtype(jnp.float32), split_k=3, **SMALL_TILES)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
@pytest.mark.parametrize("m,n,k,sms", [(200, 136, 72, 5), (256, 64, 48, 3), (70, 40, 33, 16)])
def test_persistent_matches_dot_at_ragged_shapes(dtype, m, n, k, sms):
    """Fewer blocks than tiles (the last wave partial: the `tile < tiles` guard), and more SMs than
    tiles (one tile per block)."""
    got, want = _product(m, n, k, dtype, m * n + k, persistent=True, num_sms=sms, **SMALL_TILES)
    _assert_close(got, want, dtype)


def test_table_picks_split_k_for_skinny_and_persistence_for_short_k():
    assert pick_config(128, 8192, 8192, jnp.bfloat16, 132) == GemmConfig(split_k=4)
    assert pick_config(16384, 8192, 1024, jnp.bfloat16, 132).persistent
    assert pick_config(8192, 8192, 8192, jnp.bfloat16, 132).block_m == 256  # the widest tiles when they fill waves
    assert pick_config(4096, 4096, 4096, jnp.bfloat16, 132) == DEFAULT  # 256x192 would leave a third of a wave idle
    assert pick_config(64, 64, 64, jnp.float32, 132) == DEFAULT  # only fp16/bf16 take the table
    # gemm() with no tile arguments takes the pick; explicit arguments win
    assert isinstance(gemm_example.gemm(128, 8192, 8192, jnp.dtype(jnp.bfloat16), num_sms=132), gemm_example.SplitK)
    assert not isinstance(gemm_example.gemm(128, 8192, 8192, jnp.dtype(jnp.bfloat16), num_sms=132, split_k=1),
                          gemm_example.SplitK)
    explicit = gemm_example.gemm(128, 8192, 8192, jnp.dtype(jnp.bfloat16), block_m=128, block_n=256, block_k=64)
    assert not isinstance(explicit, gemm_example.SplitK)
