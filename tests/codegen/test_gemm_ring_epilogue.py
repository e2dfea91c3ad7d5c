"""A cooperative tile loop's epilogue staged through its own last stages (gemm_sm90.BORROW_RING, on by default;
gemm_sm90_store.plan_borrowed_store): no staging tile beside the rings, the last stages held by the loop and
the tail, released by the store leader at the next tile's first k-step after the stores have read them, every
box in a borrowed stage's A tile; builds without spills. Ping-pong and multicast keep their own staging
(tests/gpu/test_gemm_paths_gpu.py runs the kernels)."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import pytest

from jax_tilescale.codegen import gemm_sm90, generate_cuda
from jax_tilescale.compiler import compile_cubin
from tests.codegen.test_compute_codegen import _no_spills
from tests.conftest import load_example

gemm_example = load_example("gemm")
BF16 = jnp.bfloat16


def _module(m, n, k, **cfg):
    kern = gemm_example.gemm(m, n, k, jnp.dtype(BF16), num_sms=132, **cfg)
    S = jax.ShapeDtypeStruct
    return generate_cuda(kern.trace(S((m, k), BF16), S((k, n), BF16)), "sm_90")


@pytest.mark.parametrize("m,n,k,cfg,boxes,held,stage", [
    (8192, 8192, 8192, dict(block_m=256, block_n=192, num_stages=4, persistent=True), 3, 2, 32768),
    (4096, 4096, 1024, dict(block_m=128, block_n=192, num_stages=5, persistent=True), 3, 3, 16384),
    (1000, 3000, 777, dict(block_m=256, block_n=192, num_stages=4, persistent=True), 3, 2, 32768),
])
def test_the_epilogue_stages_through_the_last_stages(session_cache, require_nvcc, monkeypatch, m, n, k, cfg,
                                                     boxes, held, stage):
    monkeypatch.setattr(gemm_sm90, "BORROW_RING", False)
    plain = _module(m, n, k, **cfg)
    monkeypatch.setattr(gemm_sm90, "BORROW_RING", True)  # the default
    mod = _module(m, n, k, **cfg)
    src, stages = mod.source, cfg["num_stages"]
    ksteps = -(-k // 64)
    assert mod.smem_bytes <= plain.smem_bytes  # nothing beside the rings
    # the loop holds its last `held` stages, the tail releases nothing, the next tile's first k-step releases
    # them all, one arrival per consumer warp
    assert f"if (ts_i1 > 0 && ts_i1 <= {ksteps - held} && ts_lane == 0) {{" in src
    assert f"ts_it0 += {ksteps};  // the last stages stay held" in src
    release = src.split("if (ts_i1 == 0 && ts_it0 > 0 && threadIdx.x == 0) {", 1)[1].split("}", 1)[0]
    arrive = "ts_mbar_arrive_count(&ts_empty0[(ts_it0 - {}u) % " + f"{stages}u], 8u);"  # 2 warpgroups' warps
    at = [release.index(arrive.format(j + 1)) for j in range(held)]
    assert release.index("ts_bulk_wait_read();") < at[0] and at == sorted(at)
    assert f"ts_empty0[(ts_it0 - {held + 1}u)" not in release
    # the boxes go to the held stages' A tiles in turn, box b waiting for box b - held's reads
    assert f"char* const ts_slot{held - 1} = ts_box + ((ts_it0 - {held}u) % {stages}u) * {stage}u;" in src
    stores = re.findall(r"ts_tma_store_2d\(&ts_maps\.m\[\d+\], (ts_slot\d),", src)
    assert stores == [f"ts_slot{b % held}" for b in range(boxes)]
    assert src.count(f"ts_bulk_wait_read_all_but<{held - 1}>();") == max(boxes - held, 0)
    _no_spills(compile_cubin(src, arch=mod.arch, entry=mod.entry, nvshmem=False))


@pytest.mark.parametrize("cfg", [
    dict(block_m=128, block_n=192, num_stages=4, persistent=True, pingpong=True),  # a staging tile per warpgroup
    # two borrowed stages would give what its staging tile beside the rings gives (two 16 KiB boxes' room)
    dict(block_m=128, block_n=256, num_stages=4, persistent=True),
    dict(block_m=128, block_n=256, num_stages=3, persistent=True),  # one stage to borrow, the whole tile beside
    dict(block_m=256, block_n=192, num_stages=4),  # not a tile loop: the freed ring, as before
])
def test_other_forms_keep_their_epilogue(monkeypatch, cfg):
    monkeypatch.setattr(gemm_sm90, "BORROW_RING", False)
    plain = _module(4096, 4096, 1024, **cfg).source
    monkeypatch.setattr(gemm_sm90, "BORROW_RING", True)
    assert _module(4096, 4096, 1024, **cfg).source == plain
