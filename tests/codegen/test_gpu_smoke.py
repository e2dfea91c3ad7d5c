"""Generated kernels on real GPUs, without the JAX runtime (gpu_smoke/run_smoke.py, 2 GPUs).

Marked `gpu`: run on the GPU machine with `python -m pytest -m gpu tests/codegen` (not under the
launcher: the smoke run starts its own process per GPU).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SMOKE = Path(__file__).with_name("gpu_smoke") / "run_smoke.py"


def _gpu_count() -> int:
    smi = shutil.which("nvidia-smi")
    if not smi:
        return 0
    out = subprocess.run([smi, "-L"], check=False, capture_output=True, text=True).stdout
    return sum(line.startswith("GPU ") for line in out.splitlines())


@pytest.mark.gpu
def test_generated_kernels_run_on_two_gpus(tmp_path, require_nvshmem):
    if _gpu_count() < 2:
        pytest.skip("needs 2 GPUs")
    proc = subprocess.run(
        [sys.executable, str(SMOKE), str(tmp_path)], check=False, capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
