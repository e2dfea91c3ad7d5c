"""The README's kernel program runs as printed (pasted into a file, on a machine without GPU), so
that it cannot rot."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT


def readme_program() -> str:
    """The first python code block under the README's "## A kernel" heading."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index("\n## A kernel\n"):]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, "README: no python code block under '## A kernel'"
    return match.group(1)


def test_the_readme_program_runs_as_printed(tmp_path: Path) -> None:
    program = tmp_path / "readme_kernel.py"
    program.write_text(readme_program())
    env = dict(os.environ)
    env.pop("XLA_FLAGS", None)  # as on a fresh shell: the program chooses its devices itself
    proc = subprocess.run([sys.executable, str(program)], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines() == [
        "4 simulated CPU devices, kernels run by the jax_tilescale interpreter (no GPU)",
        "all-gathered (4096, 512) on 4 devices: equal to the input",
    ], proc.stdout + proc.stderr
