"""The per-thread example (issue 6): a seed-style kernel with `if tx < 4:` puts with signals and an
`if tx == 0:` wait, in the interpreter on 2, 4 and 8 CPU devices, against jax.lax.ppermute on
random data (its CUDA is built in tests/codegen/test_control_nvcc.py)."""

from __future__ import annotations

import jax
import pytest

from tests.conftest import load_example

thread_signal = load_example("primitives/thread_signal")


@pytest.mark.parametrize("npes", [2, 4, 8])
def test_thread_signal_matches_ppermute(npes: int) -> None:
    mesh = jax.make_mesh((npes,), ("x",), devices=jax.devices()[:npes])
    assert thread_signal.check(mesh, m=64, n=32, dtype="float32", seed=npes)

