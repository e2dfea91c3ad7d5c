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


def wgmma_name(n: int, ptx_type: str, a_mn_major: bool, b_mn_major: bool, within: int | None = None) -> str:
    """The wrapper's name; `within`: the N of the accumulator it updates a prefix of (`_in{within}`)."""
    k = k_per_instruction(ptx_type)
    name = f"ts_wgmma_m64n{n}k{k}_{ptx_type}_{'m' if a_mn_major else 'k'}{'m' if b_mn_major else 'k'}"
    return name if within is None or within == n else f"{name}_in{within}"


def wgmma_wrapper(n: int, ptx_type: str, a_mn_major: bool, b_mn_major: bool, within: int | None = None) -> str:
    """The device function issuing `wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{t}.{t}`.

    Major-ness of the shared-memory operands (the `tnspA`/`tnspB` immediates): A is K-major when
    stored M x K (T.gemm's default), MN-major when stored K x M (`transpose_A=True`); B is
    MN-major when stored K x N (the default), K-major when stored N x K (`transpose_B=True`).

    `within` (> n): the accumulator is an m64 x `within` fragment whose first n columns the product updates: the
    fragment is within/8 groups of 4 registers, column group by column group, so an n-wide product's registers are
    the first n/2 (gemm_sm90.edge_width: the edge tiles' narrower products)."""
    if n not in WGMMA_N or (within is not None and (within not in WGMMA_N or within < n)):
        raise ValueError(f"wgmma N must be a multiple of 8 in [8, 256] (within one at least as wide), got {n}, "
                         f"{within}")
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
        f"__device__ __forceinline__ void {wgmma_name(n, ptx_type, a_mn_major, b_mn_major, within)}(",
        f"    float (&acc)[{(within or n) // 2}], uint64_t desc_a, uint64_t desc_b, int scale_d) {{",
        "  asm volatile(",
        '      "{\\n.reg .pred p;\\nsetp.ne.b32 p, %' + str(s) + ', 0;\\n"',
        f'      "wgmma.mma_async.sync.aligned.m64n{n}k{k}.f32.{ptx_type}.{ptx_type} "',
        f'      "{{{outs}}}, %{a}, %{b}, {immediates};\\n}}\\n"',
        f"      : {constraints}",
        '      : "l"(desc_a), "l"(desc_b), "r"(scale_d));',
        "}",
    ])
