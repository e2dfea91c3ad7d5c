"""benchmarks/bench_gemm.py's choice of what to time at a shape (`--configs`), without a GPU: `table` is the
tile table's pick alone, `auto` the pick first and then the candidates, and every entry parses into the
keyword arguments gemm() takes."""

from __future__ import annotations

import pytest

from tests.benchmarks import load_bench

SHAPES = [(2048, 2048, 2048), (16384, 8192, 1024), (128, 8192, 8192)]


@pytest.mark.parametrize("shape", SHAPES)
def test_table_times_the_pick_alone(shape):
    bench = load_bench("bench_gemm")
    got = bench.shape_configs("table", *shape)
    assert len(got) == 1 and got[0].endswith("/table")
    assert bench.parse_config(got[0]) == ({}, {})  # gemm() without tile arguments: the table decides


@pytest.mark.parametrize("shape", SHAPES)
def test_auto_puts_the_pick_first_then_other_candidates(shape):
    bench = load_bench("bench_gemm")
    auto = bench.shape_configs("auto", *shape)
    assert auto[0] == bench.shape_configs("table", *shape)[0]
    assert len(auto) > 1 and len(set(auto)) == len(auto)
    for entry in auto[1:]:
        cfg, _ = bench.parse_config(entry)
        assert {"block_m", "block_n", "block_k", "num_stages", "group_m"} <= set(cfg)


def test_named_configs_parse_with_their_suffixes():
    bench = load_bench("bench_gemm")
    cfg, switches = bench.parse_config("128x256x64/3/g8/p/s2/kernel/t256/b1/mc")
    assert cfg == dict(block_m=128, block_n=256, block_k=64, num_stages=3, group_m=8, persistent=True,
                       split_k=2, split_reduce="kernel", threads=256, blocks_per_sm=1)
    from jax_tilescale.codegen import gemm_sm90

    assert switches == {(gemm_sm90, "MULTICAST"): True}
    assert bench.parse_config("128x192x64/4/g8/p/pp") == (
        dict(block_m=128, block_n=192, block_k=64, num_stages=4, group_m=8, persistent=True, pingpong=True), {})
    with pytest.raises(ValueError, match="unknown suffix 'q'"):
        bench.parse_config("128x256x64/3/g8/q")
