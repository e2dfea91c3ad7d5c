"""Runs the CUDA of a GEMM kernel on the CPU: the generated kernel function, compiled with g++
against shim.h (threads, barriers, cp.async, ldmatrix and mma.sync emulated as PTX defines them),
one std::thread per CUDA thread. It checks the mma.sync lowering's addressing (swizzle, ldmatrix
lanes, fragment layouts, the cp.async ring) bit for bit, without a GPU; it cannot say anything
about speed or about the hardware's memory ordering. Kernels that communicate are not supported.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from jax_tilescale import abi

HERE = Path(__file__).resolve().parent
CUDA_INCLUDE = Path("/usr/local/cuda/include")
_BUILD = Path(tempfile.gettempdir()) / "ts_mma_emulator"


def available() -> str | None:
    """None when the emulator can run here, else why not."""
    if shutil.which("g++") is None:
        return "g++ is not on the PATH"
    if not (CUDA_INCLUDE / "cuda_bf16.h").exists():
        return f"no CUDA headers in {CUDA_INCLUDE}"
    return None


def _kernel_text(source: str) -> str:
    start = source.index('extern "C" __global__')
    return source[start:]


def build(module) -> Path:
    """The emulator binary of a CudaModule (cached by its source)."""
    text = "\n".join([
        abi.header_text(),  # TsLaunchArgs, as the generated kernel and the handler see it
        (HERE / "shim.h").read_text(),
        (HERE.parents[2] / "jax_tilescale" / "codegen" / "tilescale_compute.cuh").read_text(),
        _kernel_text(module.source),
        f"#define TS_EMU_ENTRY {module.entry}",
        (HERE / "main.inc").read_text(),
    ])
    key = hashlib.sha256(text.encode()).hexdigest()[:20]
    binary = _BUILD / key / "emu"
    if not binary.exists():
        binary.parent.mkdir(parents=True, exist_ok=True)
        src = binary.parent / "emu.cpp"
        src.write_text(text)
        cmd = ["g++", "-std=c++20", "-O1", "-pthread", "-w", "-I", str(CUDA_INCLUDE), "-o", str(binary) + ".tmp",
               str(src)]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode:
            raise RuntimeError(f"g++ failed on {src}:\n{proc.stderr[-4000:]}")
        Path(str(binary) + ".tmp").rename(binary)
    return binary


def run(module, inputs: list[np.ndarray], outputs: list[np.ndarray]) -> list[np.ndarray]:
    """Runs the module's kernel on `inputs` with `outputs` as the initial contents of its outputs
    (poison them to see unwritten elements); returns the outputs."""
    binary = build(module)
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for i, arr in enumerate([*inputs, *outputs]):
            path = Path(tmp) / f"buf{i}"
            path.write_bytes(np.ascontiguousarray(arr).tobytes())
            paths.append(str(path))
        gx, gy, gz = module.grid
        cmd = [str(binary), str(module.threads), str(gx), str(gy), str(gz), str(module.smem_bytes), *paths]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=600)
        if proc.returncode:
            raise RuntimeError(f"the emulated kernel failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
        return [np.frombuffer(Path(p).read_bytes(), dtype=o.dtype).reshape(o.shape)
                for p, o in zip(paths[len(inputs):], outputs)]
