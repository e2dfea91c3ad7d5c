"""Which generated kernels are launched as programmatic dependents (docs/calling_convention.md, "Dependent
launches"), and that such a kernel waits for the grid before it ahead of everything else. The launch itself runs
on the GPU: tests/gpu/test_dependent_launch_gpu.py."""

from __future__ import annotations

import numpy as np
import pytest

from jax_tilescale import language as T
from jax_tilescale.codegen import cuda as codegen_cuda
from jax_tilescale.codegen import generate_cuda

from . import kernels

WAIT = "ts_wait_for_prior_grid();"


def _plain():
    def double(a, b):
        t = T.alloc_shared((4, 8), np.float32)
        T.copy(a[0:4, :], t)
        T.copy(t, b[0:4, :])

    return kernels.build(double, name="plain", inputs=[((4, 8), np.float32)], outputs=[((4, 8), np.float32)],
                         grid=(1,), num_pes=1)


def _body(source: str, entry: str) -> list[str]:
    """The statements of the kernel's entry function, comments and blank lines left out."""
    start = source.index(f" {entry}(")
    lines = source[source.index("{", start) + 1:].splitlines()
    return [ln.strip() for ln in lines if ln.strip() and not ln.strip().startswith(("//", "#line"))]


@pytest.mark.parametrize("arch", ["sm_90", "sm_100"])
def test_a_plain_kernel_waits_for_the_grid_before_it_first(arch):
    m = generate_cuda(_plain(), arch)
    assert m.dependent_launch and not m.uses_nvshmem and not m.grid_barrier
    assert _body(m.source, m.entry)[0].startswith(WAIT)
    assert m.source.count(WAIT) == 1


def test_a_wgmma_gemm_waits_before_its_shared_memory_and_barriers():
    import jax
    import jax.numpy as jnp

    from tests.conftest import load_example

    gemm = load_example("gemm").gemm(256, 256, 128, jnp.bfloat16, block_m=128, block_n=128, split_k=1)
    spec = jax.ShapeDtypeStruct
    m = generate_cuda(gemm.trace(spec((256, 128), jnp.bfloat16), spec((128, 256), jnp.bfloat16)), "sm_90")
    assert m.arch == "sm_90a" and m.dependent_launch
    assert _body(m.source, m.entry)[0].startswith(WAIT)


def test_no_dependent_launch_before_hopper():
    m = generate_cuda(_plain(), "sm_80")
    assert not m.dependent_launch and WAIT not in m.source


def test_communicating_kernels_launch_plainly():
    ring = generate_cuda(kernels.ring_allgather(256, 128, 4, 64, np.float16), "sm_90")
    barrier = generate_cuda(kernels.signal_exchange(16, 64, 2, np.float32, blocks=2), "sm_90", p2p_peers=False)
    assert ring.uses_nvshmem and barrier.grid_barrier
    for m in (ring, barrier):
        assert not m.dependent_launch and WAIT not in m.source


def test_the_switch_turns_it_off(monkeypatch):
    monkeypatch.setattr(codegen_cuda, "DEPENDENT_LAUNCH", False)
    m = generate_cuda(_plain(), "sm_90")
    assert not m.dependent_launch and WAIT not in m.source
