"""Generated CUDA source -> device-linked cubin, through nvcc, cached on disk.

The build is the one proven on the GPU machine (shared/reference/nvshmem_ffi), in two steps:

    nvcc -arch=sm_90 -rdc=true -std=c++17 -O3 -lineinfo -cubin k.cu -I$NVSHMEM/include   (relocatable)
    nvcc -arch=sm_90 -dlink --cubin k.rel.cubin -L$NVSHMEM/lib -lnvshmem_device          (device link)

Kernels that do not communicate compile in one step without -rdc (and sm_90a kernels, which
use wgmma, with `-gencode=arch=compute_90a,code=sm_90a`).

The first step compiles device code only (`-cubin` rather than `-c`): the host half of a `-c`
object is never used, and skipping it saves about 5 s per kernel; the linked cubin is
byte-identical. The result is what the FFI handler loads and hands to
`nvshmemx_cumodule_init`.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from ..errors import CompileError
from . import cache
from .toolchain import find_nvcc, find_nvshmem

COMPILE_FLAGS = ("-std=c++17", "-O3", "-lineinfo", "-Xptxas", "-v")
# Relocatable device code: only kernels that call NVSHMEM need it (its device library is linked
# in a second step). Whole-program compilation lets ptxas apply `setmaxnreg` (the Hopper GEMM).
RDC_FLAGS = ("-rdc=true",)
NVCC_TIMEOUT_S = 900
_ARCH = re.compile(r"sm_\d{2,3}[af]?")
_IDENT = re.compile(r"[A-Za-z_]\w*", re.ASCII)
_MAX_ERROR_LINES = 60
_MAX_ERROR_CHARS = 8000


def _run(cmd: list[str], what: str, source: Path) -> str:
    """Runs one nvcc step; returns its stderr (ptxas report, warnings) or raises CompileError."""
    try:
        proc = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=NVCC_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise CompileError(f"nvcc ({what}) ran longer than {NVCC_TIMEOUT_S} s on {source}") from None
    except OSError as e:
        raise CompileError(f"could not run nvcc ({what}) on {source}: {e}") from e
    if proc.returncode != 0:
        log = (proc.stderr + proc.stdout).strip()
        (source.parent / "nvcc.log").write_text(" ".join(cmd) + "\n\n" + log + "\n")
        raise CompileError(
            f"nvcc failed ({what}) on the generated kernel source {source}:\n{_trim(log)}\n"
            f"(full log: {source.parent / 'nvcc.log'})"
        )
    return proc.stderr


def _trim(log: str) -> str:
    lines = [line for line in log.splitlines() if not line.startswith("ptxas info")]
    text = "\n".join(lines[:_MAX_ERROR_LINES])
    if len(lines) > _MAX_ERROR_LINES:
        text += f"\n... ({len(lines) - _MAX_ERROR_LINES} more lines)"
    return text[:_MAX_ERROR_CHARS]


def arch_flags(arch: str) -> list[str]:
    """nvcc's target flags: `sm_90a` (wgmma, setmaxnreg) needs the -gencode form with nvcc 13.0,
    whose `-arch=sm_90a` shorthand also runs a plain sm_90 pass that rejects those instructions."""
    if arch.endswith(("a", "f")):
        num = arch[3:]
        return [f"-gencode=arch=compute_{num},code=sm_{num}"]
    return [f"-arch={arch}"]


def _ptxas_lines(stderr: str) -> str:
    keep = [line for line in stderr.splitlines() if line.startswith("ptxas") or "bytes stack frame" in line]
    return "\n".join(keep) + "\n"


def compile_cubin(module_source: str, *, arch: str = "sm_90", entry: str, nvshmem: bool = True) -> Path:
    """Builds (or finds in the cache) the device-linked cubin of `module_source`.

    `entry` is the kernel's function name (it also names the files of the cache entry).
    `nvshmem=False` builds a kernel that does not communicate without NVSHMEM (no headers, no
    device library), e.g. `CudaModule.uses_nvshmem` false. Returns the cubin's path; raises
    CompileError naming the saved source when nvcc rejects it.
    """
    if not _ARCH.fullmatch(arch):
        raise CompileError(f"arch must look like sm_90 (got {arch!r})")
    if not _IDENT.fullmatch(entry):
        raise CompileError(f"entry must be a C identifier (got {entry!r})")
    nvcc = find_nvcc()
    shm = find_nvshmem() if nvshmem else None
    key = cache.cache_key(
        source=module_source,
        arch=arch,
        entry=entry,
        nvcc=nvcc.version,
        nvshmem=shm.version if shm else None,
        flags=COMPILE_FLAGS + (RDC_FLAGS if nvshmem else ()),
    )
    entry_dir = cache.cache_root() / key
    cubin = entry_dir / f"{entry}.cubin"
    if cache.is_valid(cubin):
        return cubin
    with cache.locked(entry_dir):
        if cache.is_valid(cubin):  # another thread or process built it while we waited
            return cubin
        source = entry_dir / f"{entry}.cu"
        cache.write_atomic(source, module_source.encode())
        build = Path(tempfile.mkdtemp(dir=entry_dir, prefix="build-"))
        try:
            relocatable = build / f"{entry}.rel.cubin"
            linked = build / f"{entry}.cubin"
            include = ["-I", str(shm.include)] if shm else []
            target = arch_flags(arch)
            if shm is None:  # whole program: one step straight to the cubin
                report = _run([str(nvcc.path), *target, *COMPILE_FLAGS, "-cubin", "-o", str(linked), str(source)],
                              "compile", source)
            else:
                report = _run(
                    [str(nvcc.path), *target, *RDC_FLAGS, *COMPILE_FLAGS, "-cubin", *include, "-o", str(relocatable),
                     str(source)],
                    "compile",
                    source,
                )
                link = ["-L", str(shm.lib), "-lnvshmem_device"]
                _run(
                    [str(nvcc.path), *target, "-dlink", "--cubin", str(relocatable), *link, "-o", str(linked)],
                    "device link",
                    source,
                )
            cache.write_atomic(entry_dir / "ptxas.txt", _ptxas_lines(report).encode())
            cache.publish(cubin, linked.read_bytes())
        finally:
            with contextlib.suppress(OSError):
                shutil.rmtree(build)
    return cubin


def ptxas_report(cubin: Path) -> str | None:
    """ptxas's resource report (registers, spills, shared memory) of a cubin built here, if kept."""
    try:
        return (Path(cubin).parent / "ptxas.txt").read_text()
    except OSError:
        return None
