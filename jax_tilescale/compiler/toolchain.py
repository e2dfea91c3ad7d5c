"""Finding the tools a kernel build needs: nvcc and NVSHMEM's device headers and library.

Both are looked up on every build (environment variables may change between tests) but the
slow part, asking nvcc for its version, is cached per binary.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ..errors import CompileError

DEFAULT_NVCC = Path("/usr/local/cuda/bin/nvcc")
NVSHMEM_PACKAGE = "nvidia-nvshmem-cu13"
NVSHMEM_PIP_HINT = f"pip install {NVSHMEM_PACKAGE}"
_VERSION_MACROS = ("NVSHMEM_VENDOR_MAJOR_VERSION", "NVSHMEM_VENDOR_MINOR_VERSION", "NVSHMEM_VENDOR_PATCH_VERSION")


@dataclass(frozen=True)
class Nvcc:
    path: Path
    version: str  # the full `nvcc --version` text (part of the cache key)


@dataclass(frozen=True)
class Nvshmem:
    include: Path
    lib: Path
    version: str  # "3.4.5" and the device library's size (part of the cache key)


def find_nvcc() -> Nvcc:
    """nvcc from $TILESCALE_NVCC, else PATH, else /usr/local/cuda/bin/nvcc."""
    env = os.environ.get("TILESCALE_NVCC")
    if env:
        path = Path(env)
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise CompileError(f"TILESCALE_NVCC={env} is not an executable file")
    else:
        found = shutil.which("nvcc")
        path = Path(found) if found else DEFAULT_NVCC
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise CompileError(
                "nvcc (the CUDA compiler) was not found: set TILESCALE_NVCC, put nvcc on PATH, or install the "
                f"CUDA toolkit at {DEFAULT_NVCC.parent.parent}"
            )
    path = path.resolve()
    return Nvcc(path, _nvcc_version(str(path), path.stat().st_mtime_ns))


@functools.lru_cache(maxsize=8)
def _nvcc_version(path: str, mtime_ns: int) -> str:
    try:
        proc = subprocess.run([path, "--version"], check=False, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise CompileError(f"could not run {path} --version: {e}") from e
    if proc.returncode != 0:
        raise CompileError(f"{path} --version failed: {proc.stderr.strip()[-2000:]}")
    return proc.stdout.strip()


def _nvshmem_home() -> tuple[Path, str]:
    """(directory with include/ and lib/, where it came from)."""
    env = os.environ.get("NVSHMEM_HOME")
    if env:
        return Path(env), "NVSHMEM_HOME"
    try:
        spec = importlib.util.find_spec("nvidia.nvshmem")
    except (ImportError, ValueError):
        spec = None
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations:
        raise CompileError(
            f"NVSHMEM was not found: kernels that communicate need its device headers and library. "
            f"Install them with `{NVSHMEM_PIP_HINT}` (or set NVSHMEM_HOME to an NVSHMEM installation)"
        )
    return Path(locations[0]), f"the {NVSHMEM_PACKAGE} package"


def _header_version(include: Path) -> str | None:
    try:
        text = (include / "non_abi" / "nvshmem_version.h").read_text(errors="replace")
    except OSError:
        return None
    parts = []
    for macro in _VERSION_MACROS:
        m = re.search(rf"#define\s+{macro}\s+(\d+)", text)
        if m is None:
            return None
        parts.append(m.group(1))
    return ".".join(parts)


def find_nvshmem() -> Nvshmem:
    """NVSHMEM's include/ and lib/ (with the static device library libnvshmem_device.a)."""
    home, origin = _nvshmem_home()
    include, lib = home / "include", home / "lib"
    if not (include / "nvshmem.h").is_file():
        raise CompileError(f"NVSHMEM from {origin} at {home} has no include/nvshmem.h; reinstall: {NVSHMEM_PIP_HINT}")
    device_lib = lib / "libnvshmem_device.a"
    if not device_lib.is_file():
        raise CompileError(
            f"NVSHMEM from {origin} at {home} has no lib/libnvshmem_device.a (the device library kernels link "
            f"against); reinstall: {NVSHMEM_PIP_HINT}"
        )
    version = _header_version(include)
    if version is None:
        try:
            version = importlib.metadata.version(NVSHMEM_PACKAGE)
        except importlib.metadata.PackageNotFoundError:
            version = "unknown"
    return Nvshmem(include, lib, f"{version}+device{device_lib.stat().st_size}")
