"""The stage-wait trace (codegen/gemm_sm90_trace.py, tools/stage_trace.py) run on an H100/H200: every tile's
record is there and consistent with itself and with the tensor pipe's rate (a loop cannot beat it), for the
ping-pong and the cooperative forms.

    pytest -q tests/gpu/test_stage_trace_gpu.py      # one GPU
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jax_tilescale.codegen import gemm_sm90
from tests.conftest import load_example, load_tool

gemm_example = load_example("gemm")
stage_trace = load_tool("stage_trace")


@pytest.mark.parametrize("cfg,wgs", [
    (dict(block_m=128, block_n=192, block_k=64, num_stages=4, persistent=True, pingpong=True), 1),
    (dict(block_m=256, block_n=192, block_k=64, num_stages=4), 2),
], ids=["pingpong", "cooperative"])
def test_every_tile_has_a_consistent_trace(monkeypatch, cfg, wgs):
    m, n, k = 2048, 2048, 1024
    monkeypatch.setattr(gemm_sm90, "STAGE_TRACE", True)
    kern = jax.jit(gemm_example.gemm(m, n, k, jnp.dtype("bfloat16"), **cfg))
    ka, kb = jax.random.split(jax.random.key(7))
    a = jax.random.normal(ka, (m, k), jnp.float32).astype(jnp.bfloat16)
    b = jax.random.normal(kb, (k, n), jnp.float32).astype(jnp.bfloat16)
    c = np.asarray(kern(a, b).astype(jnp.float32))
    bm, bn, bk = cfg["block_m"], cfg["block_n"], cfg["block_k"]
    recs = stage_trace.decode(c, m, n, bm, bn, [0] if wgs == 1 else [0, bm // 2])
    tiles = (m // bm) * -(-n // bn)
    assert len(recs) == tiles * wgs
    ksteps, ideal = k // bk, bm * bn * bk // 2048
    sms = gemm_example.device_sm_count()
    for r in recs:
        assert 0.9 * ksteps * ideal <= r["cycles"] < 1000 * ksteps * ideal, r
        assert r["first"] <= r["longest"] <= r["wait"] <= r["cycles"], r
        assert r["waited"] <= ksteps, r
        assert r["mask"] >> ksteps == 0 and bin(r["mask"]).count("1") == r["waited"], r
        assert r["sm"] < sms, r
    assert len({r["sm"] for r in recs}) > 1
    waited_turn = [r["turn"] > 0 for r in recs]
    if cfg.get("pingpong"):  # every tile but a block's first of warpgroup 0 waits for its turn (a barrier: > 0)
        assert len(waited_turn) - sum(waited_turn) <= min(sms, tiles), [r["turn"] for r in recs]
    else:
        assert not any(waited_turn)
    starts = np.array([r["start"] for r in recs], np.int64)
    assert ((starts - starts.min()) % (1 << 32)).max() < 10_000_000  # one product: within 10 ms
