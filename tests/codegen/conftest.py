"""Fixtures of the code-generator tests: a private kernel cache and tool availability."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from jax_tilescale.errors import CompileError
from tests.conftest import missing_tool


def _nvcc_reason() -> str | None:
    from jax_tilescale.compiler.toolchain import find_nvcc

    try:
        find_nvcc()
    except CompileError as e:
        return str(e)
    return None


def _nvshmem_reason() -> str | None:
    from jax_tilescale.compiler.toolchain import find_nvshmem

    try:
        find_nvshmem()
    except CompileError as e:
        return str(e)
    return None


@pytest.fixture(scope="session")
def require_nvcc() -> None:
    reason = _nvcc_reason()
    if reason:
        missing_tool(f"nvcc is not available: {reason}")


@pytest.fixture(scope="session")
def require_nvshmem(require_nvcc) -> None:
    reason = _nvshmem_reason()
    if reason:
        missing_tool(f"NVSHMEM headers/library are not available: {reason}")


@pytest.fixture(scope="session")
def session_cache(tmp_path_factory) -> Path:
    """One kernel cache for the whole session, so kernels compiled by one test serve the next."""
    path = tmp_path_factory.mktemp("ts_cache")
    old = os.environ.get("TILESCALE_CACHE_DIR")
    os.environ["TILESCALE_CACHE_DIR"] = str(path)
    yield path
    if old is None:
        os.environ.pop("TILESCALE_CACHE_DIR", None)
    else:
        os.environ["TILESCALE_CACHE_DIR"] = old


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch) -> Path:
    """An empty cache for one test."""
    path = tmp_path / "cache"
    monkeypatch.setenv("TILESCALE_CACHE_DIR", str(path))
    return path


def cuobjdump() -> str | None:
    return shutil.which("cuobjdump") or next(
        (p for p in ("/usr/local/cuda/bin/cuobjdump",) if os.access(p, os.X_OK)), None
    )
