"""tools/chain_time.py on simulated CPU devices (our kernels through the interpreter): each variant's chain is checked
against XLA's before it is timed, and the table has a row per runner with both forms; an unknown switch is refused.
The timing itself means something only on the GPU (`python tools/chain_time.py 4096x4096x14336` there)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.benchmarks import load_bench

ROOT = Path(__file__).resolve().parents[2]


def test_the_chain_is_checked_then_timed_in_both_forms():
    done = subprocess.run([sys.executable, str(ROOT / "tools/chain_time.py"), "64x64x128", "--reps", "16",
                           "--rounds", "1", "--heat", "0", "--variants", "table,table/trig"],
                          capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert "every chain checked against XLA's" in lines[0]
    for name in ("XLA jnp.dot", "ours table", "ours table/trig"):
        row = next((line for line in lines[2:] if line.strip().startswith(name + " ")), None)
        assert row is not None, f"no row for {name}: {done.stdout}"
        assert len(row.split()) == len(name.split()) + 8, row  # ms, TF/s, xXLA, rounds in each of the two forms


def test_an_unknown_switch_is_refused():
    bench = load_bench("bench_gemm")  # parse_entry, which the tool reads its variants with
    with pytest.raises(ValueError, match="unknown switch 'fast'"):
        bench.parse_entry("table/fast")
    cfg, switches = bench.parse_entry("table/trig")
    assert cfg == {} and list(switches.values()) == [True]
