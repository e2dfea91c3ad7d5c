"""Two accumulator chains where a consumer warpgroup holds a single m64 slab (codegen/gemm_sm90_chains.py): the
stage's even wgmma instructions accumulate into the fragment, the odd ones into a second array that starts from zero
in every run of the loop and is added to the fragment once its last products are done. Where it applies, where it
does not, how each start of the accumulator reaches the odd chain, and that the kernels build without spills.
(The products themselves are checked on the GPU: tests/gpu/test_gemm_paths_gpu.py.)"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jax_tilescale.codegen import gemm_sm90_chains, generate_cuda
from jax_tilescale.compiler import compile_cubin
from tests.codegen.kernels import chained_gemm
from tests.codegen.test_compute_codegen import _no_spills
from tests.conftest import load_example

gemm_example = load_example("gemm")
BF16 = jnp.bfloat16
S = jax.ShapeDtypeStruct
NARROW = dict(block_m=64, block_n=128, block_k=64, num_stages=8, threads=128, group_m=2)


def _gemm_module(m, n, k, **cfg):
    kern = gemm_example.gemm(m, n, k, jnp.dtype(BF16), **cfg)
    return generate_cuda(kern.trace(S((m, k), BF16), S((k, n), BF16)), "sm_90")


def _consumer_loop(source: str) -> str:
    consumer = source.split("consumer warpgroups", 1)[1]
    return consumer[consumer.index("ts_mbar_wait(&ts_full0"):]


def _targets(loop: str) -> list[tuple[str, str]]:
    """(accumulator, scale-d) of each wgmma call of the loop's body, in issue order."""
    body = loop.split("ts_wgmma_commit();", 1)[0]
    return re.findall(r"ts_wgmma_m64n\d+k\d+_\w+\((ts_acc_\w+)\[0\], [^,]+, [^,]+, ([^;]+)\);", body)


def test_a_single_slab_alternates_two_chains_and_adds_them_after_the_loop():
    mod = _gemm_module(128, 8192, 8192, **NARROW)  # the table's pick there (gemm_table.NARROW)
    assert mod.arch == "sm_90a" and not mod.notes, mod.notes
    loop = _consumer_loop(mod.source)
    assert _targets(loop) == [("ts_acc_C_f", "(ts_i0 > 0)"), ("ts_acc_C_f_odd", "(ts_i0 > 0)"),
                              ("ts_acc_C_f", "1"), ("ts_acc_C_f_odd", "1")]
    assert "float ts_acc_C_f_odd[1][64];" in mod.source
    after = loop.split("ts_wgmma_wait<0>();", 1)[1]
    total = "ts_acc_C_f[ts_m][ts_r] += ts_acc_C_f_odd[ts_m][ts_r];"
    assert total in after and after.index(total) < after.index("copy(C_f")  # summed before the epilogue reads it
    # both arrays fenced wherever the accumulator is: the compiler must not move either across the async products
    assert loop.count("ts_fence_regs(ts_acc_C_f_odd[ts_m]);") == loop.count("ts_fence_regs(ts_acc_C_f[ts_m]);") == 4


@pytest.mark.parametrize("cfg", [
    dict(block_m=128, block_n=256),  # two consumer warpgroups of one m64n256 slab each: a second array would not fit
    dict(block_m=128, block_n=128, block_k=64, num_stages=6, threads=128),  # two slabs: two chains already
    dict(block_m=64, block_n=256, block_k=64, num_stages=5, threads=128, group_m=2),  # m64n256: no room
])
def test_no_second_chain_where_the_warpgroup_has_one_already_or_no_room(cfg):
    mod = _gemm_module(1024, 1024, 1024, **cfg)
    assert mod.arch == "sm_90a" and "_odd" not in mod.source


def test_the_switch_turns_the_second_chain_off(monkeypatch):
    monkeypatch.setattr(gemm_sm90_chains, "SPLIT_CHAINS", False)
    mod = _gemm_module(128, 8192, 8192, **NARROW)
    assert "_odd" not in mod.source
    assert {acc for acc, _ in _targets(_consumer_loop(mod.source))} == {"ts_acc_C_f"}


@pytest.mark.parametrize("start,scales", [
    ("clear", ["(ts_i0 > 0)", "(ts_i0 > 0)", "1", "1"]),  # the clear folded into the first products: both start
    ("fill", ["1", "(ts_i0 > 0)", "1", "1"]),  # the fragment keeps its fill; the odd chain still starts from zero
    ("each", ["0", "0", "1", "1"]),  # clear_accum: both chains overwrite at every stage (the sum: the last stage)
])
def test_every_start_of_the_accumulator_reaches_the_odd_chain(start, scales):
    kern = chained_gemm(128, 256, 512, start)
    mod = generate_cuda(kern.trace(S((128, 512), BF16), S((512, 256), BF16)), "sm_90")
    assert mod.arch == "sm_90a" and not mod.notes, mod.notes
    assert [scale for _, scale in _targets(_consumer_loop(mod.source))] == scales


@pytest.mark.parametrize("m,n,k,cfg", [
    (128, 8192, 8192, NARROW),
    (1000, 3000, 777, NARROW),  # A thread-copied, C ragged
    # the chains restart at every tile of a persistent tile loop
    (300, 200, 256, dict(block_m=64, block_n=128, threads=128, persistent=True, num_sms=3)),
])
def test_two_chains_build_without_spills(session_cache, require_nvcc, m, n, k, cfg):
    mod = _gemm_module(m, n, k, **cfg)
    assert "_odd" in mod.source
    report = _no_spills(compile_cubin(mod.source, arch=mod.arch, entry=mod.entry, nvshmem=False))
    assert "C7510" not in report, report  # no call between the wgmma instructions


@pytest.mark.parametrize("start", ["clear", "fill", "each"])
def test_the_chain_kernels_compute_what_they_say_in_the_interpreter(start):
    """tests/codegen/kernels.chained_gemm (which the GPU test runs) against numpy: the reference the GPU test uses."""
    m, n, k = 64, 128, 256
    rng = np.random.default_rng(3)
    a = rng.standard_normal((m, k)).astype(jnp.bfloat16)
    b = rng.standard_normal((k, n)).astype(jnp.bfloat16)
    got = np.asarray(jax.jit(chained_gemm(m, n, k, start))(a, b), np.float64)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    want = a64[:, -64:] @ b64[-64:] if start == "each" else a64 @ b64 + (0.5 if start == "fill" else 0.0)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
