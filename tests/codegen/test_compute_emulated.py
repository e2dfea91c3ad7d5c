"""The element-wise and reduction statements' generated CUDA run on the CPU emulator (tests/codegen/emulator), for
sm_90 and sm_80: the value-condition kernels of the CPU and GPU suites (tests/compute/value_if_kernels.py: if/elif/
else on element values, conditional expressions, block-level conditions, atomics under conditions, bool masks) and
examples/softmax.py, against their numpy references: integers exactly, floats to about an ulp (the host's exp and
the GPU's differ there)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jax_tilescale.codegen import generate_cuda
from tests.codegen import emulator
from tests.codegen.gemm_cases import np_dtype
from tests.compute import value_if_kernels
from tests.conftest import load_example

softmax = load_example("softmax")
CASES = value_if_kernels.all_cases()
ARCHS = ["sm_90", "sm_80"]


@pytest.fixture(autouse=True)
def _emulator():
    emulator.require()


def _run(kernel, inputs: list[np.ndarray], arch: str) -> list[np.ndarray]:
    ir = kernel.trace(*(jax.ShapeDtypeStruct(x.shape, x.dtype) for x in inputs))
    mod = generate_cuda(ir, arch)
    poison = [np.full(o.shape, np.nan if np_dtype(o.dtype).kind == "f" else -123, np_dtype(o.dtype))
              for o in ir.outputs]
    return emulator.run(mod, inputs, poison)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_value_condition_kernels_compute_their_reference(name, arch):
    case = CASES[name]
    got = _run(case.kernel, case.inputs, arch)
    assert len(got) == len(case.want)
    for g, w in zip(got, case.want):
        value_if_kernels.assert_matches(g, w)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("dtype,m,n", [("float32", 32, 200), ("bfloat16", 20, 1000), ("float16", 9, 64)])
def test_softmax_example(arch, dtype, m, n):
    x = np.random.default_rng(m).standard_normal((m, n)).astype(np_dtype(jnp.dtype(dtype)))
    (got,) = _run(softmax.softmax(m, n, jnp.dtype(dtype)), [x], arch)
    want = np.asarray(jax.nn.softmax(jnp.asarray(x, jnp.float32), axis=-1)).astype(x.dtype)
    value_if_kernels.assert_matches(got, want)
