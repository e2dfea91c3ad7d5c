"""Issue 16's GEMM paths on an H100/H200, each against a float64 host product on random data:
tile configurations at shapes whose rows TMA cannot address (the producer's threads copy those
tiles, gemm_sm90_load), FP8 (examples/gemm_fp8.py) and element-wise updates of the register
accumulator, split-K, the persistent tile loop and two blocks per SM (examples/gemm.py).

    pytest -q tests/gpu/test_gemm_paths_gpu.py      # one GPU
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jax_tilescale.codegen import gemm_sm90_edge, generate_cuda
from jax_tilescale.codegen.gemm_table import DEFAULT_PERSISTENT, SWAP_PICK_M, pick_config
from tests.codegen.kernels import scaled_relu_gemm, started_gemm
from tests.conftest import load_example

gemm_example = load_example("gemm")
TOL = {"bfloat16": 2e-2, "float16": 5e-3}

CONFIGS = {
    "128x256": dict(block_m=128, block_n=256, block_k=64, num_stages=4),
    "256x192": dict(block_m=256, block_n=192, block_k=64, num_stages=4),
    "64x128/t128": dict(block_m=64, block_n=128, block_k=64, num_stages=3, threads=128),
    # two blocks per SM (ts.kernel's blocks_per_sm; codegen/gemm_table.PAIRED)
    "128x128/t128/b2": dict(block_m=128, block_n=128, block_k=64, num_stages=3, threads=128, blocks_per_sm=2),
    # the skinny shapes' pick (codegen/gemm_table.NARROW): 64x128 tiles, 8 stages, a tile column's blocks adjacent
    "64x128/8/g2/t128": dict(block_m=64, block_n=128, block_k=64, num_stages=8, threads=128, group_m=2),
    # the skinny pick with twice the tile columns (codegen/gemm_table.NARROW_WIDE): one warpgroup of m64n256
    "64x256/5/g2/t128": dict(block_m=64, block_n=256, block_k=64, num_stages=5, threads=128, group_m=2),
    # NARROW with k-steps of 128 (A's K rows two swizzle atoms): half the stages and barrier rounds per byte
    "64x128x128/4/g2/t128": dict(block_m=64, block_n=128, block_k=128, num_stages=4, threads=128, group_m=2),
    # the middle's pick (codegen/gemm_table.MID): 128x128 tiles, k-steps of 128, one consumer warpgroup
    "128x128x128/3/g2/t128": dict(block_m=128, block_n=128, block_k=128, num_stages=3, threads=128, group_m=2),
    # the pick before it (2026-12-02 to 12-03): 128x64 tiles, 8 stages
    "128x64/8/t128": dict(block_m=128, block_n=64, block_k=64, num_stages=8, threads=128),
}


def _inputs(shape_a, shape_b, dtype, seed):
    ka, kb = jax.random.split(jax.random.key(seed))
    return (jax.random.normal(ka, shape_a, jnp.float32).astype(dtype),
            jax.random.normal(kb, shape_b, jnp.float32).astype(dtype))


def _close(got, a, b, dtype):
    want = np.asarray(a.astype(jnp.float32), np.float64) @ np.asarray(b.astype(jnp.float32), np.float64)
    got = np.asarray(got.astype(jnp.float32), np.float64)
    scale = float(np.max(np.abs(want)))
    assert got.shape == want.shape and np.all(np.isfinite(got))
    err = float(np.max(np.abs(got - want)))
    assert err <= TOL[dtype] * scale, f"max error {err} vs scale {scale}"


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("m,n,k", [
    (1000, 3000, 777),  # the issue's case: A's rows 1554 bytes (thread-copied), B by TMA
    (1024, 1001, 512),  # B's and C's rows odd: B thread-copied, C stored from registers
    (999, 777, 555),  # both thread-copied, no tensor map for the operands
    (2048, 2048, 1000),  # every row a multiple of 16 bytes: TMA only (the plain path, as before)
])
def test_hopper_gemm_at_any_shape(dtype, config, m, n, k):
    kern = gemm_example.gemm(m, n, k, jnp.dtype(dtype), **CONFIGS[config])
    a, b = _inputs((m, k), (k, n), dtype, m + 3 * n + 7 * k)
    mod = generate_cuda(kern.trace(a, b), "sm_90")
    assert mod.arch == "sm_90a", mod.notes
    _close(jax.jit(kern)(a, b), a, b, dtype)


# ---- FP8 (examples/gemm_fp8.py): k32 e4m3/e5m2 wgmma, per-tensor scales on the accumulator ----

fp8_example = load_example("gemm_fp8")


@pytest.mark.parametrize("dtype", ["float8_e4m3fn", "float8_e5m2"])
@pytest.mark.parametrize("m,n,k,cfg", [
    (1024, 1024, 1024, dict(block_m=128, block_n=256)),  # FP8_DEFAULT's tiles, 4 stages, TMA-stored bf16 C
    (1024, 1024, 1024, {}),  # gemm_table.fp8_pick: 32 default tiles, under a wave: FP8_NARROW (64x128x256)
    (2048, 1024, 512, dict(block_m=256, block_n=128)),
    (1000, 3000, 777, {}),  # ragged, rows of 777 bytes: the producer's threads copy A and B (fp8_pick: FP8_NARROW)
    (1000, 3000, 777, dict(block_m=128, block_n=256)),  # the same with FP8_DEFAULT's tiles
    (300, 200, 256, dict(block_m=64, block_n=128, threads=128, num_stages=3)),
    # the swapped product (C^T = B A^T, both K-major): 16 tokens on n16; 5 tokens on two warpgroups, ragged K
    (16, 4096, 4096, dict(block_m=16, block_n=64, threads=128, num_stages=8, swap=True)),
    (5, 3000, 777, dict(block_m=8, block_n=128, num_stages=4, swap=True)),
    (48, 3000, 4096, {}),  # fp8_pick up to 56 tokens: the swapped product, 48 on n48, N ragged (47 blocks)
])
def test_fp8_gemm_matches_the_dequantised_product(dtype, m, n, k, cfg):
    fp8 = np.dtype(getattr(__import__("ml_dtypes"), dtype))
    kern = fp8_example.gemm_fp8(m, n, k, fp8, **cfg)
    rng = np.random.default_rng(m + n + k)
    a, b = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((n, k)).astype(np.float32)
    a8, sa = fp8_example.quantize(a, fp8)
    b8, sb = fp8_example.quantize(b, fp8)
    assert generate_cuda(kern.trace(a8, b8, sa, sb), "sm_90").arch == "sm_90a"
    verdict = fp8_example.check(m, n, k, dtype, seed=m + n + k, **cfg)
    assert verdict.ok, verdict


def test_scaled_relu_epilogue_on_a_bf16_accumulator():
    """The element-wise update of a register accumulator (T.Parallel on C_f before its store)."""
    m, n, k = 512, 384, 320
    scaled = scaled_relu_gemm(m, n, k)

    a, b = _inputs((m, k), (k, n), "bfloat16", 11)
    s = jnp.asarray([0.75], jnp.float32)
    assert generate_cuda(scaled.trace(a, b, s), "sm_90").arch == "sm_90a"
    want = np.maximum(np.asarray(a.astype(jnp.float32), np.float64) @ np.asarray(b.astype(jnp.float32), np.float64)
                      * 0.75, 0.0)
    got = np.asarray(jax.jit(scaled)(a, b, s).astype(jnp.float32), np.float64)
    assert float(np.max(np.abs(got - want))) <= 2e-2 * float(np.max(np.abs(want)))


# ---- schedules (examples/gemm.py): split-K and the persistent tile loop, ragged and large ----

@pytest.mark.parametrize("m,n,k,cfg", [
    (128, 8192, 8192, dict(split_k=4)),  # split-K 4 of the table's 128x64 tiles, summed by XLA
    (128, 8192, 8192, dict(split_k=4, split_reduce="kernel")),  # summed by each tile's last split
    (200, 3000, 4096, dict(split_k=2, split_reduce="kernel")),  # ragged M and N, partials stored by TMA
    (1000, 3000, 777, dict(block_m=128, block_n=256, block_k=64, split_k=13)),  # 13 k-steps, 13 splits
])
def test_split_k_matches_dot(m, n, k, cfg):
    kern = gemm_example.gemm(m, n, k, jnp.dtype("bfloat16"), **cfg)
    assert isinstance(kern, gemm_example.SplitK)
    a, b = _inputs((m, k), (k, n), "bfloat16", m + n + k)
    first = jax.jit(kern)(a, b)
    _close(first, a, b, "bfloat16")
    assert np.array_equal(np.asarray(first.astype(jnp.float32)), np.asarray(jax.jit(kern)(a, b).astype(jnp.float32)))


@pytest.mark.parametrize("m,n,k,cfg", [
    (16384, 8192, 1024, dict(persistent=True)),  # 4096 tiles on 132 SMs: 32 waves, the last partial
    (8192, 8192, 8192, dict(block_m=128, block_n=256, block_k=64, persistent=True)),
    (1000, 3000, 777, dict(persistent=True)),  # A thread-copied inside the tile loop, ragged C
    (999, 777, 555, dict(persistent=True, num_sms=7)),  # few blocks, many tiles each, C from registers
    (300, 200, 256, dict(block_m=64, block_n=128, threads=128, persistent=True, num_sms=3)),
    # 4 stages of 128x256 leave room for 2 of the 4 staging boxes: the boxes go out in rounds
    (16384, 8192, 1024, dict(block_m=128, block_n=256, num_stages=4, persistent=True)),
    (1000, 3000, 777, dict(block_m=128, block_n=256, num_stages=4, persistent=True, num_sms=9)),
])
def test_persistent_matches_dot(m, n, k, cfg):
    kern = gemm_example.gemm(m, n, k, jnp.dtype("bfloat16"), **cfg)
    a, b = _inputs((m, k), (k, n), "bfloat16", m + 2 * n + k)
    assert generate_cuda(kern.trace(a, b), "sm_90").arch == "sm_90a"
    _close(jax.jit(kern)(a, b), a, b, "bfloat16")


@pytest.mark.parametrize("m,n,k", [
    (128, 14336, 4096),  # a decoder's MLP up-projection: NARROW_WIDE, unsplit
    (128, 4096, 14336),  # its down-projection: NARROW_K128 split in two, the partials summed by XLA
    (100, 3000, 4096),  # ragged M and N (the tiles' edges), NARROW_K128 split in two
    (16, 6144, 4096),  # a few tokens: the swapped product, 96 blocks of 64 of B's columns
    (16, 14336, 4096),  # a few tokens but two waves of swapped blocks: NARROW_K128 unsplit
    (32, 4096, 4096),  # 32 tokens: the swapped product on n32, 64 blocks
    (56, 3000, 4096),  # 56 tokens, ragged N: the swapped product on n56, 47 blocks
])
def test_table_pick_for_skinny_products_matches_dot(m, n, k):
    """gemm() with no tile arguments at skinny shapes (codegen/gemm_table.skinny_pick), against the float64 product
    of random data, and bit-identical on a second run (a split's partials are summed in split order)."""
    kern = gemm_example.gemm(m, n, k, jnp.dtype("bfloat16"), num_sms=132)
    cfg = pick_config(m, n, k, jnp.bfloat16, 132)
    assert (cfg.block_m == m) == cfg.swap == (m <= SWAP_PICK_M and n < 14336), cfg
    assert isinstance(kern, gemm_example.SplitK) == (cfg.split_k > 1), cfg
    a, b = _inputs((m, k), (k, n), "bfloat16", m + 5 * n + k)
    first = jax.jit(kern)(a, b)
    _close(first, a, b, "bfloat16")
    assert np.array_equal(np.asarray(first.astype(jnp.float32)), np.asarray(jax.jit(kern)(a, b).astype(jnp.float32)))


@pytest.mark.parametrize("m,n,k,cfg", [
    (16, 4096, 4096, {}),  # a decoder's 16 tokens on wgmma's n16: 64 blocks of 64 of B's columns
    (16, 4096, 14336, dict(split_k=2)),  # split in two, the transposed float32 partials summed by XLA
    (1, 3000, 777, {}),  # one token on n8; A's rows 1554 bytes and B's 6000: A thread-copied, N ragged
    (13, 1001, 512, {}),  # B's and C's rows odd: B thread-copied, C's rows stored element by element
    (64, 6144, 4096, {}),  # the most tokens swapped_config takes: n64
    # persistent: XLA's tile at 16384 x 8192 x 1024 (cuBLAS's 128x160 in its column-major frame), and a ragged one
    (16384, 8192, 1024, dict(block_m=160, block_n=128, block_k=64, threads=256, num_stages=4, persistent=True)),
    (1000, 3000, 777, dict(block_m=40, block_n=64, block_k=128, threads=128, num_stages=4, persistent=True,
                           num_sms=9)),
    # ping-pong: each consumer warpgroup's transposed tile through a staging tile of its own, stored with TMA while
    # the other warpgroup's products run; 103 rows of tiles in groups of 8 (the last group partial); and a ragged
    # one whose rows (1000 x 2 bytes) TMA stores, 3 stages
    (16384, 8192, 1024, dict(block_m=160, block_n=128, block_k=64, threads=256, num_stages=4, persistent=True,
                             pingpong=True)),
    (1000, 3000, 777, dict(block_m=160, block_n=128, block_k=64, threads=256, num_stages=3, persistent=True,
                           pingpong=True, num_sms=9)),
])
def test_swapped_product_matches_dot(m, n, k, cfg):
    """gemm(swap=True): each tile computed transposed (C^T = B^T A^T) on wgmma, B's tile MN-major on its m64 and A's
    K-major on its n, stored back as one transposed copy; against the float64 product, every element."""
    kern = gemm_example.gemm(m, n, k, jnp.dtype("bfloat16"), swap=True, **cfg)
    a, b = _inputs((m, k), (k, n), "bfloat16", 3 * m + n + k)
    mod = generate_cuda(kern.trace(a, b), "sm_90")
    assert mod.arch == "sm_90a" and not mod.notes, mod.notes
    _close(jax.jit(kern)(a, b), a, b, "bfloat16")


@pytest.mark.parametrize("m,n,k", [(4096, 4096, 4096), (2500, 3100, 1500)])  # 512 and 260 tiles, the second ragged
def test_table_pick_on_a_persistent_grid_matches_dot(m, n, k):
    """More than one wave of 128x256 tiles: gemm() with no tile arguments takes the persistent grid
    (gemm_table.DEFAULT_PERSISTENT) on the 132 SMs of an H100/H200."""
    assert pick_config(m, n, k, jnp.bfloat16, 132) == DEFAULT_PERSISTENT
    kern = gemm_example.gemm(m, n, k, jnp.dtype("bfloat16"), num_sms=132)
    a, b = _inputs((m, k), (k, n), "bfloat16", m + 3 * n + k)
    _close(jax.jit(kern)(a, b), a, b, "bfloat16")


@pytest.mark.parametrize("m,n,k,cfg", [
    (16384, 8192, 1024, dict(block_m=128, block_n=128, num_stages=4)),  # 8192 tiles: 63 waves, the last partial
    (16384, 8192, 1024, dict(block_m=128, block_n=192, num_stages=3)),  # ragged N (8192 = 42.7 tiles of 192)
    (1000, 3000, 777, dict(block_m=128, block_n=128, num_stages=4)),  # A thread-copied inside the tile loop
    (999, 777, 555, dict(block_m=128, block_n=128, num_stages=4, num_sms=7)),  # C from registers
    (2000, 1000, 512, dict(block_m=128, block_n=128, num_stages=4, num_sms=5)),  # blocks with no tile: turns passed
    (300, 200, 256, dict(block_m=128, block_n=128, num_stages=4, num_sms=3)),  # one tile per warpgroup or none
    # staging boxes in rounds: 2 slots of 3 boxes per warpgroup, 1 slot of 2
    (16384, 8192, 1024, dict(block_m=128, block_n=192, num_stages=4)),
    (1000, 3000, 777, dict(block_m=128, block_n=192, num_stages=4, num_sms=5)),
    (16384, 8192, 1024, dict(block_m=128, block_n=128, num_stages=6)),
    (2048, 3000, 8192, dict(block_m=128, block_n=192, num_stages=4, group_m=16)),  # 128 k-steps a tile, ragged N
    (1000, 3000, 777, dict(block_m=64, block_n=256, num_stages=4, num_sms=9)),  # one m64n256 slab a warpgroup
])
def test_pingpong_persistent_matches_dot(m, n, k, cfg):
    """Ping-pong consumers (codegen/gemm_sm90_pingpong.py, asked for): each warpgroup's tiles land
    where the host product says, on shapes with odd wave counts, ragged edges and tiles missing."""
    kern = gemm_example.gemm(m, n, k, jnp.dtype("bfloat16"), persistent=True, pingpong=True, **cfg)
    a, b = _inputs((m, k), (k, n), "bfloat16", m + 3 * n + k)
    mod = generate_cuda(kern.trace(a, b), "sm_90")
    assert "ts_named_arrive(" in mod.source.split("consumer warpgroups", 1)[1]
    first = jax.jit(kern)(a, b)
    _close(first, a, b, "bfloat16")
    again = jax.jit(kern)(a, b)  # a second run: the same bits
    assert np.array_equal(np.asarray(first.astype(jnp.float32)), np.asarray(again.astype(jnp.float32)))


@pytest.mark.parametrize("m,n,k,cfg", [
    (16384, 8192, 1024, dict(block_m=128, block_n=192, num_stages=4)),  # the pick's form
    (2000, 1000, 512, dict(block_m=128, block_n=128, num_stages=4, num_sms=5)),  # blocks with no tile
])
def test_pingpong_turn_at_the_last_stage_matches_dot(monkeypatch, m, n, k, cfg):
    """The ping-pong turn passed at the tile's last stage (gemm_sm90_pingpong.EARLY_TURN on, bench_gemm's
    `/earlyturn`): right and repeatable."""
    from jax_tilescale.codegen import gemm_sm90_pingpong

    _persistent_with(monkeypatch, "EARLY_TURN", True, m, n, k, dict(cfg, pingpong=True), seed=m + 7 * n + k,
                     marker=f"if (ts_i1 == {k // 64 - 1}) {{", module=gemm_sm90_pingpong)


# ---- two blocks per SM (codegen/gemm_table.PAIRED, asked for explicitly), and that two are resident ----

def test_paired_blocks_match_dot_and_two_fit_on_an_sm():
    from cuda.bindings import driver

    from jax_tilescale.compiler import compile_cubin

    m = n = k = 2048
    kern = gemm_example.gemm(m, n, k, jnp.dtype("bfloat16"), **CONFIGS["128x128/t128/b2"])
    a, b = _inputs((m, k), (k, n), "bfloat16", 2048)
    first = jax.jit(kern)(a, b)
    _close(first, a, b, "bfloat16")
    mod = generate_cuda(kern.trace(a, b), "sm_90")
    assert "__launch_bounds__(256, 2)" in mod.source
    # what the driver says of the built kernel: blocks of it an SM holds at once (registers and shared memory)
    cubin = compile_cubin(mod.source, arch=mod.arch, entry=mod.entry, nvshmem=False)
    data = cubin.read_bytes()
    assert driver.cuInit(0)[0] == driver.CUresult.CUDA_SUCCESS
    err, dev = driver.cuDeviceGet(0)
    err, ctx = driver.cuDevicePrimaryCtxRetain(dev)
    assert driver.cuCtxPushCurrent(ctx)[0] == driver.CUresult.CUDA_SUCCESS
    try:
        err, module = driver.cuModuleLoadData(data)
        assert err == driver.CUresult.CUDA_SUCCESS, err
        err, fn = driver.cuModuleGetFunction(module, mod.entry.encode())
        assert err == driver.CUresult.CUDA_SUCCESS, err
        attr = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        assert driver.cuFuncSetAttribute(fn, attr, mod.smem_bytes)[0] == driver.CUresult.CUDA_SUCCESS
        err, blocks = driver.cuOccupancyMaxActiveBlocksPerMultiprocessor(fn, mod.threads, mod.smem_bytes)
        assert err == driver.CUresult.CUDA_SUCCESS, err
        assert blocks >= 2, blocks
        driver.cuModuleUnload(module)
    finally:
        driver.cuCtxPopCurrent()
        driver.cuDevicePrimaryCtxRelease(dev)


# ---- a slower form than asked for says so when jit compiles it on the GPU (jax_tilescale.PerformanceWarning) ----

def test_float32_gemm_warns_on_the_gpu_and_is_still_right():
    """A float32 GEMM takes the portable path on Hopper (no tensor-core lowering takes float32 tiles): the CUDA
    lowering warns once, naming the kernel and the loop, and the product is still the host's."""
    import jax_tilescale as ts

    m, n, k = 256, 192, 128
    kern = gemm_example.gemm(m, n, k, jnp.dtype("float32"), block_m=64, block_n=32, block_k=16, num_stages=2,
                             threads=128)
    a, b = _inputs((m, k), (k, n), "float32", 5)
    with pytest.warns(ts.PerformanceWarning, match="portable path") as seen:
        got = jax.jit(kern)(a, b)
    assert any("float32" in str(w.message) for w in seen)
    want = np.asarray(a, np.float64) @ np.asarray(b, np.float64)
    assert float(np.max(np.abs(np.asarray(got, np.float64) - want))) <= 1e-4 * float(np.max(np.abs(want)))


@pytest.mark.parametrize("m,n,k,cfg", [
    (16384, 8192, 1024, dict(block_m=128, block_n=192, num_stages=4, pingpong=True)),  # the pick's form, B shared
    (2048, 3000, 1024, dict(block_m=128, block_n=192, num_stages=4, pingpong=True, num_sms=6)),  # ragged N, 43 waves
    (4096, 4096, 1024, dict(block_m=128, block_n=256, num_stages=4)),  # cooperative consumers
])
def test_persistent_multicast_pairs_match_dot(monkeypatch, m, n, k, cfg):
    """Persistent kernels in two-block clusters (gemm_sm90.MULTICAST, off by default): each block loads half of
    the shared tile into both, every stage released in both blocks' barriers, each tile's last one included."""
    _persistent_with(monkeypatch, "MULTICAST", True, m, n, k, cfg, seed=m + 5 * n + k,
                     marker="__cluster_dims__(2, 1, 1)")


@pytest.mark.parametrize("m,n,k,cfg", [
    (4096, 4096, 4096, dict(block_m=256, block_n=192, num_stages=4)),  # 3 boxes through 2 held stages
    (1000, 3000, 777, dict(block_m=256, block_n=192, num_stages=4, num_sms=9)),  # ragged, many tiles a block
    (999, 784, 555, dict(block_m=128, block_n=192, num_stages=5, num_sms=7)),  # 3 boxes of 128 rows, ragged
    (4096, 4096, 1024, dict(block_m=128, block_n=192, num_stages=5)),  # 3 held stages of 5
])
def test_persistent_epilogue_through_its_last_stages_matches_dot(monkeypatch, m, n, k, cfg):
    """A cooperative tile loop's epilogue staged through the A tiles of its last stages (gemm_sm90.BORROW_RING,
    the default): the stages released to the producer only after the stores have read them."""
    _persistent_with(monkeypatch, "BORROW_RING", True, m, n, k, cfg, seed=m + 7 * n + k, marker="ts_slot0")


@pytest.mark.parametrize("m,n,k,cfg", [
    (1000, 3000, 777, dict(block_m=256, block_n=192, num_stages=3, num_sms=9)),  # ragged, rounds of boxes
    (4096, 4096, 1024, dict(block_m=128, block_n=256, num_stages=4)),
])
def test_persistent_epilogue_through_a_staging_tile_matches_dot(monkeypatch, m, n, k, cfg):
    """The staging tile beside the rings (BORROW_RING off: bench_gemm.py's `/noring`), still a path the code
    generator takes where the switch is off."""
    _persistent_with(monkeypatch, "BORROW_RING", False, m, n, k, cfg, seed=m + 3 * n + k, marker="ts_slot0",
                     present=False)


def _persistent_with(monkeypatch, switch: str, value: bool, m, n, k, cfg, seed: int, marker: str,
                     present: bool = True, module=None):
    """The persistent bf16 GEMM built with the code generator's `switch` (of `module`, gemm_sm90 by default)
    set to `value` (whose form `marker` in the source shows, or its absence), checked by `_right_and_repeatable`."""
    from jax_tilescale.codegen import gemm_sm90

    monkeypatch.setattr(module or gemm_sm90, switch, value)
    kern = gemm_example.gemm(m, n, k, jnp.dtype("bfloat16"), persistent=True, **cfg)
    a, b = _inputs((m, k), (k, n), "bfloat16", seed)
    assert (marker in generate_cuda(kern.trace(a, b), "sm_90").source) == present
    _right_and_repeatable(kern, a, b)


def _right_and_repeatable(kern, a, b):
    """The bf16 product against the float64 host product, and bit-identical on a second run."""
    first = jax.jit(kern)(a, b)
    _close(first, a, b, "bfloat16")
    again = jax.jit(kern)(a, b)
    assert np.array_equal(np.asarray(first.astype(jnp.float32)), np.asarray(again.astype(jnp.float32)))


@pytest.mark.parametrize("m,n,k,cfg", [
    # 160-wide B and C tiles: 64-byte swizzle (XLA's 128x160 tiles); A thread-copied (1554-byte rows), C by TMA
    (1000, 3000, 777, dict(block_m=128, block_n=160)),
    (1024, 1001, 512, dict(block_m=128, block_n=160)),  # B thread-copied into the 64-byte layout, C from registers
    (2048, 2048, 1000, dict(block_m=128, block_n=208, threads=128)),  # 208: 32-byte swizzle, one warpgroup
    # ping-pong, 5 stages of 128x160, the staging boxes of 32 columns in rounds; ragged N (8192 = 51.2 x 160)
    (16384, 8192, 1024, dict(block_m=128, block_n=160, num_stages=5, persistent=True, pingpong=True)),
    # persistent, the epilogue's 64-byte boxes through the ring's last stages
    (4096, 3000, 1024, dict(block_m=256, block_n=160, num_stages=4, persistent=True)),
    (1024, 1024, 1000, dict(block_m=128, block_n=128, block_k=32, num_stages=6)),  # A's K tile 64 bytes wide
    (512, 512, 520, dict(block_m=128, block_n=128, block_k=16, num_stages=8)),  # 32 bytes, a ragged last k-step
])
def test_narrower_swizzles_match_dot(m, n, k, cfg):
    """Tiles whose rows are 64 or 32 bytes wide where 128 does not divide them (gemm_sm90_load.swizzle_bytes):
    TMA's boxes, the producer's thread copies, wgmma's descriptors and the epilogue's staging boxes all in the
    narrower layout, against the float64 host product."""
    kern = gemm_example.gemm(m, n, k, jnp.dtype("bfloat16"), **cfg)
    a, b = _inputs((m, k), (k, n), "bfloat16", m + 5 * n + k)
    mod = generate_cuda(kern.trace(a, b), "sm_90")
    assert mod.arch == "sm_90a" and "wgmma" in mod.source, mod.notes
    first = jax.jit(kern)(a, b)
    _close(first, a, b, "bfloat16")
    again = jax.jit(kern)(a, b)  # a second run: the same bits
    assert np.array_equal(np.asarray(first.astype(jnp.float32)), np.asarray(again.astype(jnp.float32)))


@pytest.mark.parametrize("start", ["clear", "fill", "each"])
@pytest.mark.parametrize("tile", [(64, 128), (128, 128)])
def test_pipelined_accumulator_starts_match_the_host_product(start, tile):
    """The wgmma loop's accumulator cleared (the clear folded into the first products), filled with 0.5, or cleared
    by every stage's gemm (C = the last k-step's product), with one m64 slab per warpgroup (64x128) and two
    (128x128), against the float64 host product."""
    m, n, k = 256, 512, 1024
    kern = started_gemm(m, n, k, start, block_m=tile[0], block_n=tile[1])
    a, b = _inputs((m, k), (k, n), "bfloat16", 29 + tile[0])
    mod = generate_cuda(kern.trace(a, b), "sm_90")
    assert mod.arch == "sm_90a", mod.notes
    a64 = np.asarray(a.astype(jnp.float32), np.float64)
    b64 = np.asarray(b.astype(jnp.float32), np.float64)
    want = a64[:, -64:] @ b64[-64:] if start == "each" else a64 @ b64 + (0.5 if start == "fill" else 0.0)
    got = np.asarray(jax.jit(kern)(a, b), np.float64)
    assert got.shape == want.shape and np.all(np.isfinite(got))
    err = float(np.max(np.abs(got - want)))
    assert err <= 1e-5 * float(np.max(np.abs(want))) * np.sqrt(k), f"max error {err}"


@pytest.mark.parametrize("cfg,warning", [
    # one m64n256 wgmma does not fit 512 threads' launch bounds: the mma.sync path, with the advice
    (dict(block_m=192, block_n=256, block_k=64, num_stages=2, threads=384), "one m64n256 wgmma needs 154 registers"),
    # two slabs of 128 accumulators on one warpgroup: wgmma, spilling, with a note naming threads=256
    (dict(block_m=128, block_n=256, block_k=64, num_stages=3, threads=128), "take threads=256"),
])
def test_configurations_the_tile_rules_turn_aside_still_match_dot(cfg, warning):
    """Configurations that the Hopper plan refuses (registers) or takes with spills: the kernel runs, right, and
    its PerformanceWarning says which configuration fits (codegen/gemm_sm90_fit.py)."""
    import jax_tilescale as ts

    m, n, k = 1000, 2048, 1024
    kern = gemm_example.gemm(m, n, k, jnp.dtype("bfloat16"), **cfg)
    a, b = _inputs((m, k), (k, n), "bfloat16", 41 + cfg["threads"])
    with pytest.warns(ts.PerformanceWarning, match=warning):
        got = jax.jit(kern)(a, b)
    _close(got, a, b, "bfloat16")


@pytest.mark.parametrize("m,n,k,cfg", [
    # the pick's tiles at 16384 x 8192 x 1024: the last column 128 of 192 (n128 products), walked last
    (16384, 8192, 1024, dict(block_m=128, block_n=192, block_k=64, num_stages=4, persistent=True, pingpong=True)),
    # the same in column groups (the table's order there), the edge column after the column groups
    (16384, 8192, 1024, dict(block_m=128, block_n=192, block_k=64, num_stages=4, persistent=True, pingpong=True,
                             group_columns=True)),
    # ragged everywhere, the cooperative 256x192 with its epilogue through the ring: 3000 % 192 = 120 (n128)
    (1000, 3000, 768, dict(block_m=256, block_n=192, block_k=64, num_stages=4, persistent=True, num_sms=9)),
])
def test_edge_tiles_with_narrower_products_match_dot(monkeypatch, m, n, k, cfg):
    """gemm_sm90_edge.EDGE_LOOP (off by default, bench_gemm's `/edge`) with the edge column last (`edge_last`): the
    edge tiles' k-loop issues wgmma of the edge's width on a prefix of the accumulator; every element against the
    float64 product."""
    monkeypatch.setattr(gemm_sm90_edge, "EDGE_LOOP", True)
    kern = gemm_example.gemm(m, n, k, jnp.dtype("bfloat16"), edge_last=True, **cfg)
    a, b = _inputs((m, k), (k, n), "bfloat16", m + 7 * n + k)
    mod = generate_cuda(kern.trace(a, b), "sm_90")
    assert mod.arch == "sm_90a" and not mod.notes and "_in192(" in mod.source, mod.notes
    _close(jax.jit(kern)(a, b), a, b, "bfloat16")


@pytest.mark.parametrize("m,n,k,kw", [
    # the table's pick there: PERSISTENT_BANDED (43 tile columns in groups of 4, in bands of 16 x 16)
    (16384, 8192, 1024, dict()),
    # ragged, 16 tile columns of 192 in groups of 2 on 7 blocks (with a partial last group, e.g. groups of 3, this
    # small grid's ping-pong kernel spills in either order: ptxas C7507, benchmarks/NOTES.md forty-second session);
    # and the swapped ping-pong in column groups
    (1000, 3000, 768, dict(block_m=128, block_n=192, num_stages=4, group_m=2, persistent=True, pingpong=True,
                           group_columns=True, num_sms=7)),
    (1000, 3000, 768, dict(block_m=160, block_n=128, num_stages=4, persistent=True, pingpong=True, swap=True,
                           group_columns=True, num_sms=7)),
    # the pick's tiles there in serpentine column groups (every other group walks the rows upwards; the partial last
    # group of 3 columns is the sixth: upwards)
    (16384, 8192, 1024, dict(block_m=128, block_n=192, num_stages=4, persistent=True, pingpong=True,
                             group_columns=True, serpentine=True)),
    (1000, 3000, 768, dict(block_m=128, block_n=192, num_stages=4, group_m=3, persistent=True, pingpong=True,
                           group_columns=True, serpentine=True, num_sms=7)),
    # banded column groups: the pick's tiles in bands of 16 columns x 16 rows (the last super-group 11 columns)
    (16384, 8192, 1024, dict(block_m=128, block_n=192, num_stages=4, persistent=True, pingpong=True,
                             group_columns=True, band_columns=16, band_rows=16)),
    # the same from a tile queue (T.tile_queue: the blocks draw their tiles), and the ragged ping-pong and the
    # cooperative 256x192 (8192^3's pick) from one
    (16384, 8192, 1024, dict(block_m=128, block_n=192, num_stages=4, persistent=True, pingpong=True,
                             group_columns=True, band_columns=16, band_rows=16, tile_queue=True)),
    (1000, 3000, 768, dict(block_m=128, block_n=192, num_stages=4, group_m=2, persistent=True, pingpong=True,
                           group_columns=True, tile_queue=True, num_sms=7)),
    (2048, 3072, 1024, dict(block_m=256, block_n=192, persistent=True, group_columns=True, tile_queue=True)),
    # K = 777: A's rows are not 16-byte multiples, every producer thread copies and the issuing one draws; 7 blocks
    (1000, 3000, 777, dict(block_m=256, block_n=192, persistent=True, group_columns=True, tile_queue=True,
                           num_sms=7)),
    # only the last waves from the queue (T.tile_queue's static_rounds): the table's pick with its last 3 waves drawn,
    # and the thread-copying producer with its last one
    (16384, 8192, 1024, dict(block_m=128, block_n=192, num_stages=4, group_m=4, persistent=True, pingpong=True,
                             group_columns=True, band_columns=16, band_rows=16, tile_queue=True, queue_tail=3)),
    (1000, 3000, 777, dict(block_m=256, block_n=192, persistent=True, group_columns=True, tile_queue=True,
                           queue_tail=1, num_sms=7)),
])
def test_column_groups_match_dot(m, n, k, kw):
    """The persistent grid's tiles in groups of columns walking the rows (GemmConfig.group_columns): every element
    against the float64 product. From a tile queue, three launches on fresh operands: one that found the counter
    where the last left it would skip tiles (their elements keep the last launch's values)."""
    kern = gemm_example.gemm(m, n, k, jnp.dtype("bfloat16"), **kw)
    a, b = _inputs((m, k), (k, n), "bfloat16", m + 5 * n + k)
    mod = generate_cuda(kern.trace(a, b), "sm_90")
    assert mod.arch == "sm_90a" and not mod.notes, mod.notes
    for launch in range(3 if kw.get("tile_queue") else 1):
        if launch:
            a, b = _inputs((m, k), (k, n), "bfloat16", m + 5 * n + k + launch)
        _close(jax.jit(kern)(a, b), a, b, "bfloat16")


@pytest.mark.parametrize("m,n,k,kw", [
    (16384, 8192, 1024, dict(num_sms=132)),  # the column-grouped pick's tiles: 128 rows of tiles, 64 pairs
    (1000, 3000, 768, dict(group_m=3, num_sms=8)),  # ragged M and N, a partial last group of 3 columns
    (900, 3000, 768, dict(group_m=2, num_sms=8)),  # 8 tile rows, the last 4 rows of 128
    (700, 3000, 768, dict(group_m=2, num_sms=8)),  # 6 tile rows
    (600, 3000, 768, dict(group_m=2, num_sms=8)),  # 5 tile rows: the last alone, after the pairs (no cluster)
])
def test_rows_in_pairs_multicasting_b_match_dot(monkeypatch, m, n, k, kw):
    """Column groups with the rows in pairs (GemmConfig.pair_rows) and gemm_sm90.MULTICAST: each block pair takes one
    tile column at every wave and loads B's tile once for both (a two-block cluster where the order proves it, as
    the code generator checks); every element against the float64 product."""
    from jax_tilescale.codegen import gemm_sm90

    monkeypatch.setattr(gemm_sm90, "MULTICAST", True)
    kern = gemm_example.gemm(m, n, k, jnp.dtype("bfloat16"), **{**dict(
        block_m=128, block_n=192, num_stages=4, group_m=8, persistent=True, pingpong=True, group_columns=True,
        pair_rows=True), **kw})
    a, b = _inputs((m, k), (k, n), "bfloat16", m + 3 * n + k)
    mod = generate_cuda(kern.trace(a, b), "sm_90")
    assert mod.arch == "sm_90a" and not mod.notes, mod.notes
    rows = -(-m // 128)
    assert ("__cluster_dims__(2, 1, 1)" in mod.source) == (rows % 2 == 0), rows
    _close(jax.jit(kern)(a, b), a, b, "bfloat16")

