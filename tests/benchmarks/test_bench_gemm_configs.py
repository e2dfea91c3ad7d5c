"""benchmarks/bench_gemm.py's choice of what to time at a shape (`--configs`), without a GPU: `table` is the
tile table's pick alone, `auto` the pick first and then the candidates, and every entry parses into the
keyword arguments gemm() takes."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.benchmarks import load_bench
from tests.conftest import needs_toolchain

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


@pytest.mark.parametrize("shape", SHAPES)
def test_table_in_a_list_stands_for_the_pick_there(shape):
    bench = load_bench("bench_gemm")
    got = bench.shape_configs("256x192x64/3/g8/p,table,128x64x64/8/g8/t128", *shape)
    assert got == ["256x192x64/3/g8/p", bench.shape_configs("table", *shape)[0], "128x64x64/8/g8/t128"]
    assert all(bench.parse_config(entry) is not None for entry in got)


def test_named_configs_parse_with_their_suffixes():
    bench = load_bench("bench_gemm")
    cfg, switches = bench.parse_config("128x256x64/3/g8/p/s2/kernel/t256/b1/mc")
    assert cfg == dict(block_m=128, block_n=256, block_k=64, num_stages=3, group_m=8, persistent=True,
                       split_k=2, split_reduce="kernel", threads=256, blocks_per_sm=1)
    from jax_tilescale.codegen import gemm_sm90

    assert switches == {(gemm_sm90, "MULTICAST"): True}
    assert bench.parse_config("128x192x64/4/g8/p/pp") == (
        dict(block_m=128, block_n=192, block_k=64, num_stages=4, group_m=8, persistent=True, pingpong=True), {})
    from jax_tilescale.codegen import gemm_sm90_edge, gemm_sm90_load, gemm_sm90_store
    from jax_tilescale.codegen.gemm_table import PERSISTENT

    columns = replace(PERSISTENT, group_columns=True)  # the table's pick up to K = 1024: its description parses back
    assert bench.parse_config(columns.describe()) == (
        dict(block_m=128, block_n=192, block_k=64, num_stages=4, group_m=8, persistent=True, pingpong=True,
             group_columns=True), {})
    paired = replace(columns, pair_rows=True).describe()  # the rows in pairs, each block pair multicasting B's tile
    assert paired == "128x192x64/4/g8/p/pp/gc/pr"
    assert bench.parse_config(paired + "/mc") == (
        dict(block_m=128, block_n=192, block_k=64, num_stages=4, group_m=8, persistent=True, pingpong=True,
             group_columns=True, pair_rows=True), {(gemm_sm90, "MULTICAST"): True})
    edge_last = replace(PERSISTENT, edge_last=True).describe()  # the edge column last, its products narrow
    assert edge_last == "128x192x64/4/g8/p/pp/el"
    assert bench.parse_config(edge_last + "/edge") == (
        dict(block_m=128, block_n=192, block_k=64, num_stages=4, group_m=8, persistent=True, pingpong=True,
             edge_last=True), {(gemm_sm90_edge, "EDGE_LOOP"): True})
    serpentine = replace(columns, serpentine=True).describe()  # every other column group walked upwards
    assert serpentine == "128x192x64/4/g8/p/pp/gc/sn"
    assert bench.parse_config(serpentine + "/cfirst/oplast") == (
        dict(block_m=128, block_n=192, block_k=64, num_stages=4, group_m=8, persistent=True, pingpong=True,
             group_columns=True, serpentine=True),
        {(gemm_sm90_store, "OUTPUT_EVICT_FIRST"): True, (gemm_sm90_load, "OPERANDS_EVICT_LAST"): True})
    banded = replace(columns, band_columns=16, band_rows=16).describe()  # column groups in bands
    assert banded == "128x192x64/4/g8/p/pp/gc/band16x16"
    assert bench.parse_config(banded) == (
        dict(block_m=128, block_n=192, block_k=64, num_stages=4, group_m=8, persistent=True, pingpong=True,
             group_columns=True, band_columns=16, band_rows=16), {})
    queued = replace(columns, band_columns=16, band_rows=16, tile_queue=True).describe()  # tiles from a tile queue
    assert queued == "128x192x64/4/g8/p/pp/gc/tq/band16x16"
    assert bench.parse_config(queued) == (
        dict(block_m=128, block_n=192, block_k=64, num_stages=4, group_m=8, persistent=True, pingpong=True,
             group_columns=True, tile_queue=True, band_columns=16, band_rows=16), {})
    tail = replace(columns, tile_queue=True, queue_tail=3).describe()  # only the last 3 waves from the queue
    assert tail == "128x192x64/4/g8/p/pp/gc/tq/qt3"
    assert bench.parse_config(tail) == (
        dict(block_m=128, block_n=192, block_k=64, num_stages=4, group_m=8, persistent=True, pingpong=True,
             group_columns=True, tile_queue=True, queue_tail=3), {})
    with pytest.raises(ValueError, match="unknown suffix 'q'"):
        bench.parse_config("128x256x64/3/g8/q")


def test_skinny_times_the_pick_and_every_candidate_of_the_estimate():
    bench = load_bench("bench_gemm")
    m, n, k = 128, 4096, 14336
    got = bench.shape_configs("skinny", m, n, k)
    estimates = bench.skinny_estimates(m, n, k)
    assert got[0].endswith("/table") and len(set(got)) == len(got)
    assert set(got[1:]) | {got[0].removesuffix("/table")} == set(estimates)  # the pick is one of the candidates
    assert min(estimates, key=estimates.get) == got[0].removesuffix("/table")  # the estimate's fastest is the pick
    for entry in got[1:]:
        cfg, _ = bench.parse_config(entry)
        assert cfg["block_m"] == 64 or cfg["block_n"] == 256


def test_skinny_at_a_few_tokens_times_the_swapped_product_too():
    """Up to SWAP_MAX_M tokens `--configs skinny` also times the swapped product, unsplit and split in two, as
    gemm(swap=True) builds it."""
    from jax_tilescale.codegen.gemm_table import swapped_config

    bench = load_bench("bench_gemm")
    got = bench.shape_configs("skinny", 16, 4096, 4096)
    assert got[1:3] == ["16x64x128/9/g1/t128/swap", "16x64x128/9/g1/t128/s2/swap"]
    cfg, switches = bench.parse_config(got[2])
    assert switches == {} and cfg == dict(block_m=16, block_n=64, block_k=128, num_stages=9, group_m=1, threads=128,
                                          split_k=2, swap=True)
    assert swapped_config(16).describe() == got[1]
    assert not any(entry.endswith("/swap") for entry in bench.shape_configs("skinny", 128, 4096, 4096))


def test_swapped_in_a_list_takes_the_swapped_tiles_of_each_shape():
    """`swapped` and `swapped/sN` follow the shape's M (swapped_config's tiles), are left out above SWAP_MAX_M rows,
    and take no other suffix; in --fp8-configs `swapped` takes the FP8 tiles (itemsize 1) at each shape."""
    from jax_tilescale.codegen.gemm_table import SWAP_MAX_M, swapped_config

    bench = load_bench("bench_gemm")
    for m in (1, 16, 32, SWAP_MAX_M):
        got = bench.shape_configs("table,swapped,swapped/s2", m, 4096, 4096)
        assert got[1:] == [swapped_config(m).describe(), replace(swapped_config(m), split_k=2).describe()]
        cfg, _ = bench.parse_config(got[2])
        assert cfg["swap"] and cfg["split_k"] == 2 and cfg["block_m"] == swapped_config(m).block_m
    assert bench.shape_configs("table,swapped", SWAP_MAX_M + 1, 4096, 4096) == [
        bench.shape_configs("table", SWAP_MAX_M + 1, 4096, 4096)[0]]
    with pytest.raises(ValueError, match="one split suffix"):
        bench.shape_configs("swapped/p", 16, 4096, 4096)
    parsed = bench.fp8_configs("table,swapped")
    at_32 = bench.fp8_shape_configs(parsed, 32)
    assert at_32 == {"table": {}, swapped_config(32, 1).describe(): bench.parse_config(
        swapped_config(32, 1).describe())[0]}
    assert swapped_config(32, 1) != swapped_config(32)  # FP8's k-step holds twice the elements
    assert bench.fp8_shape_configs(parsed, 128) == {"table": {}}


def test_fp8_configs_parse_into_gemm_fp8_arguments_and_the_rest_is_refused():
    bench = load_bench("bench_gemm")
    got = bench.fp8_configs("128x256x128/4/g8,16x64x128/8/g1/t128/swap")
    assert got == {"128x256x128/4/g8": dict(block_m=128, block_n=256, block_k=128, num_stages=4, group_m=8),
                   "16x64x128/8/g1/t128/swap": dict(block_m=16, block_n=64, block_k=128, num_stages=8, group_m=1,
                                                    threads=128, swap=True)}
    assert got == {entry: cfg for entry, cfg in got.items() if set(cfg) <= bench.FP8_ARGUMENTS}
    for bad, word in (("128x256x128/4/g8/s2", "split_k"), ("128x256x128/4/g8/p", "persistent"),
                      ("128x256x128/4/g8/mc", "MULTICAST")):
        with pytest.raises(ValueError, match=f"takes no {word}"):
            bench.fp8_configs(bad)
    with pytest.raises(ValueError, match="names no configuration"):
        bench.fp8_configs("")
    assert bench.fp8_configs("tuned") == {"tuned": {"autotune": True}}  # gemm_fp8(autotune=True)
    assert bench.fp8_configs("table") == {"table": {}}  # gemm_fp8() without tile arguments: gemm_table.fp8_pick
    assert list(bench.fp8_configs(bench.FP8_CONFIGS)) == ["128x256x128/4/g8"]  # gemm_table.FP8_DEFAULT


def test_shape_sets_expand_in_place_and_bad_entries_are_refused():
    bench = load_bench("bench_gemm")
    issue = ["x".join(map(str, s)) for s in bench.SHAPES]
    assert bench.shape_list("issue") == issue
    got = bench.shape_list("64x64x64,decoder,1x2x3")
    assert got[0] == "64x64x64" and got[-1] == "1x2x3" and len(got) == 2 + len(bench.DECODER_SHAPES)
    assert "128x14336x4096" in got and "1024x4096x14336" in got and len(set(got)) == len(got)
    with pytest.raises(ValueError, match="neither MxNxK nor one of issue, decoder"):
        bench.shape_list("2048x2048")


def test_round_ratios_pair_the_runners_round_by_round():
    bench = load_bench("bench_gemm")
    times = {("XLA jnp.dot", "loop"): [1.0, 2.0, 1.0], ("ts", "loop"): [2.0, 2.0, 0.5]}
    assert bench.round_ratios(times, ("XLA jnp.dot", "loop"), ("ts", "loop")) == (0.5, 2.0)
    assert bench.median([3.0, 1.0, 2.0]) == 2.0


def test_graph_form_keeps_every_product_and_runs_whole_iterations():
    """The graph form's loop body holds GRAPH_UNROLL products that XLA cannot merge (the same arrays through
    distinct parameters), sums reps of them, and refuses a count that is not whole iterations."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    bench = load_bench("bench_gemm")
    ka, kb = jax.random.split(jax.random.key(3))
    a, b = (jax.random.normal(k, (32, 32), jnp.float32) for k in (ka, kb))
    reps = 2 * bench.GRAPH_UNROLL
    run = bench.graph_loop(lambda x, y: x @ y, reps)
    want = reps * float(np.asarray(a, np.float64)[0] @ np.asarray(b, np.float64)[:, 0])
    assert abs(float(run(a, b)) - want) <= 1e-3 * abs(want) + 1e-3
    text = run.jitted.lower(*(a, b) * bench.GRAPH_UNROLL).compile().as_text()
    products = [line for line in text.splitlines() if "= f32[32,32]" in line and " dot(" in line]
    assert len(products) == bench.GRAPH_UNROLL, products
    assert bench.whole_iterations(reps + 1) == reps + bench.GRAPH_UNROLL
    with pytest.raises(ValueError, match="whole iterations"):
        bench.graph_loop(lambda x, y: x @ y, reps + 1)


def test_cold_graph_form_gives_each_product_its_own_operands():
    """`--cold`: the graph form's products read GRAPH_UNROLL pairs in turn (distinct values here, so a pair read
    twice or not at all changes the sum); cold_copies makes buffers of their own with the same values."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    bench = load_bench("bench_gemm")
    keys = jax.random.split(jax.random.key(5), 2 * bench.GRAPH_UNROLL)
    pairs = [(jax.random.normal(keys[2 * j], (16, 8), jnp.float32), jax.random.normal(keys[2 * j + 1], (8, 16),
                                                                                          jnp.float32))
             for j in range(bench.GRAPH_UNROLL)]
    reps = 2 * bench.GRAPH_UNROLL
    run = bench.graph_loop(lambda x, y: x @ y, reps, copies=pairs)
    per_iteration = sum(float(np.asarray(x, np.float64)[0] @ np.asarray(y, np.float64)[:, 0]) for x, y in pairs)
    a, b = pairs[0]
    got = float(run(a, b))  # a and b are not what it reads
    assert abs(got - 2 * per_iteration) <= 1e-3 * abs(per_iteration) + 1e-3, (got, per_iteration)
    with pytest.raises(ValueError, match=f"{bench.GRAPH_UNROLL} pairs of operands, not 3"):
        bench.graph_loop(lambda x, y: x @ y, reps, copies=pairs[:3])
    copies = bench.cold_copies(a, b)
    assert len(copies) == bench.GRAPH_UNROLL
    pointers = {x.unsafe_buffer_pointer() for pair in copies for x in pair}
    assert len(pointers) == 2 * bench.GRAPH_UNROLL and a.unsafe_buffer_pointer() not in pointers
    assert all(np.array_equal(x, a) and np.array_equal(y, b) for x, y in copies)


def test_a_cublas_graph_timed_apart_keeps_its_own_column():
    bench = load_bench("bench_gemm")
    times = {("XLA", "graph"): [2.0, 2.0], ("cuBLAS", "loop"): [1.0, 1.0], ("cuBLAS", "graph"): [4.0, 4.0]}
    t = {key: bench.median(v) for key, v in times.items()}
    spread = bench.graph_spreads(times, t, "XLA", "cuBLAS")
    assert t["cuBLAS", "graph"] == 4.0 and spread["cuBLAS"] == (0.5, 0.5)
    del times["cuBLAS", "graph"], t["cuBLAS", "graph"]
    spread = bench.graph_spreads(times, t, "XLA", "cuBLAS")  # one timing serves both of cuBLAS's columns
    assert t["cuBLAS", "graph"] == 1.0 and spread["cuBLAS"] == (2.0, 2.0)


def test_interleaved_times_give_one_figure_per_round_and_runner():
    import jax.numpy as jnp

    bench = load_bench("bench_gemm")
    calls = []

    def runner(tag):
        def run(a, b):
            calls.append(tag)
            return a @ b

        return run

    x = jnp.ones((8, 8))
    times = bench.interleaved_times({"one": runner("one"), "two": runner("two")}, x, x, reps=4, rounds=3, heat_s=0.0)
    assert set(times) == {"one", "two"} and all(len(v) == 3 and min(v) > 0 for v in times.values())
    assert calls[2:] == ["one", "two"] * 3  # after one warm-up call each, the rounds alternate the runners


def test_calls_runs_record_their_host_share_and_host_bound_rows_are_marked(capsys):
    """A calls runner records how long its loop of dispatches took; interleaved_times turns that into the share
    of each timed run, and a row whose median share reaches HOST_BOUND is marked `h` with the legend below."""
    import time

    import jax.numpy as jnp

    bench = load_bench("bench_gemm")
    report = load_bench("_gemm_report")  # the tables bench_gemm prints

    def runner(dispatch_s: float, wait_s: float):
        def run(a, b):
            t0 = time.perf_counter()  # the dispatch as it took (a loaded machine oversleeps), as bench_gemm's runner
            time.sleep(dispatch_s)
            run.dispatch_s = time.perf_counter() - t0
            time.sleep(wait_s)  # what block_until_ready would wait for
            return a

        run.dispatch_s = None
        return run

    x = jnp.ones((4, 4))
    host: dict = {}
    # starved: 0.1 s of dispatch, so the share stays above HOST_BOUND unless the rest of a run takes over 10 ms
    runners = {("fed", "calls"): runner(0.002, 0.02), ("starved", "calls"): runner(0.1, 0.0),
               ("plain", "loop"): lambda a, b: a}
    bench.interleaved_times(runners, x, x, reps=1, rounds=3, heat_s=0.0, host=host)
    assert set(host) == {("fed", "calls"), ("starved", "calls")}  # the loop runner records none
    assert all(len(v) == 3 for v in host.values())
    assert max(host["fed", "calls"]) < 0.5 and min(host["starved", "calls"]) > report.HOST_BOUND

    t = {(name, how): 1e-3 for name in ("XLA jnp.dot", "ts a", "ts b") for how in bench.FORMS}
    t["host", "ts b", "calls"] = 0.97
    t["host", "ts a", "calls"] = 0.5
    spread = {name: (1.0, 1.0) for name in ("XLA jnp.dot", "ts a", "ts b")}
    ref, cub = dict.fromkeys(bench.FORMS, 1e-3), dict.fromkeys(bench.FORMS)
    report.print_table([report.row("64x64x64", name, t, name, ref, cub, "-", True, spread, spread)
                  for name in ("ts a", "ts b")])
    out = capsys.readouterr().out.strip().splitlines()
    a_row, b_row = (next(line for line in out if f" {n} " in line) for n in ("a", "b"))
    assert "1.000h" in b_row and "1.000h" not in a_row and out[-1].startswith("h: host-bound calls")


def test_table_rows_show_the_median_ratio_and_the_rounds_range(capsys):
    """Loop and graph columns each give the median ratio to XLA in that form and its range over the rounds;
    the cuBLAS column takes torch's one graph timing for both."""
    bench = load_bench("bench_gemm")
    report = load_bench("_gemm_report")  # the tables bench_gemm prints
    ours = "ts 128x256x64/4/g8"
    times = {("XLA jnp.dot", "loop"): [1.0e-3, 1.1e-3, 1.0e-3], ("XLA jnp.dot", "calls"): [1.0e-3] * 3,
             ("XLA jnp.dot", "graph"): [0.8e-3] * 3,
             (ours, "loop"): [1.05e-3, 1.0e-3, 1.0e-3], (ours, "calls"): [2.0e-3] * 3,
             (ours, "graph"): [0.8e-3, 1.0e-3, 0.5e-3]}
    t = {key: bench.median(v) for key, v in times.items()}
    spread = {name: bench.round_ratios(times, ("XLA jnp.dot", "loop"), (name, "loop")) for name, _ in times}
    spread_graph = {name: bench.round_ratios(times, ("XLA jnp.dot", "graph"), (name, "graph")) for name, _ in times}
    ref = {how: t["XLA jnp.dot", how] for how in bench.FORMS}
    cub = {"loop": 0.84e-3, "graph": 0.84e-3, "calls": None}
    rows = [report.row("1024x1024x1024", name, t, name, ref, cub, "-", True, spread, spread_graph)
            for name in ("XLA jnp.dot", ours)]
    report.print_table(rows)
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].split().count("rounds") == 2 and "graph" in lines[0]
    cols = lines[-1].split()
    assert cols[:2] == ["1024x1024x1024", "ts"]
    assert cols[5:8] == ["1.00", "0.95-1.10", "0.84"]  # loop: x XLA, rounds, x cuBLAS (0.84 / 1.0)
    assert cols[10:13] == ["1.00", "0.80-1.60", "1.05"]  # graph: x XLA, rounds, x cuBLAS (0.84 / 0.8)
    assert cols[16] == "-"  # calls x cuBLAS: no torch calls timing


@needs_toolchain
def test_the_code_column_says_where_a_multicast_pair_was_built():
    """`/mc` builds a two-block cluster only where the pair check proves the shared tile (4096^3 in 128x256 tiles:
    16 blocks along x share A's tile), not where the grid's x is odd (8192^3 in 256x192 tiles: 43). The column
    says which, so a `/mc` row that did not multicast cannot pass for one that did (persistent `/mc` rows did
    not, until 2026-12-03)."""
    import jax
    import jax.numpy as jnp

    from jax_tilescale.codegen import gemm_sm90

    bench = load_bench("bench_gemm")
    switch = {(gemm_sm90, "MULTICAST"): True}

    def column(m, n, k, switches, **cfg):
        a, b = jax.ShapeDtypeStruct((m, k), jnp.bfloat16), jax.ShapeDtypeStruct((k, n), jnp.bfloat16)
        return bench.resources(bench.gemm(m, n, k, jnp.bfloat16, block_k=64, num_stages=4, **cfg), a, b, "auto",
                               switches)

    assert "cluster 2" in column(4096, 4096, 4096, switch, block_m=128, block_n=256)
    assert "cluster 2" not in column(8192, 8192, 8192, switch, block_m=256, block_n=192)
    assert "cluster 2" not in column(4096, 4096, 4096, {}, block_m=128, block_n=256)
    assert gemm_sm90.MULTICAST is False  # the switch was set for the lowering only


class _FakeTorchCuda:
    """The few torch.cuda calls cuda_graph_of makes, recording what ran; `refuse` makes the capture fail."""

    def __init__(self, refuse: bool):
        self.refuse, self.log = refuse, []
        cuda = self

        class Stream:
            def wait_stream(self, other):
                cuda.log.append("wait")

        class CUDAGraph:
            def replay(self):
                cuda.log.append("replay")

        class _Ctx:
            def __init__(self, what):
                self.what = what

            def __enter__(self):
                if self.what == "capture" and cuda.refuse:
                    raise RuntimeError("operation not permitted when stream is capturing")
                cuda.log.append(f"enter {self.what}")

            def __exit__(self, *exc):
                return False

        self.Stream, self.CUDAGraph = Stream, CUDAGraph
        self.stream = lambda s: _Ctx("side")
        self.graph = lambda g: _Ctx("capture")
        self.current_stream = lambda: Stream()
        self.synchronize = lambda: self.log.append("sync")


@pytest.mark.parametrize("refuse", [False, True])
def test_cublas_loop_is_a_graph_or_says_it_is_not(refuse, capsys):
    """cuBLAS's loop: warmed up on a side stream, then recorded; where torch refuses the capture, None and a
    note (the runner then times the eager loop)."""
    cublas = load_bench("_cublas_torch")

    class FakeTorch:
        cuda = _FakeTorchCuda(refuse)

    runs = []
    graph = cublas.cuda_graph_of(FakeTorch, lambda: runs.append(1))
    log = FakeTorch.cuda.log
    if refuse:
        assert graph is None and len(runs) == 1 and "not recorded as a CUDA graph" in capsys.readouterr().out
    else:
        assert graph is not None and len(runs) == 2  # the warm-up, then the body under capture
        assert log.index("enter side") < log.index("enter capture") and log[-1] == "sync"


def test_split_k_sums_are_timed_whole_in_the_loop_and_graph_forms():
    """A split-K product whose partials XLA sums (examples/gemm.py's SplitK, reduce="xla") is timed with its whole
    sum: taking one element of it let XLA compute one element of the sum (the fusion's result a scalar), so the
    loop and graph forms carry every product's whole result for it, and the compiled loop holds a fusion that
    writes all of C. A product XLA does not finish keeps the one-element form."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    bench = load_bench("bench_gemm")
    m, n, k = 128, 256, 512
    split = bench.gemm(m, n, k, jnp.bfloat16, block_m=64, block_n=128, num_stages=2, threads=128, split_k=2)
    assert bench.finishes_in_xla(split)
    assert not bench.finishes_in_xla(bench.gemm(m, n, k, jnp.bfloat16, block_m=64, block_n=128, num_stages=2,
                                                threads=128))
    assert not bench.finishes_in_xla(lambda x, y: x @ y)
    ka, kb = jax.random.split(jax.random.key(5))
    a, b = jax.random.normal(ka, (m, k), jnp.bfloat16), jax.random.normal(kb, (k, n), jnp.bfloat16)
    want = np.asarray(a, np.float64) @ np.asarray(b, np.float64)
    reps = bench.GRAPH_UNROLL
    forms = bench.timing_forms(split, reps)
    acc, last = forms["loop"](a, b)
    np.testing.assert_allclose(np.asarray(last, np.float64), want, atol=0.03 * np.abs(want).max())
    assert abs(float(acc) - reps * float(last[0, 0])) <= 1e-3 * abs(float(acc)) + 1e-3
    acc_g, kept = forms["graph"](a, b)
    assert abs(float(acc_g) - float(acc)) <= 1e-3 * abs(float(acc)) + 1e-3
    assert len(kept) == bench.GRAPH_UNROLL and all(np.array_equal(np.asarray(x), np.asarray(last)) for x in kept)
    whole_sums = [line for line in jax.jit(forms["loop"]).lower(a, b).compile().as_text().splitlines()
                  if " fusion(" in line and f"= bf16[{m},{n}]" in line and "tilescale_call" in line]
    assert whole_sums, "no fusion writes the whole split-K sum: the loop would time the partials alone"
    one = bench.timing_forms(split, reps, whole=False)["loop"]
    assert not [line for line in jax.jit(one).lower(a, b).compile().as_text().splitlines()
                if " fusion(" in line and f"= bf16[{m},{n}]" in line and "tilescale_call" in line], (
        "the one-element form now writes the whole sum: finishes_in_xla's reason is gone, revisit it")


@pytest.mark.parametrize("shape", SHAPES)
def test_tuned_stands_for_gemm_autotune(shape):
    bench = load_bench("bench_gemm")
    got = bench.shape_configs("table,tuned", *shape)
    assert got == [bench.shape_configs("table", *shape)[0], "tuned"]
    assert bench.parse_config("tuned") == ({"autotune": True}, {})
