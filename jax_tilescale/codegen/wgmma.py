"""Text of the Hopper warpgroup MMA (`wgmma.mma_async`, sm_90a) wrappers the GEMM lowering calls.

One wrapper per (N, input type): `ts_wgmma_m64n{N}k16_{ab}(float (&acc)[N/2], uint64_t desc_a,
uint64_t desc_b, int scale_d)` issues one m64 x N x k16 product of two shared-memory operands
described by wgmma matrix descriptors (A K-major, B K-major or MN-major per the `tnspB` immediate).
The accumulator fragment follows PTX's m64nNk16 f32 layout (see `fragments.py`). Generated text,
because the instruction takes N/2 register operands one by one.
"""

from __future__ import annotations

import numpy as np

# PTX spelling of the input types wgmma takes from shared memory with fp32 accumulation.
WGMMA_INPUT_TYPES = {np.dtype("float16"): "f16"}
try:  # bfloat16 comes from ml_dtypes (a jax dependency)
    import ml_dtypes

    WGMMA_INPUT_TYPES[np.dtype(ml_dtypes.bfloat16)] = "bf16"
except ImportError:  # pragma: no cover
    pass

# N values the instruction allows for 16-bit inputs: multiples of 8 up to 256.
WGMMA_N = tuple(range(8, 257, 8))


def wgmma_name(n: int, ptx_type: str, a_mn_major: bool, b_mn_major: bool) -> str:
    return f"ts_wgmma_m64n{n}k16_{ptx_type}_{'m' if a_mn_major else 'k'}{'m' if b_mn_major else 'k'}"


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
    tnsp_a, tnsp_b = int(a_mn_major), int(b_mn_major)
    return "\n".join([
        f"__device__ __forceinline__ void {wgmma_name(n, ptx_type, a_mn_major, b_mn_major)}(",
        f"    float (&acc)[{regs}], uint64_t desc_a, uint64_t desc_b, int scale_d) {{",
        "  asm volatile(",
        '      "{\\n.reg .pred p;\\nsetp.ne.b32 p, %' + str(s) + ', 0;\\n"',
        f'      "wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ptx_type}.{ptx_type} "',
        f'      "{{{outs}}}, %{a}, %{b}, p, 1, 1, {tnsp_a}, {tnsp_b};\\n}}\\n"',
        f"      : {constraints}",
        '      : "l"(desc_a), "l"(desc_b), "r"(scale_d));',
        "}",
    ])
