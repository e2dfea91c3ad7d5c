"""examples/gemm.py's `gemm(..., autotune=True)`: the candidates gemm_table.tune_candidates names, each built and
checked against jnp.dot in the interpreter before a (scripted) timer ranks them; a wrong candidate refused; the
candidates at the issue's and a decoder's shapes taken by the Hopper plan. Timed on the GPU:
tests/gpu/test_autotune_gpu.py."""

from __future__ import annotations

from dataclasses import replace

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jax_tilescale.codegen import generate_cuda
from jax_tilescale.codegen.gemm_table import (
    FP8_DEFAULT,
    FP8_NARROW,
    FP8_TALL,
    SWAP_MAX_M,
    TUNE_LIMIT,
    fp8_pick,
    fp8_tune_candidates,
    pick_config,
    swapped_config,
    tiles_of,
    tune_candidates,
)
from tests.conftest import load_example

gemm_example = load_example("gemm")


class ScriptedTimer:
    """The candidates' seconds by label, fastest last in the given order unless named in `fast`."""

    def __init__(self, fast: str | None = None):
        self.fast, self.given = fast, []

    def __call__(self, runners, args):
        self.given.append(list(runners))
        labels = list(runners)
        fastest = self.fast if self.fast in runners else labels[-1]
        return {label: [0.5 if label == fastest else 1.0 + i] for i, label in enumerate(labels)}


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TILESCALE_CACHE_DIR", str(tmp_path / "cache"))


SHAPES = [(2048, 2048, 2048), (8192, 8192, 8192), (16384, 8192, 1024), (128, 8192, 8192), (16, 14336, 4096),
          (256, 4096, 14336), (1024, 6144, 4096), (1000, 3000, 777), (512, 4096, 4096)]


@pytest.mark.parametrize("m,n,k", SHAPES)
def test_candidates_start_with_the_table_pick_and_differ(m, n, k):
    found = tune_candidates(m, n, k, jnp.bfloat16, 132)
    assert found[0] == pick_config(m, n, k, jnp.bfloat16, 132)
    assert 2 <= len(found) <= TUNE_LIMIT and len({c.describe() for c in found}) == len(found)


def test_a_few_tokens_time_the_swapped_product_after_the_pick():
    """Up to SWAP_MAX_M rows of A, autotune also times the swapped product (C^T = B^T A^T), unsplit and split in two,
    which the table does not pick before the GPU has timed it."""
    found = tune_candidates(16, 14336, 4096, jnp.bfloat16, 132)
    assert not found[0].swap and found[1:3] == [swapped_config(16), replace(swapped_config(16), split_k=2)]
    assert not any(c.swap for c in tune_candidates(SWAP_MAX_M + 1, 8192, 8192, jnp.bfloat16, 132))


def test_other_element_types_have_one_candidate():
    assert tune_candidates(4096, 4096, 4096, jnp.float32, 132) == [pick_config(4096, 4096, 4096, jnp.float32, 132)]


@pytest.mark.parametrize("m,n,k", SHAPES)
def test_every_candidate_takes_the_hopper_plan(m, n, k):
    """Whatever autotune may time at these shapes builds for an H100/H200 on wgmma (no refusal to time around)."""
    a, b = jax.ShapeDtypeStruct((m, k), jnp.bfloat16), jax.ShapeDtypeStruct((k, n), jnp.bfloat16)
    for cfg in tune_candidates(m, n, k, jnp.bfloat16, 132):
        kern = gemm_example.build(m, n, k, jnp.dtype(jnp.bfloat16), cfg, 132)
        mod = generate_cuda(kern.trace(a, b), "sm_90")
        assert mod.arch == "sm_90a", cfg.describe()


def test_the_timer_decides_among_candidates_that_match_dot():
    m, n, k = 96, 200, 130  # skinny: the skinny estimate's candidates, split ones among them
    labels = [c.describe() for c in tune_candidates(m, n, k, jnp.bfloat16, 132)]
    timer = ScriptedTimer(fast=labels[1])
    tuned = gemm_example.tuned_config(m, n, k, jnp.bfloat16, 132, timer=timer, progress=None)
    assert (tuned.label, tuned.source, tuned.refused) == (labels[1], "timed", {})
    assert timer.given == [labels]  # every candidate ran right in the interpreter
    again = gemm_example.tuned_config(m, n, k, jnp.bfloat16, 132, timer=ScriptedTimer(fast=labels[0]), progress=None)
    assert (again.config, again.source) == (tuned.config, "cache")  # read back, not timed again


def test_a_candidate_whose_product_is_wrong_is_refused(monkeypatch):
    m, n, k = 96, 200, 130
    labels = [c.describe() for c in tune_candidates(m, n, k, jnp.bfloat16, 132)]
    right = gemm_example.build

    def build(m, n, k, dtype, cfg, sms, split_reduce="xla"):
        kern = right(m, n, k, dtype, cfg, sms, split_reduce)
        return (lambda a, b: kern(a, b) * 1.05) if cfg.describe() == labels[0] else kern

    monkeypatch.setattr(gemm_example, "build", build)
    lines = []
    timer = ScriptedTimer(fast=labels[0])
    tuned = gemm_example.tuned_config(m, n, k, jnp.bfloat16, 132, timer=timer, progress=lines.append)
    assert tuned.label != labels[0] and labels[0] not in timer.given[0] and labels[0] in tuned.refused
    assert any(f"{labels[0]}: refused (wrong result: max |C - jnp.dot|" in line for line in lines)


def test_autotune_without_a_gpu_runs_the_table_pick():
    m, n, k = 70, 90, 64
    rng = np.random.default_rng(5)
    a = jnp.asarray(rng.standard_normal((m, k)), jnp.bfloat16)
    b = jnp.asarray(rng.standard_normal((k, n)), jnp.bfloat16)
    got = jax.jit(gemm_example.gemm(m, n, k, jnp.bfloat16, autotune=True))(a, b)
    want = jnp.dot(a, b, preferred_element_type=jnp.float32)
    assert float(jnp.max(jnp.abs(got.astype(jnp.float32) - want))) <= 2e-2 * float(jnp.max(jnp.abs(want)))


def test_autotune_with_configuration_arguments_is_refused():
    with pytest.raises(ValueError, match=r"chooses the configuration itself: leave out block_m, split_k"):
        gemm_example.gemm(128, 128, 128, block_m=64, split_k=2, autotune=True)


def test_gemm_autotune_inside_a_jitted_function():
    """gemm(autotune=True) called while the caller's jit traces: the candidates run and are checked now."""
    m, n, k = 96, 200, 130
    labels = [c.describe() for c in tune_candidates(m, n, k, jnp.bfloat16, 132)]
    timer = ScriptedTimer(fast=labels[2])

    @jax.jit
    def layer(a, b):
        tuned = gemm_example.tuned_config(m, n, k, jnp.bfloat16, 132, timer=timer, progress=None)
        return gemm_example.build(m, n, k, jnp.dtype(jnp.bfloat16), tuned.config, 132)(a, b)

    rng = np.random.default_rng(9)
    a = jnp.asarray(rng.standard_normal((m, k)), jnp.bfloat16)
    b = jnp.asarray(rng.standard_normal((k, n)), jnp.bfloat16)
    got = layer(a, b)
    want = jnp.dot(a, b, preferred_element_type=jnp.float32)
    assert timer.given == [labels]
    assert float(jnp.max(jnp.abs(got.astype(jnp.float32) - want))) <= 2e-2 * float(jnp.max(jnp.abs(want)))


# ---- FP8 (examples/gemm_fp8.py's gemm_fp8(autotune=True): gemm_table.fp8_tune_candidates) ----

fp8_example = load_example("gemm_fp8")
E4M3 = jnp.dtype(jnp.float8_e4m3fn)


@pytest.mark.parametrize("m,n,k", [(16, 4096, 4096), (128, 8192, 8192), (8192, 8192, 8192), (1000, 3000, 777)])
def test_fp8_candidates_start_with_the_default_and_all_take_the_hopper_plan(m, n, k):
    found = fp8_tune_candidates(m, n, k, 132)
    assert found[0] == fp8_pick(m, n, k, 132) and FP8_DEFAULT in found
    assert len({c.describe() for c in found}) == len(found) >= 2
    few = tiles_of(m, n, FP8_DEFAULT) < 132  # under a wave of the default tiles: smaller ones, swapped for tokens
    assert any(c.swap for c in found) == (few and m <= SWAP_MAX_M)
    assert m > SWAP_MAX_M or swapped_config(m, itemsize=1) in found
    assert (FP8_NARROW in found) == few and (FP8_TALL in found) == (not few)
    S = jax.ShapeDtypeStruct
    args = (S((m, k), E4M3), S((n, k), E4M3), S((1,), jnp.float32), S((1,), jnp.float32))
    for cfg in found:
        mod = generate_cuda(fp8_example.build(m, n, k, E4M3, jnp.bfloat16, cfg).trace(*args), "sm_90")
        assert mod.arch == "sm_90a" and not mod.notes, (cfg.describe(), mod.notes)


def test_fp8_timer_decides_among_candidates_that_match_the_dequantised_product():
    m, n, k = 16, 200, 256
    labels = [c.describe() for c in fp8_tune_candidates(m, n, k, 132)]
    assert "16x64x256/9/g1/t128/swap" in labels
    timer = ScriptedTimer(fast="16x64x256/9/g1/t128/swap")
    tuned = fp8_example.tuned_config(m, n, k, E4M3, sms=132, timer=timer, progress=None)
    assert (tuned.label, tuned.source, tuned.refused) == ("16x64x256/9/g1/t128/swap", "timed", {})
    assert timer.given == [labels]  # every candidate ran right in the interpreter
    again = fp8_example.tuned_config(m, n, k, E4M3, sms=132, timer=ScriptedTimer(fast=labels[0]), progress=None)
    assert (again.config, again.source) == (tuned.config, "cache")


def test_fp8_pick_takes_smaller_tiles_where_the_default_ones_make_less_than_a_wave():
    assert fp8_pick(8192, 8192, 8192, 132) == FP8_DEFAULT  # 2048 tiles
    assert fp8_pick(16, 4096, 4096, 132) == swapped_config(16, itemsize=1)  # 64 swapped blocks
    assert fp8_pick(16, 14336, 4096, 132) == FP8_NARROW  # 224 swapped blocks: two waves
    assert fp8_pick(128, 8192, 8192, 132) == FP8_NARROW  # 32 default tiles, too many rows to swap


def test_fp8_autotune_without_a_gpu_runs_the_default_and_refuses_arguments():
    verdict = fp8_example.check(40, 96, 256, autotune=True)
    assert verdict.ok, verdict
    with pytest.raises(ValueError, match=r"chooses the configuration itself: leave out block_m, swap"):
        fp8_example.gemm_fp8(16, 128, 256, E4M3, block_m=16, swap=True, autotune=True)
