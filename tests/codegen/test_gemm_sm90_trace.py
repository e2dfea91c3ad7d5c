"""The stage-wait trace of the Hopper GEMM (codegen/gemm_sm90_trace.py, a diagnostic behind
gemm_sm90.STAGE_TRACE): nothing of it is generated when the switch is off; on, the traced kernels write
every slot of the layout once and build without spills or serialised wgmma; tiles too narrow for the
layout are refused (tests/gpu/test_stage_trace_gpu.py runs the traced kernels)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from jax_tilescale.codegen import gemm_sm90, generate_cuda
from jax_tilescale.codegen import gemm_sm90_trace as trace
from jax_tilescale.compiler import compile_cubin
from tests.codegen.test_compute_codegen import _no_spills
from tests.conftest import load_example

gemm_example = load_example("gemm")
BF16 = jnp.bfloat16
PINGPONG = dict(block_m=128, block_n=192, block_k=64, num_stages=4, persistent=True, pingpong=True)
COOPERATIVE = dict(block_m=256, block_n=192, block_k=64, num_stages=4)


def _source(m, n, k, cfg):
    kern = gemm_example.gemm(m, n, k, jnp.dtype(BF16), num_sms=132, **cfg)
    S = jax.ShapeDtypeStruct
    return generate_cuda(kern.trace(S((m, k), BF16), S((k, n), BF16)), "sm_90")


@pytest.mark.parametrize("cfg", [PINGPONG, COOPERATIVE], ids=["pingpong", "cooperative"])
def test_traced_kernels_build_without_spills_and_only_when_asked(session_cache, require_nvcc, monkeypatch, cfg):
    plain = _source(2048, 2048, 1024, cfg).source
    assert "ts_dg_" not in plain
    monkeypatch.setattr(gemm_sm90, "STAGE_TRACE", True)
    mod = _source(2048, 2048, 1024, cfg)
    # every slot of the layout written once by the warpgroup's first thread, after its last products
    writes = [line for line in mod.source.splitlines() if "= (float)((" in line and "ts_dg" in line]
    assert len(writes) == len({w.split("=")[0].strip() for w in writes}) == trace.SLOTS
    # the ping-pong turn's wait counted around its barrier; none to count in the cooperative form
    timed = "ts_dg_turn_wait = (uint32_t)(clock64() - ts_dg_tt);" in mod.source
    assert timed == cfg.get("pingpong", False)
    if timed:  # the clock read after a sleep on a shared load behind the barrier (bar.sync defers its blocking)
        line = next(x for x in mod.source.splitlines() if "ts_dg_turn_wait = (uint32_t)" in x)
        order = [line.index(s) for s in ("ts_named_sync(", "__nanosleep(*reinterpret_cast<volatile uint32_t*>",
                                          "ts_dg_turn_wait = (uint32_t)(clock64()")]
        assert order == sorted(order), line
    turn = "ts_dg_turn_wait" if timed else "0u"
    assert f"const uint32_t ts_dg_turn = {turn};" in mod.source
    report = _no_spills(compile_cubin(mod.source, arch=mod.arch, entry=mod.entry, nvshmem=False))
    assert "C7510" not in report, report


def test_tiles_too_narrow_for_the_trace_are_refused():
    with pytest.raises(ValueError, match=f"at least {trace.min_columns()} columns"):
        trace.loop_end("ts_acc", trace.min_columns() - 8)




NARROW = dict(block_m=64, block_n=128, block_k=64, num_stages=8, threads=128, group_m=2)


@pytest.mark.parametrize("cfg", [NARROW, PINGPONG], ids=["narrow", "pingpong"])
def test_the_shared_memory_probe_reads_each_stage_again_only_when_asked(session_cache, require_nvcc, monkeypatch,
                                                                         cfg):
    """gemm_sm90_probe.EXTRA_SMEM_READS: each consumer warpgroup loads the stage's A tile N more times after issuing
    its products (16 bytes a load, a whole tile per N), and the kernel still builds without spills."""
    from jax_tilescale.codegen import gemm_sm90_probe

    assert "ts_pa" not in _source(2048, 2048, 1024, cfg).source
    monkeypatch.setattr(gemm_sm90_probe, "EXTRA_SMEM_READS", 2)
    mod = _source(2048, 2048, 1024, cfg)
    consumer = mod.source.split("consumer warpgroups", 1)[1]
    a_stage = cfg["block_m"] * 64 * 2
    loads_per_thread = 2 * a_stage // 16 // 128
    assert f"for (int ts_pr = 0; ts_pr < {loads_per_thread}; ++ts_pr)" in consumer
    assert f"(uint32_t)(ts_s * {a_stage})" in consumer and f"* 16u % {a_stage}u" in consumer
    probe_at = consumer.index("ts_pa")  # after the stage's products are issued, before the wait that releases it
    assert consumer.rindex("ts_wgmma_commit();", 0, probe_at) < probe_at < consumer.index("ts_wgmma_wait<1>", probe_at)
    report = _no_spills(compile_cubin(mod.source, arch=mod.arch, entry=mod.entry, nvshmem=False))
    assert "C7510" not in report, report
