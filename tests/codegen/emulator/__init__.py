"""Runs the CUDA the code generator emits on the CPU: the generated kernel function, compiled with g++ against
shim.h (threads, barriers, cp.async, ldmatrix and mma.sync emulated as PTX defines them, warp shuffles), one
std::thread per CUDA thread, with shim_tile_ops.h (the element-wise statements' intrinsics and atomics) and, for
Hopper kernels, shim_sm90.h (mbarriers, named barriers, TMA loads and stores through the tensor maps the module
asks for, wgmma read through its descriptors, thread-block clusters, whose blocks run at once). It checks the
lowerings' addressing (swizzles, ldmatrix lanes, descriptors, fragment layouts, the rings and their barriers) and
results without a GPU; it cannot say anything about speed or about the hardware's memory ordering. Kernels that
communicate, use global scratch that the handler must zero or inline PTX are not supported (`Unsupported`);
left_zero scratch is checked zero after the grid.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from jax_tilescale import abi
from jax_tilescale.codegen.gemm_sm90_load import TENSOR_MAP_FIELDS

HERE = Path(__file__).resolve().parent
SM90_HEADER = HERE.parents[2] / "jax_tilescale" / "codegen" / "tilescale_sm90.cuh"
DEVICE_HEADER = HERE.parents[2] / "jax_tilescale" / "codegen" / "tilescale_device.cuh"
# index arithmetic with Python's semantics and T.load's checks: the header's own text
DEVICE_ARITHMETIC = ("ts_floordiv", "ts_mod", "ts_min", "ts_max", "ts_bound", "ts_load")
TILE_OPS_HEADER = HERE.parents[2] / "jax_tilescale" / "codegen" / "tilescale_tile_ops.cuh"  # element-wise statements
# tilescale_sm90.cuh's helpers that are plain arithmetic: the emulator runs the header's own text of them
SM90_ARITHMETIC = ("ts_swizzled_chunk_offset", "ts_swizzled_chunk_from_global", "ts_wgmma_desc")
WGMMA_NAME = re.compile(r"\bts_wgmma_m64n(\d+)k(\d+)_(bf16|f16|e4m3|e5m2)_([km])([km])(?:_in(\d+))?\b")
# CUtensorMapDataType (cuda.h) -> bytes of an element: UINT8, UINT16, UINT32, INT32, UINT64, INT64, FLOAT16, FLOAT32,
# FLOAT64, BFLOAT16, FLOAT32_FTZ, TFLOAT32
CU_TENSOR_MAP_DATA_BYTES = {0: 1, 1: 2, 2: 4, 3: 4, 4: 8, 5: 8, 6: 2, 7: 4, 8: 8, 9: 2, 10: 4, 11: 4}
# CUtensorMapSwizzle (cuda.h) -> the swizzle's width in bytes: NONE, 32B, 64B, 128B (the driver's fact, written
# here apart from the code generator's table, which is under test)
CU_TENSOR_MAP_SWIZZLE_BYTES = {0: 0, 1: 32, 2: 64, 3: 128}
WAIT_S = 30  # a barrier wait that lasts this long is a deadlock: the emulated kernel stops and says which barrier
EMU_TYPES = {"bf16": "TS_EMU_BF16", "f16": "TS_EMU_F16", "e4m3": "TS_EMU_E4M3", "e5m2": "TS_EMU_E5M2"}
CUDA_INCLUDE = Path("/usr/local/cuda/include")


def _build_dir() -> Path:
    """Where binaries are cached by source: the temporary directory of the moment (a test session's own, which
    the session removes at its end)."""
    return Path(tempfile.gettempdir()) / "ts_emulator"


def available() -> str | None:
    """None when the emulator can run here, else why not."""
    if shutil.which("g++") is None:
        return "g++ is not on the PATH"
    if not (CUDA_INCLUDE / "cuda_bf16.h").exists():
        return f"no CUDA headers in {CUDA_INCLUDE}"
    return None


def require() -> None:
    """Fails the calling test (skips it outside CI, tests.conftest.missing_tool) where the emulator cannot run."""
    reason = available()
    if reason:
        from tests.conftest import missing_tool

        missing_tool(f"the CPU emulator cannot run: {reason}")


class Unsupported(Exception):
    """The module uses something the emulator does not model (communication, scratch to zero, inline PTX)."""


# The special registers the stage trace (codegen/gemm_sm90_trace.py) reads with inline PTX in the kernel: the
# emulator's nanosecond clock and the block's x index for its SM (a persistent grid has a block per SM)
SPECIAL_REGISTERS = (
    (r'asm volatile\("mov\.u64 %0, %globaltimer;" : "=l"\((\w+)\)\);', r"\1 = ts_emu_globaltimer();"),
    (r'asm volatile\("mov\.u32 %0, %smid;" : "=r"\((\w+)\)\);', r"\1 = blockIdx.x;"),
)


def _kernel_text(source: str) -> str:
    """The kernel (and its tensor-map parameter type), its dynamic shared memory the emulated block's own."""
    start = source.index('extern "C" __global__')
    maps = source.find("struct alignas(64) TsTensorMap")
    text = source[maps if 0 <= maps < start else start:]
    text, found = re.subn(r"extern __shared__[^;]*\bts_smem_raw\[\];",
                          "unsigned char* const ts_smem_raw = ts_emu_smem_base;", text)
    assert found == 1, "the kernel's shared-memory declaration"
    for pattern, replacement in SPECIAL_REGISTERS:
        text = re.sub(pattern, replacement, text)
    if re.search(r"\basm\b", text):
        raise Unsupported(f"inline PTX in the kernel: {re.search(r'asm[^;]*;', text).group(0)[:120]}")
    return text


def _cluster_defines(source: str) -> str:
    dims = re.search(r"__cluster_dims__\((\d+), (\d+), (\d+)\)", source)
    if dims is None:
        return ""
    return "\n".join(f"#define TS_EMU_CLUSTER_{axis} {d}" for axis, d in zip("XYZ", dims.groups()))


# tilescale_compute.cuh's cluster functions compile to nothing on the host: renamed away, shim_sm90.h has the real ones
CLUSTER_FUNCTIONS = ("ts_cluster_rank", "ts_cluster_sync", "ts_cluster_map")


def _header_function(text: str, name: str) -> str:
    """One function of a header, with its template line: from its signature to the `}` closing it."""
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if re.search(rf"\b{name}\(", line) and "__device__" in line)
    if lines[at].rstrip().endswith("}"):  # a one-line function
        return lines[at]
    if at and lines[at - 1].startswith("template"):
        at -= 1
    end = next(i for i in range(at, len(lines)) if lines[i] == "}")
    return "\n".join(lines[at:end + 1])


def _wgmma_forwarders(source: str) -> str:
    """The emulator's definition of each wgmma wrapper the kernel calls (the generated ones issue PTX)."""
    out = []
    for n, k, ptx, a, b, within in sorted(set(WGMMA_NAME.findall(source))):
        name = f"ts_wgmma_m64n{n}k{k}_{ptx}_{a}{b}" + (f"_in{within}" if within else "")
        regs = int(within or n) // 2  # a narrower product updates the first n / 2 of a wider fragment's registers
        out.append(f"inline void {name}(float (&acc)[{regs}], uint64_t da, uint64_t db, int scale_d) {{\n"
                   f"  ts_emu_wgmma_issue(acc, {n}, {k}, {EMU_TYPES[ptx]}, {str(a == 'm').lower()}, "
                   f"{str(b == 'm').lower()}, da, db, scale_d);\n}}")
    return "\n".join(out)


def _tensor_maps(module) -> str:
    """The tensor maps the handler would encode, as the emulator's TsEmuMap, and the kernel's call."""
    fields = list(module.tensor_maps)
    if "TsTensorMaps ts_maps" not in module.source:
        return ""
    maps = [fields[i:i + TENSOR_MAP_FIELDS] for i in range(0, len(fields), TENSOR_MAP_FIELDS)]
    if any(rank != 2 for _, _, rank, *_ in maps):
        raise Unsupported(f"tensor maps of rank other than 2: {maps}")
    rows = ",\n".join(f"  {{{p}, {CU_TENSOR_MAP_DATA_BYTES[dtype]}, {d0}, {d1}, {stride}, {b0}, {b1}, "
                      f"{CU_TENSOR_MAP_SWIZZLE_BYTES[sw]}}}" for p, dtype, _, d0, d1, stride, b0, b1, sw in maps)
    return f"""static TsTensorMaps ts_emu_maps;
static const int64_t ts_emu_map_fields[][8] = {{
{rows}
}};
static void ts_emu_prepare(const std::vector<unsigned char*>& bases) {{
  static_assert(sizeof(TsEmuMap) <= sizeof(TsTensorMap), "TsEmuMap fits a CUtensorMap");
  for (size_t i = 0; i < sizeof ts_emu_map_fields / sizeof ts_emu_map_fields[0]; ++i) {{
    const int64_t* f = ts_emu_map_fields[i];
    const TsEmuMap m{{bases[f[0]], f[1], {{f[2], f[3]}}, f[4], {{f[5], f[6]}}, f[7]}};
    std::memcpy(&ts_emu_maps.m[i], &m, sizeof m);
  }}
}}
#define TS_EMU_PREPARE(bases) ts_emu_prepare(bases)
#define TS_EMU_CALL(args) TS_EMU_ENTRY(args, ts_emu_maps)"""


def _source(module) -> str:
    parts = [
        abi.header_text(),  # TsLaunchArgs, as the generated kernel and the handler see it
        (HERE / "shim.h").read_text(),
        *(f"#define {f} {f}_host" for f in CLUSTER_FUNCTIONS),
        (HERE.parents[2] / "jax_tilescale" / "codegen" / "tilescale_compute.cuh").read_text(),
        *(f"#undef {f}" for f in CLUSTER_FUNCTIONS),
        (HERE / "shim_tile_ops.h").read_text(), TILE_OPS_HEADER.read_text(),
        "#define TS_CHECK_FAILED(where, what, a, limit) ts_fail(where, what, a, limit)",
        "#define TS_DIV_BY_ZERO(where, what, a) ts_fail(where, what, a, 0)",
        *(_header_function(DEVICE_HEADER.read_text(), f) for f in DEVICE_ARITHMETIC),
    ]
    why = [w for w, bad in (("it communicates", module.uses_nvshmem),
                            ("global scratch it does not leave zero", module.scratch_bytes
                             and not module.scratch_left_zero)) if bad]
    if why:
        raise Unsupported(f"the emulator does not model {', '.join(why)}")
    if module.arch.startswith("sm_90"):
        header = SM90_HEADER.read_text()
        parts += [f"#define TS_EMU_WAIT_S {WAIT_S}",
                  (HERE / "shim_sm90.h").read_text(), *(_header_function(header, f) for f in SM90_ARITHMETIC),
                  _wgmma_forwarders(module.source)]
    parts += [_kernel_text(module.source), f"#define TS_EMU_ENTRY {module.entry}",
              f"#define TS_EMU_SCRATCH_BYTES {module.scratch_bytes}", _cluster_defines(module.source)]
    if module.arch.startswith("sm_90"):
        parts.append(_tensor_maps(module))
    parts.append((HERE / "main.inc").read_text())
    return "\n".join(parts)


def build(module) -> Path:
    """The emulator binary of a CudaModule (cached by its source)."""
    text = _source(module)
    key = hashlib.sha256(text.encode()).hexdigest()[:20]
    binary = _build_dir() / key / "emu"
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
