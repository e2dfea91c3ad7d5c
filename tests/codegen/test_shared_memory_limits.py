"""The shared memory a block may use depends on the GPU: a kernel that fits on Hopper (227 KiB) but
not on an A100 (163 KiB) is refused when generated for sm_80, naming the target, instead of failing
at launch."""

from __future__ import annotations

import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

from jax_tilescale.codegen import generate_cuda
from jax_tilescale.codegen.layout import max_shared_bytes
from jax_tilescale.errors import KernelTraceError

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import gemm as gemm_example

S = jax.ShapeDtypeStruct


@pytest.mark.parametrize(("arch", "kib"), [("sm_80", 163), ("sm_86", 99), ("sm_89", 99), ("sm_90", 227),
                                           ("sm_90a", 227), ("sm_75", 64), ("sm_121", 99),
                                           ("sm_60", 96)])
def test_limit_by_compute_capability(arch: str, kib: int) -> None:
    assert max_shared_bytes(arch) == kib * 1024


def test_a_portable_gemm_that_fits_hopper_but_not_an_a100_is_refused_for_sm_80() -> None:
    # float32 tiles: no tensor-core lowering takes them, so the 128 x 256 float32 accumulator (128 KiB) lives in
    # shared memory beside the tiles (32 + 64 KiB): 224 KiB, within Hopper's 227 and past an A100's 163.
    m, n, k = 1000, 3000, 512
    ir = gemm_example.gemm(m, n, k, jnp.float32, block_m=128, block_n=256, num_stages=1).trace(
        S((m, k), jnp.float32), S((k, n), jnp.float32))
    with pytest.raises(KernelTraceError, match=f"at most {163 * 1024} on sm_80"):
        generate_cuda(ir, "sm_80")
    assert generate_cuda(ir, "sm_90").smem_bytes <= 227 * 1024


def test_an_odd_k_keeps_the_mma_lowering_on_sm_80() -> None:
    # K = 777: rows of A are 1554 bytes, off cp.async's 16-byte grid; the mma.sync lowering copies them by plain
    # loads and keeps the accumulator in registers (it took the portable path, refused here, until 2026-12-05)
    m, n, k = 1000, 3000, 777
    ir = gemm_example.gemm(m, n, k, jnp.bfloat16, block_m=128, block_n=256).trace(S((m, k), jnp.bfloat16),
                                                                                S((k, n), jnp.bfloat16))
    mod = generate_cuda(ir, "sm_80")
    assert "ts_mma_16816_" in mod.source and "ts_copy16_u16(" in mod.source
    assert mod.smem_bytes <= 163 * 1024
