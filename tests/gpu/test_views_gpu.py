"""Issue 17's view examples on the GPU: kernels written against `T.view` only (no explicit puts),
compared with jnp.dot in float32 on the host, on random data.

One PE (every region is local, so each view copy lowers to a local copy) runs in the single-GPU pass;
two or more PEs (remote regions read through nvshmem_ptr or getmem, replicas written to every PE)
run through the launcher, or as PEs sharing one GPU (tools/gpu_test.sh). SUMMA on a 2 x 2 mesh needs
four PEs: tools/gpu_test.sh's `ex4_summa_view` step runs it with four PEs on one GPU.
"""

from __future__ import annotations

import math

import jax
import pytest

from tests.conftest import load_example

allreduce_view = load_example("gemm_allreduce_view")
summa_view = load_example("summa_view")


def _one_gpu_mesh(axes: tuple[str, ...]) -> jax.sharding.Mesh:
    return jax.make_mesh((1,) * len(axes), axes, devices=jax.devices("gpu")[:1])


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("m,k,n", [(64, 64, 64), (128, 96, 192)])
def test_gemm_allreduce_view_one_pe(dtype, m, k, n):
    assert allreduce_view.check(_one_gpu_mesh(("x",)), m=m, k=k, n=n, dtype=dtype, seed=m + k + n)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_summa_view_one_pe(dtype):
    assert summa_view.check(_one_gpu_mesh(("r", "c")), bm=64, bk=64, bn=64, dtype=dtype, seed=3)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("m,k,n", [(64, 64, 64), (128, 128, 64)])
def test_gemm_allreduce_view(gpu_mesh, dtype, m, k, n):
    assert allreduce_view.check(gpu_mesh, m=m, k=k, n=n, dtype=dtype, seed=m + k + n + 1)


def test_summa_view(gpu_mesh):
    p = math.isqrt(gpu_mesh.size)
    if p * p != gpu_mesh.size or p < 2:
        pytest.skip(f"SUMMA needs a square number of PEs (at least 4), this run has {gpu_mesh.size}; "
                    "tools/gpu_test.sh's ex4_summa_view runs it with four PEs on one GPU")
    mesh = jax.make_mesh((p, p), ("r", "c"), devices=gpu_mesh.devices.reshape(-1))
    assert summa_view.check(mesh, bm=64, bk=64, bn=64, dtype="bfloat16", seed=5)
