"""Text of the Hopper warpgroup MMA (`wgmma.mma_async`, sm_90a) wrappers the GEMM lowering calls.

One wrapper per (N, input type): `ts_wgmma_m64n{N}k{16|32}_{ab}(float (&acc)[N/2], uint64_t desc_a,
uint64_t desc_b, int scale_d)` issues one m64 x N x k16 product of two shared-memory operands
described by wgmma matrix descriptors (A K-major, B K-major or MN-major per the `tnspB` immediate).
The accumulator fragment follows PTX's m64nNk16 f32 layout (see `fragments.py`). Generated text,
because the instruction takes N/2 register operands one by one.
"""

from __future__ import annotations

import ml_dtypes  # bfloat16 and the float8 types (a jax dependency)
import numpy as np

# PTX spelling of the input types wgmma takes from shared memory with fp32 accumulation.
WGMMA_INPUT_TYPES = {np.dtype("float16"): "f16", np.dtype(ml_dtypes.bfloat16): "bf16",
                     np.dtype(ml_dtypes.float8_e4m3fn): "e4m3", np.dtype(ml_dtypes.float8_e5m2): "e5m2"}
FP8_TYPES = ("e4m3", "e5m2")  # k32 instructions, both operands K-major (no transpose immediates)

# CUtensorMapDataType of the tiles TMA loads for wgmma (FLOAT16 = 6, BFLOAT16 = 9; float8 moves as
# UINT8 = 0, TMA only copies bytes).
TMA_DTYPE = {dt: {"f16": 6, "bf16": 9, "e4m3": 0, "e5m2": 0}[ptx] for dt, ptx in WGMMA_INPUT_TYPES.items()}


def k_per_instruction(ptx_type: str) -> int:
    """K of one wgmma: 32 bytes of each operand row (k16 for 16-bit types, k32 for float8)."""
    return 32 if ptx_type in FP8_TYPES else 16

# N values the instruction allows for 16-bit inputs: multiples of 8 up to 256.
WGMMA_N = tuple(range(8, 257, 8))


def wgmma_name(n: int, ptx_type: str, a_mn_major: bool, b_mn_major: bool) -> str:
    k = k_per_instruction(ptx_type)
    return f"ts_wgmma_m64n{n}k{k}_{ptx_type}_{'m' if a_mn_major else 'k'}{'m' if b_mn_major else 'k'}"


def wgmma_wrapper(n: int, ptx_type: str, a_mn_major: bool, b_mn_major: bool) -> str:
    """The device function issuing `wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{t}.{t}`.

    Major-ness of the shared-memory operands (the `tnspA`/`tnspB` immediates): A is K-major when
    stored M x K (T.gemm's default), MN-major when stored K x M (`transpose_A=True`); B is
    MN-major when stored K x N (the default), K-major when stored N x K (`transpose_B=True`)."""
    if n not in WGMMA_N:
        raise ValueError(f"wgmma N must be a multiple of 8 in [8, 256], got {n}")
    regs = n // 2
    outs = ", ".join(f"%{i}" for i in range(regs))
    a, b, s = regs, regs + 1, regs + 2
    constraints = ", ".join(f'"+f"(acc[{i}])' for i in range(regs))
    k = k_per_instruction(ptx_type)
    if ptx_type in FP8_TYPES:
        if a_mn_major or b_mn_major:
            raise ValueError("float8 wgmma reads both operands K-major")
        immediates = "p, 1, 1"
    else:
        immediates = f"p, 1, 1, {int(a_mn_major)}, {int(b_mn_major)}"
    return "\n".join([
        f"__device__ __forceinline__ void {wgmma_name(n, ptx_type, a_mn_major, b_mn_major)}(",
        f"    float (&acc)[{regs}], uint64_t desc_a, uint64_t desc_b, int scale_d) {{",
        "  asm volatile(",
        '      "{\\n.reg .pred p;\\nsetp.ne.b32 p, %' + str(s) + ', 0;\\n"',
        f'      "wgmma.mma_async.sync.aligned.m64n{n}k{k}.f32.{ptx_type}.{ptx_type} "',
        f'      "{{{outs}}}, %{a}, %{b}, {immediates};\\n}}\\n"',
        f"      : {constraints}",
        '      : "l"(desc_a), "l"(desc_b), "r"(scale_d));',
        "}",
    ])
