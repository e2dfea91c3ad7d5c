"""tools/cluster_parts.py and tools/splitk_parts.py on the CPU (the kernels through the interpreter): the whole form
is checked against jnp.dot first, then every part is built and run (the GPU timing itself gives no events here, so
each part's row reads "-"). The figures mean something only on the GPU (benchmarks/NOTES.md)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("tool,parts", [
    ("cluster_parts", "plain,plain/np/g,launch/np,sync,exchange,whole/nodep"),
    ("splitk_parts", "slab,ticket,whole,splitk"),
])
def test_each_part_builds_and_runs_after_the_check(tool, parts):
    done = subprocess.run([sys.executable, str(ROOT / f"tools/{tool}.py"), "--shape", "64x256x256", "--config",
                           "64x128x64/2/g1/t128/s2", "--parts", parts, "--reps", "2", "--heat", "0"],
                          capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    first = done.stdout.splitlines()[0]
    err, scale = map(float, re.search(r"max error (\S+) \(max \|C\| (\S+)\)", first).groups())
    assert err <= 2e-2 * scale, first  # bf16 inputs, float32 sums
    for part in parts.split(","):
        assert re.search(rf"^\s*{re.escape(part)}: ", done.stdout, re.M), done.stdout
