"""AllGather-GEMM and GEMM-ReduceScatter on the GPU (the Hopper plan for kernels that communicate),
against a float64 product on the host within the bf16 tolerance: with one PE (one process), and
with every PE of the run (`gpu_mesh`: marked multi_pe; two PEs may share one GPU under MPS), at a
ragged shape and at 8192^3."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from jax_tilescale.codegen import generate_cuda
from tests.conftest import load_example

ag = load_example("allgather_gemm")
rs = load_example("gemm_reducescatter")
S = jax.ShapeDtypeStruct
BF16 = jnp.bfloat16
# (M, K, N) of the whole problem: ragged (N and K not multiples of the tiles) and the 8192^3
SHAPES = [(1024, 1000, 1288), (8192, 8192, 8192)]


def one_pe_mesh() -> jax.sharding.Mesh:
    return jax.make_mesh((1,), ("x",), devices=jax.devices("gpu")[:1])


def _takes_wgmma(kern, *shapes, npes):
    mod = generate_cuda(kern.trace(*shapes, mesh_axes=("x",), num_pes=npes), "sm_90")
    assert mod.arch == "sm_90a" and mod.uses_nvshmem and not mod.notes, mod.notes


def _ag(mesh, m, k, n):
    npes = mesh.size
    _takes_wgmma(ag.allgather_gemm(m // npes, k, n // npes, npes, BF16), S((m // npes, k), BF16),
                 S((k, n // npes), BF16), npes=npes)
    assert ag.check(mesh, m=m // npes, k=k, n=n // npes, dtype="bfloat16", seed=m + k)


def _rs(mesh, m, k, n):
    npes = mesh.size
    k = k // npes // 8 * 8 * npes  # K split evenly; rows of A 16-byte aligned per PE
    _takes_wgmma(rs.gemm_reducescatter(m, k // npes, n, npes, BF16), S((m, k // npes), BF16),
                 S((k // npes, n), BF16), npes=npes)
    assert rs.check(mesh, m=m, k=k // npes, n=n, dtype="bfloat16", seed=m + k)


@pytest.mark.parametrize("m,k,n", SHAPES)
def test_allgather_gemm_one_pe(m, k, n):
    _ag(one_pe_mesh(), m, k, n)


@pytest.mark.parametrize("m,k,n", SHAPES)
def test_gemm_reducescatter_one_pe(m, k, n):
    _rs(one_pe_mesh(), m, k, n)


@pytest.mark.parametrize("m,k,n", SHAPES)
def test_allgather_gemm_every_pe(gpu_mesh, m, k, n):
    _ag(gpu_mesh, m, k, n)


@pytest.mark.parametrize("m,k,n", SHAPES)
def test_gemm_reducescatter_every_pe(gpu_mesh, m, k, n):
    _rs(gpu_mesh, m, k, n)
