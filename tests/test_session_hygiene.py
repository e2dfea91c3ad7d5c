"""A test session writes its temporary files (kernel cache, the cache's fallback directories,
compilers' files) into one directory of its own and removes it at the end (tests/conftest.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

from jax_tilescale.compiler import cache
from tests.conftest import ROOT


def test_temporary_files_go_to_the_session_directory(session_temp_dir: Path, tmp_path_factory) -> None:
    assert Path(tempfile.gettempdir()) == session_temp_dir
    assert os.environ["TMPDIR"] == str(session_temp_dir)
    # the session's kernel cache, or one a fixture chose (tests/codegen's lives in pytest's tmp_path)
    kernel_cache = Path(os.environ["TILESCALE_CACHE_DIR"])
    assert session_temp_dir in kernel_cache.parents or tmp_path_factory.getbasetemp() in kernel_cache.parents
    # what left /tmp/jax_tilescale-cache-* behind after every run: the unwritable-cache fallback
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        fallback = cache._fallback_root("/nonexistent/for-this-test")
    cache._fallback_root.cache_clear()
    assert fallback.parent == session_temp_dir and fallback.name.startswith("jax_tilescale-cache-")
    # the CPU emulator's binaries (tests/codegen/emulator), built during the session, not at import
    from tests.codegen import emulator

    assert emulator._build_dir().parent == session_temp_dir
    child = subprocess.run([sys.executable, "-c", "import tempfile; print(tempfile.gettempdir())"],
                           capture_output=True, text=True, check=True)
    assert Path(child.stdout.strip()) == session_temp_dir


def test_a_session_leaves_nothing_in_the_temp_directory(tmp_path: Path) -> None:
    system_tmp = tmp_path / "system-tmp"
    system_tmp.mkdir()
    env = dict(os.environ, TMPDIR=str(system_tmp))
    env.pop("XLA_FLAGS", None)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"{__file__}::"
         "test_temporary_files_go_to_the_session_directory"],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=300,
    )
    assert proc.returncode == 0 and "1 passed" in proc.stdout, proc.stdout + proc.stderr
    left = sorted(p.name for p in system_tmp.iterdir())
    assert all(name.startswith("pytest-of-") for name in left), left  # pytest keeps (and prunes) its own
