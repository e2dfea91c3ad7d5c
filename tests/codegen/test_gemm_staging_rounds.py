"""The persistent tile loop's epilogue through fewer staging boxes than the tile has
(codegen/gemm_sm90_store.py `_round_lines`): where a whole staging tile does not fit beside the
rings, the boxes go out in rounds through the slots that do, each box waiting only for the box that
last used its slot. On the GPU: tests/gpu/test_gemm_paths_gpu.py (persistent and ping-pong tests
at 128x256/4 and 128x192/4)."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import pytest

from jax_tilescale.codegen import generate_cuda
from jax_tilescale.compiler import compile_cubin
from tests.codegen.test_compute_codegen import _no_spills
from tests.conftest import load_example

gemm_example = load_example("gemm")
BF16 = jnp.bfloat16
S = jax.ShapeDtypeStruct


def _module(m, n, k, **cfg):
    kern = gemm_example.gemm(m, n, k, jnp.dtype(BF16), persistent=True, num_sms=132, **cfg)
    return generate_cuda(kern.trace(S((m, k), BF16), S((k, n), BF16)), "sm_90")


def _waits(src: str) -> list[tuple[int, int, int, int]]:
    """(box, boxes, slot, commits allowed in flight) of each round, in order."""
    rounds = re.findall(r"// box (\d+) of (\d+), through slot (\d+) of \d+\n\s*if \([^)]*\) "
                        r"ts_bulk_wait_read_all_but<(\d+)>\(\);", src)
    return [tuple(map(int, r)) for r in rounds]


@pytest.mark.parametrize("cfg,expected,smem_staging", [
    # 4 stages of 48 KiB leave two 16 KiB boxes of the 128x256 tile's four: box b in slot b % 2, always
    # waiting for the box two commits back (the previous tile's boxes 2 and 3 for boxes 0 and 1)
    (dict(block_m=128, block_n=256, num_stages=4), [(0, 4, 0, 1), (1, 4, 1, 1), (2, 4, 0, 1), (3, 4, 1, 1)], 2),
    # ping-pong, 128x192 tiles, 4 stages of 40 KiB: two slots per warpgroup for three boxes; box 0 takes
    # the slot of the previous tile's box 2 (nothing after it), box 1 that of its box 1 (two commits after)
    (dict(block_m=128, block_n=192, num_stages=4, pingpong=True), [(0, 3, 0, 0), (1, 3, 1, 2), (2, 3, 0, 1)], 4),
    # ping-pong 128x128, 6 stages: one slot per warpgroup, every box waits for the one before
    (dict(block_m=128, block_n=128, num_stages=6, pingpong=True), [(0, 2, 0, 0), (1, 2, 0, 0)], 2),
])
def test_boxes_go_out_in_rounds_through_the_slots_that_fit(cfg, expected, smem_staging):
    mod = _module(16384, 8192, 1024, **cfg)
    assert mod.arch == "sm_90a" and not mod.notes, mod.notes
    consumer = mod.source.split("consumer warpgroups", 1)[1]
    assert _waits(consumer) == expected
    rings = cfg["num_stages"] * (cfg["block_m"] + cfg["block_n"]) * 64 * 2
    assert rings + smem_staging * 16384 <= mod.smem_bytes < rings + (smem_staging + 1) * 16384
    # each round: every thread meets after the leader's wait and before the leader's store
    one = consumer.split("// box 0 of", 1)[1].split("// box 1 of", 1)[0]
    assert one.index("ts_bulk_wait_read_all_but") < one.index("_sync(") < one.index("ts_fence_proxy_async")
    assert one.index("ts_fence_proxy_async") < one.rindex("_sync(") < one.index("ts_tma_store_2d") \
        < one.index("ts_bulk_commit")
    _no_spills(compile_cubin(mod.source, arch=mod.arch, entry=mod.entry, nvshmem=False))


def test_a_whole_staging_tile_where_it_fits():
    src = _module(16384, 8192, 1024, block_m=128, block_n=256, num_stages=3).source
    assert not _waits(src) and "through slot" not in src
