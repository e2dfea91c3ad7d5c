"""The collective benchmarks (benchmarks/bench_*.py on benchmarks/_collective.py) at tiny sizes on 2
simulated devices: each runs, checks its kernels against jax.lax before timing and says so, and
writes a CSV with nccl-tests' bandwidths; a wrong kernel gets no bandwidth and a non-zero exit."""

from __future__ import annotations

import csv
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import PartitionSpec as P

from tests.benchmarks import load_bench

TINY = ["--sizes", "4K,64K", "--reps", "1", "--iters", "1", "--warmup", "0", "--npes", "2"]


coll = load_bench("_collective")


def run_bench(name: str, tmp_path: Path, capsys: pytest.CaptureFixture, *extra: str) -> tuple[int, str]:
    status = load_bench(name).main([*TINY, "--out-dir", str(tmp_path), "--no-plot", *extra])
    return status, capsys.readouterr().out


def read_csv(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    return rows[0], [dict(zip(rows[0], r)) for r in rows[1:]]


def assert_measured(rows: list[dict[str, str]], family, variants: list[str], timed_xla: bool = True) -> None:
    """Every size has every variant checked and timed, with nccl-tests' bandwidths of its time."""
    assert sorted({int(r["bytes_per_rank"]) for r in rows}) == [4096, 65536]
    for r in rows:
        if r["variant"] == coll.XLA and not timed_xla:
            assert r["ok"] == "" and r["time_s"] == "-" and r["note"], r
            continue
        assert r["variant"] in [*variants, coll.XLA] and r["ok"] == "1", r
        t, nbytes = float(r["time_s"]), int(r["bytes_per_rank"])
        algbw = family.alg_ranks(2) * nbytes / t / 1e9
        assert float(r["algbw_gbps"]) == pytest.approx(algbw, rel=1e-3, abs=1e-3)
        assert float(r["busbw_gbps"]) == pytest.approx(algbw * family.bus_factor(2), rel=1e-3, abs=1e-3)
    assert {r["variant"] for r in rows} == {*variants, coll.XLA}


def test_allgather_benchmark(tmp_path, capsys):
    status, out = run_bench("bench_allgather", tmp_path, capsys)
    assert status == 0, out
    assert "check: push, pull matched the reference at all 2 sizes (checked before timing" in out
    head, rows = read_csv(tmp_path / "bench_allgather.csv")
    assert tuple(head) == coll.CSV_COLUMNS
    assert_measured(rows, coll.ALL_GATHER, ["push", "pull"])


def test_reduce_scatter_benchmark(tmp_path, capsys):
    status, out = run_bench("bench_reduce_scatter", tmp_path, capsys)
    assert status == 0, out
    assert "check: ring matched the reference at all 2 sizes" in out
    head, rows = read_csv(tmp_path / "bench_reduce_scatter.csv")
    assert tuple(head) == coll.CSV_COLUMNS
    assert_measured(rows, coll.REDUCE_SCATTER, ["ring"])


def test_ring_shift_benchmark(tmp_path, capsys):
    status, out = run_bench("bench_ring_shift", tmp_path, capsys)
    assert status == 0, out
    assert "check: put matched the reference at all 2 sizes" in out
    head, rows = read_csv(tmp_path / "bench_ring_shift.csv")
    assert tuple(head) == coll.CSV_COLUMNS
    assert_measured(rows, coll.RING_SHIFT, ["put"])


def test_all_to_all_benchmark(tmp_path, capsys):
    status, out = run_bench("bench_all_to_all", tmp_path, capsys)
    assert status == 0, out
    assert "check: equal matched the reference at all 2 sizes" in out
    assert "check: skewed matched the reference at all 2 sizes" in out
    head, rows = read_csv(tmp_path / "bench_all_to_all.csv")
    assert tuple(head) == coll.CSV_COLUMNS
    assert_measured(rows, coll.ALL_TO_ALL, ["equal"])
    head, rows = read_csv(tmp_path / "bench_all_to_all_skewed.csv")
    assert tuple(head) == coll.CSV_COLUMNS
    ragged_runs = jax.devices()[0].platform != "cpu"  # XLA:CPU has no ragged-all-to-all
    assert_measured(rows, coll.ALL_TO_ALL, ["skewed"], timed_xla=ragged_runs)
    if not ragged_runs:
        assert "note: jax.lax.ragged_all_to_all does not run here" in out


# --- the shared module --------------------------------------------------------------------------
def mesh2() -> jax.sharding.Mesh:
    return jax.make_mesh((2,), ("x",), devices=jax.devices()[:2])


def options(tmp_path: Path, *extra: str):
    import argparse

    ap = argparse.ArgumentParser()
    coll.add_common_options(ap)
    return ap.parse_args([*TINY, "--out-dir", str(tmp_path), "--no-plot", *extra])


def copy_case(mesh, nbytes: int, wrong: bool) -> coll.Case:
    """An 'all-gather' whose kernel is jax.lax.all_gather itself, or, `wrong`, with one element changed."""
    gather = lambda a: jax.lax.all_gather(a, "x", tiled=True)
    bad = lambda a: gather(a).at[3, 1].add(1.0)
    x = coll.random_sharded(mesh, (2 * 4, nbytes // 16), jnp.float32, P("x"), seed=1)
    fn = lambda body: jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("x"), out_specs=P(None), check_vma=False))
    return coll.Case(bytes_per_rank=nbytes, inputs=(x,), ours={"k": fn(bad if wrong else gather)}, xla=fn(gather))


def test_a_wrong_kernel_gets_no_bandwidth_and_fails_the_run(tmp_path, capsys):
    mesh = mesh2()
    plat = jax_platform()
    status = coll.run(coll.ALL_GATHER, lambda nbytes: copy_case(mesh, nbytes, wrong=nbytes == 65536),
                      options(tmp_path), plat, mesh)
    out = capsys.readouterr().out
    assert status == 1
    assert "check FAILED: k at 64 KiB per rank differs from the reference (max |error| 1)" in out
    _, rows = read_csv(tmp_path / "bench_allgather.csv")
    by = {(int(r["bytes_per_rank"]), r["variant"]): r for r in rows}
    assert by[65536, "k"]["ok"] == "0" and by[65536, "k"]["time_s"] == "-" and by[65536, "k"]["busbw_gbps"] == "-"
    assert by[4096, "k"]["ok"] == "1" and float(by[4096, "k"]["busbw_gbps"]) > 0  # the right size still measured
    assert by[65536, coll.XLA]["ok"] == "1" and float(by[65536, coll.XLA]["time_s"]) > 0


def test_a_jax_lax_equivalent_that_does_not_run_is_reported_not_failed(tmp_path, capsys):
    mesh = mesh2()

    def case(nbytes: int) -> coll.Case:
        good = copy_case(mesh, nbytes, wrong=False)

        def unsupported(*_):
            raise NotImplementedError("no such collective on this backend")

        return coll.Case(nbytes, good.inputs, good.ours, xla=unsupported, reference=good.xla)

    status = coll.run(coll.ALL_GATHER, case, options(tmp_path), jax_platform(), mesh)
    out = capsys.readouterr().out
    assert status == 0, out
    assert "note: jax.lax.all_gather does not run here: NotImplementedError: no such collective" in out
    _, rows = read_csv(tmp_path / "bench_allgather.csv")
    assert [r["ok"] for r in rows if r["variant"] == "k"] == ["1", "1"]
    assert [r["ok"] for r in rows if r["variant"] == coll.XLA] == ["", ""]


def test_sizes_and_row_shapes():
    assert coll.parse_sizes("4K,64KiB,1M,1G,4096") == [4096, 65536, 1 << 20, 1 << 30, 4096]
    assert coll.parse_sizes(coll.DEFAULT_SIZES)[0] == 4096 and coll.parse_sizes(coll.DEFAULT_SIZES)[-1] == 1 << 30
    with pytest.raises(Exception, match="size '4X'"):
        coll.parse_size("4X")
    assert coll.row_shape(4096, 2, 8192) == (1, 2048)  # a shard smaller than a row: one shorter row
    assert coll.row_shape(1 << 30, 2, 8192) == (65536, 8192)
    assert coll.row_shape(4096, 2, 8192, rows_multiple=8) == (8, 256)
    assert coll.block_rows(65536, 16384) == 128 and coll.block_rows(4, 16384) == 1


def test_the_plot_is_written_or_its_absence_said(tmp_path):
    rows = [coll.Row(4096, v, "", True, 1e-3, 1.0, 0.5, 1.0) for v in ("k", coll.XLA)]
    said = coll.plot(str(tmp_path / "p.png"), "t", rows, 365.0)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert "matplotlib is not installed" in said and not (tmp_path / "p.png").exists()
    else:
        assert said == f"wrote {tmp_path / 'p.png'}" and (tmp_path / "p.png").stat().st_size > 1000


def jax_platform():
    import jax_tilescale as ts

    return ts.platform.setup()
