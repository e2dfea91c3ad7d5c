"""The compute examples (issue 6) through the interpreter on simulated CPU devices, against
jnp.dot in float32: allgather_gemm on 2 and 4 PEs, SUMMA and Cannon on 2x2 and 3x3 meshes (3x3
needs 9 devices: it runs in a subprocess, the suite's process has 8), gemm at ragged shapes;
softmax against jax.nn.softmax."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import jax
import pytest

from tests.conftest import ROOT, load_example

ag_gemm = load_example("allgather_gemm")
summa = load_example("summa")
cannon = load_example("cannon")
softmax = load_example("softmax")
cluster_rowsum = load_example("cluster_rowsum")
gemm = load_example("gemm")


@pytest.mark.parametrize("npes", [2, 4])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_allgather_gemm_matches_dot(npes, dtype):
    mesh = jax.make_mesh((npes,), ("x",), devices=jax.devices()[:npes])
    assert ag_gemm.check(mesh, m=64, k=64, n=64, dtype=dtype, seed=npes)


def test_allgather_gemm_several_row_blocks_per_pe():
    mesh = jax.make_mesh((2,), ("x",), devices=jax.devices()[:2])
    assert ag_gemm.check(mesh, m=64, k=64, n=64, dtype="float16", seed=3, block_m=32, block_n=32)


@pytest.mark.parametrize("example", [summa, cannon], ids=["summa", "cannon"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_2x2_matches_dot(example, dtype):
    assert example.check(summa.mesh_2d(2), bm=64, bk=64, bn=32, dtype=dtype, seed=1)


def test_3x3_in_a_subprocess():
    script = textwrap.dedent(
        """
        from jax_tilescale.platform import request_cpu_devices
        request_cpu_devices(9)
        import sys
        sys.path.insert(0, sys.argv[1])
        from tests.conftest import load_example
        summa, cannon = load_example("summa"), load_example("cannon")
        mesh = summa.mesh_2d(3)
        for ex in (summa, cannon):
            for dtype in ("float32", "bfloat16"):
                assert ex.check(mesh, bm=32, bk=64, bn=32, dtype=dtype, seed=9), (ex.__name__, dtype)
        print("ok")
        """
    )
    env = dict(os.environ, JAX_TILESCALE_TESTING="1")
    env.pop("XLA_FLAGS", None)
    proc = subprocess.run([sys.executable, "-c", script, str(ROOT)], capture_output=True, text=True, env=env,
                          timeout=240, cwd=ROOT)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stdout + proc.stderr


@pytest.mark.parametrize("dtype,n,block_m,m_per_pe", [
    ("float32", 53, 4, 32), ("bfloat16", 200, 8, 32), ("float16", 128, 16, 32),
    ("float32", 40, 8, 21),  # ragged: the last block of each PE has 5 rows
])
def test_softmax_matches_jax_nn_softmax(dtype, n, block_m, m_per_pe):
    mesh = jax.make_mesh((2,), ("x",), devices=jax.devices()[:2])
    assert softmax.check(mesh, m=m_per_pe, n=n, dtype=dtype, seed=n, block_m=block_m)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_gemm_at_ragged_shapes(dtype):
    """examples/gemm.py with M, N, K not multiples of the tiles (the grid and K loop round up, the
    copies clip), small tiles so the interpreter is quick."""
    assert gemm.check(200, 136, 72, dtype, seed=2, block_m=64, block_n=32, block_k=32, num_stages=2, threads=128)


def test_softmax_check_can_fail(monkeypatch):
    """With no tolerance the bfloat16 result (rounded once) no longer passes: the check compares."""
    mesh = jax.make_mesh((2,), ("x",), devices=jax.devices()[:2])
    monkeypatch.setitem(softmax.TOLERANCE, "bfloat16", 0.0)
    assert not softmax.check(mesh, m=16, n=64, dtype="bfloat16", seed=5)


@pytest.mark.parametrize("dtype,n,split,m_per_pe", [("bfloat16", 256, 4, 20), ("float32", 96, 2, 8),
                                                    ("float16", 64, 8, 3)])
def test_cluster_rowsum_matches_the_float64_sums(dtype, n, split, m_per_pe):
    mesh = jax.make_mesh((2,), ("x",), devices=jax.devices()[:2])
    assert cluster_rowsum.check(mesh, m=m_per_pe, n=n, dtype=dtype, seed=n + split, split=split)


def test_cluster_rowsum_check_can_fail_and_refuses_a_split_of_other_columns(monkeypatch):
    mesh = jax.make_mesh((1,), ("x",), devices=jax.devices()[:1])
    monkeypatch.setitem(cluster_rowsum.TOLERANCE, "bfloat16", 0.0)
    assert not cluster_rowsum.check(mesh, m=16, n=128, dtype="bfloat16", seed=5)
    with pytest.raises(ValueError, match="split=3 must divide n=128"):
        cluster_rowsum.rowsum(16, 128, jax.numpy.dtype("float32"), split=3)
