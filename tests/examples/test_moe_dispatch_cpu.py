"""examples/moe_dispatch.py (token counts exchanged on the device, then a dispatch with run-time
sizes) on 2, 4 and 8 simulated CPU devices through the interpreter, on random tokens and skewed
routings; plus a check against a second, sort-based reference written independently of the
example's."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import jax_tilescale as ts
from tests.conftest import load_example

moe = load_example("moe_dispatch")


def mesh_of(n: int) -> jax.sharding.Mesh:
    return jax.make_mesh((n,), ("x",), devices=jax.devices()[:n])


@pytest.mark.parametrize("npes", [2, 4, 8])
@pytest.mark.parametrize("experts_per_pe,dtype", [(2, "bfloat16"), (1, "float32"), (3, "float16")])
def test_moe_dispatch_matches_the_reference(npes: int, experts_per_pe: int, dtype: str) -> None:
    assert moe.check(mesh_of(npes), tokens=32, hidden=32, experts_per_pe=experts_per_pe, dtype=dtype,
                     seed=npes + experts_per_pe)


def test_skewed_counts_have_empty_experts_and_one_full_segment() -> None:
    rng = np.random.default_rng(3)
    counts = moe.skewed_counts(rng, 4, 8, 64)
    assert counts.shape == (4, 8) and np.all(counts.sum(axis=1) == 64)
    assert np.all(counts[:, 0] == 0)  # an expert nobody routes to
    assert counts[0, -1] == 64 and not counts[0, :-1].any()  # one PE sends everything to one expert
    assert (counts == 0).sum() > 8  # more empty segments than those planted


def sorted_reference(x: np.ndarray, counts: np.ndarray, experts_per_pe: int) -> list[np.ndarray]:
    """Per receiver, its tokens: every token labelled (expert, source PE, row), those of its experts
    stably sorted by expert then source PE."""
    npes = x.shape[0]
    labels = [(e, p, r) for p in range(npes) for r, e in enumerate(np.repeat(np.arange(counts.shape[1]), counts[p]))]
    out = []
    for q in range(npes):
        mine = sorted((lab for lab in labels if lab[0] // experts_per_pe == q), key=lambda lab: (lab[0], lab[1]))
        out.append(np.array([x[p, r] for _, p, r in mine]).reshape(len(mine), -1))
    return out


@pytest.mark.parametrize("npes", [2, 8])
def test_moe_dispatch_against_a_sort_based_reference(npes: int) -> None:
    tokens, hidden, per_pe = 24, 16, 2
    mesh = mesh_of(npes)
    rng = np.random.default_rng(11 + npes)
    counts = moe.skewed_counts(rng, npes, npes * per_pe, tokens)
    x = rng.standard_normal((npes * tokens, hidden)).astype(np.float32)
    f = moe.dispatch_fn(mesh, tokens, hidden, per_pe, np.dtype(np.float32))
    recv, recv_counts = f(ts.testing.place(x, mesh, jax.sharding.PartitionSpec("x")),
                          ts.testing.place(counts.reshape(-1), mesh, jax.sharding.PartitionSpec("x")))
    recv = np.asarray(recv).reshape(npes, npes * tokens, hidden)
    recv_counts = np.asarray(recv_counts).reshape(npes, npes, per_pe)
    for q, want in enumerate(sorted_reference(x.reshape(npes, tokens, hidden), counts, per_pe)):
        np.testing.assert_array_equal(recv[q, :len(want)], want)
        assert not recv[q, len(want):].any()  # the rest of the capacity stays zero
        np.testing.assert_array_equal(recv_counts[q], counts[:, q * per_pe:(q + 1) * per_pe])
