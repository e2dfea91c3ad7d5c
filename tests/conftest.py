"""Test set-up shared by every suite: 8 simulated CPU devices (must precede JAX's backends), a
private temporary directory per session, and loading examples as modules."""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from jax_tilescale.platform import request_cpu_devices

request_cpu_devices(8)

ROOT = Path(__file__).resolve().parent.parent


def _load_script(folder: str, name: str):
    path = ROOT / folder / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"{folder}_{name}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def load_example(name: str):
    """Imports examples/<name>.py as a module (examples are scripts, not a package)."""
    return _load_script("examples", name)


def load_tool(name: str):
    """Imports tools/<name>.py as a module (tools are scripts, not a package)."""
    return _load_script("tools", name)


def _have_toolchain() -> bool:
    from jax_tilescale.compiler.toolchain import find_nvcc, find_nvshmem
    from jax_tilescale.errors import CompileError

    try:
        find_nvcc()
        find_nvshmem()
    except CompileError:
        return False
    return True


def missing_tool(message: str) -> None:
    """A test whose tool (nvcc, NVSHMEM's headers) is missing: skipped here, failed in CI (CI=true), whose
    `.ci/run` installs every tool the tests need, so that a missing one is never a silent pass."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true: {message}", pytrace=False)
    pytest.skip(message)


# Tests that lower a kernel for CUDA on a machine without a GPU: they need the FFI extension (the handler's
# target) and nvcc with NVSHMEM's headers (the kernel is compiled while it is lowered). Marks, not skipif, so
# that a missing one goes through `missing_tool`: skipped here, failed in CI.
needs_extension = pytest.mark.usefixtures("ffi_extension")
needs_toolchain = pytest.mark.usefixtures("cuda_toolchain")


@pytest.fixture(scope="session")
def ffi_extension() -> None:
    if importlib.util.find_spec("jax_tilescale._ffi") is None:
        missing_tool("the FFI extension jax_tilescale._ffi is not built (pip install -e .)")


@pytest.fixture(scope="session")
def cuda_toolchain() -> None:
    if not _have_toolchain():
        missing_tool("nvcc with NVSHMEM's headers is not available")

os.environ.setdefault("JAX_TILESCALE_TESTING", "1")

_SESSION_VARS = ("TMPDIR", "TILESCALE_CACHE_DIR")


@pytest.fixture(scope="session", autouse=True)
def session_temp_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One temporary directory for everything the session would leave in the system's: the kernel
    cache (TILESCALE_CACHE_DIR; fixtures may point it elsewhere), the cache's fallback directories
    (`jax_tilescale-cache-*`), nvcc's and the host compiler's files, and what subprocesses write
    (they inherit TMPDIR). Removed when the session ends. pytest's own tmp_path directories stay
    where pytest keeps them (it prunes old ones itself)."""
    tmp_path_factory.getbasetemp()  # fixed before tempfile's directory moves
    root = Path(tempfile.mkdtemp(prefix="jax_tilescale-tests-"))
    saved_env = {k: os.environ.get(k) for k in _SESSION_VARS}
    saved_tempdir = tempfile.tempdir
    os.environ["TMPDIR"] = str(root)
    os.environ["TILESCALE_CACHE_DIR"] = str(root / "kernel-cache")
    tempfile.tempdir = str(root)
    try:
        yield root
    finally:
        tempfile.tempdir = saved_tempdir
        for key, value in saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        shutil.rmtree(root, ignore_errors=True)
