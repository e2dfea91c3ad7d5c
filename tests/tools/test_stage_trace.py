"""tools/stage_trace.py where no GPU is: the decoder reads back values written in the layout of
codegen/gemm_sm90_trace.py by an encoder of the test's own, through a bfloat16 output, and the summary
counts what the records hold (tests/codegen/test_gemm_sm90_trace.py builds the traced kernels;
tests/gpu/test_stage_trace_gpu.py runs them)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from jax_tilescale.codegen import gemm_sm90_trace as trace
from tests.conftest import load_tool

stage_trace = load_tool("stage_trace")


def _encode(out, row0, col0, values):
    """The layout written the generated code's way (digits low first, registers in wgmma's m64nN order:
    register r of thread 0 at row 8 * ((r // 2) % 2), column (r // 4) * 8 + r % 2), by hand."""
    r = 0
    for f in trace.FIELDS:
        for d in range(f.digits):
            row, col = 8 * ((r // 2) % 2), (r // 4) * 8 + r % 2
            out[row0 + row, col0 + col] = (values[f.name] >> (8 * d)) & 255
            r += 1


def test_decode_reads_back_every_field_of_every_tile_and_warpgroup():
    tool = stage_trace
    rng = np.random.default_rng()
    m, n, bm, bn = 512, 400, 256, 192  # the last tile column (384..575) is clipped: no trace there
    c = rng.normal(size=(m, n)).astype(np.float32) * 1000  # a product where no trace is
    truth = {}
    for tm in range(2):
        for tn in range(2):
            for wg, r0 in enumerate((0, 128)):
                values = {f.name: int(rng.integers(0, 256 ** f.digits)) for f in trace.FIELDS}
                _encode(c, tm * bm + r0, tn * bn, values)
                truth[(tm, tn, wg)] = values
    c = np.asarray(jnp.asarray(c, jnp.bfloat16).astype(jnp.float32))  # through the output's bfloat16: digits are exact
    recs = tool.decode(c, m, n, bm, bn, [0, 128])
    assert {(r["tm"], r["tn"], r["wg"]) for r in recs} == set(truth)
    for r in recs:
        assert {f.name: r[f.name] for f in trace.FIELDS} == truth[(r["tm"], r["tn"], r["wg"])]


def test_summary_counts_what_the_records_hold():
    tool = stage_trace
    # two SMs at 1.5 GHz, two loops each: SM 0's second starts 500 cycles after its first ends, SM 1's 100
    # cycles before (an overlap); the clocks wrap past 2^32 on SM 1
    recs = [dict(tm=0, tn=j, wg=0, wave=j // 2, wait=100 * (j + 1), longest=50, waited=j, first=10,
                 mask=0b101, start=1000 * j, cycles=1000, sm=j % 2, ns=800 + 100 * j, turn=0) for j in range(4)]
    for r, (clock, ns) in zip(recs, [(10_000, 0), (2**32 - 600, 100), (11_500, 1000), (300, 700)]):
        r["clock"], r["start"] = clock, ns
    lines = tool.summarize(recs, ksteps=4, ideal=200, persistent=True)
    text = "\n".join(lines)
    assert "x1.250" in text  # 1000 cycles against 4 x 200
    assert "mean 250" in text  # the waits 100..400
    assert "k-step j % 32: 0:4 1:0 2:4 3:0" in text
    assert "by wave (mean wait / mean loop cycles): 0:150/1000 1:350/1000" in text
    assert "loop time (%globaltimer): median 0.95 us" in text  # 800..1100 ns
    assert "median 1.056 GHz" in text  # 1000 cycles over 800, 900, 1000, 1100 ns: (1.111 + 1.0) / 2
    assert "wait per SM: min 400, median 500, max 600 (2 SMs)" in text
    assert "SM clock (clock64 / globaltimer): median 1.500 GHz" in text
    assert "next's start on its SM: median 200, p10 -40, p90 440, max 500 (2 gaps)" in text
    assert "median 0.926, min 0.800" in text  # 2000 cycles of loops over 2500 on SM 0, over 1900 on SM 1
    assert "turn waits" not in text  # no ping-pong: no turn was waited for
    for r, turn in zip(recs, (0, 0, 120, 280)):  # ping-pong: each warpgroup's first tile waits for no turn
        r["turn"] = turn
    text = "\n".join(tool.summarize(recs, ksteps=4, ideal=200, persistent=True))
    assert "turn waits before a loop (ping-pong): mean 100 cycles, median 60, p90 232, max 280 (10.0% of loop" in text


def test_each_consumer_warpgroup_has_its_record_row():
    """One consumer warpgroup (128 threads, the skinny shapes' 64x128 tiles) writes one record per tile: reading a
    second one at row bm / 2 decoded the product's values as a trace."""
    assert stage_trace.slab_rows(64, 128, False) == [0]
    assert stage_trace.slab_rows(256, 256, False) == [0, 128]
    assert stage_trace.slab_rows(128, 256, True) == [0]


def test_launch_timeline_puts_consecutive_launches_on_one_axis():
    """Two launches on two SMs: launch 0's loops span 0-5 us (SM 1 ends last, with two tiles), launch 1 starts 3 us
    after them; %globaltimer's low 32 bits wrap between the two launches."""
    base = 2**32 - 6_000  # ns: launch 1 starts past the wrap

    def rec(sm, start_ns, ns, wg=0):  # each loop 3,000 cycles, 2 k of them stage waits and 500 the turn's
        return dict(tm=0, tn=0, wg=wg, sm=sm, start=(base + start_ns) % (1 << 32), ns=ns, cycles=3_000, wait=2_000,
                    turn=500)

    launch0 = [rec(0, 0, 2_000), rec(1, 500, 2_000), rec(1, 2_600, 2_400), rec(1, 2_600, 9_999, wg=1)]
    launch1 = [rec(0, 8_000, 2_000), rec(1, 8_200, 2_000)]
    lines = stage_trace.launch_timeline([launch0, launch1])
    assert lines[0].startswith("launch 0: loops 0.00-5.00 us (5.00); SMs' first loops start within 0.25 (median) "
                               "/ 0.50 (last) us; last loops end 1.50 us after the median SM's (SM 1, 2 tiles); "
                               "tiles per SM 1-2 (2 SMs); loops median 3000 cycles, 2.00 us at 1.500 GHz, stage "
                               "waits 2000, turn waits 500"), lines[0]
    assert lines[1].startswith("launch 1: loops 8.00-10.20 us (2.20, 3.00 us after the last launch's loops)"), lines[1]
    assert lines[2] == "launches: loops' span median 3.60 us, between launches median 3.00 us (min 3.00, max 3.00)"


def test_launch_timeline_warns_when_the_host_left_gaps():
    """Launches 100 us apart did not run back to back (the host lagged, the GPU cooled): the timeline says so, and
    says nothing where they ran 3 us apart (the test above: three lines, no warning)."""
    def rec(sm, start_ns):
        return dict(tm=0, tn=0, wg=0, sm=sm, start=start_ns, ns=2_000, cycles=3_000, wait=0, turn=0)

    launches = [[rec(0, t), rec(1, t)] for t in (0, 102_000, 204_000)]
    lines = stage_trace.launch_timeline(launches)
    assert lines[-2].startswith("launches: loops' span median 2.00 us, between launches median 100.00 us")
    assert lines[-1].startswith("WARNING: the launches were not back to back (median 100 us between them"), lines[-1]
