"""The view examples (issue 17) through the interpreter on simulated CPU devices, against jnp.dot
in float32: summa_view on 2x2 and 3x3 meshes (3x3 needs 9 devices: a subprocess, the suite's
process has 8), gemm_allreduce_view on 2 and 4 PEs; both written with views only (no explicit
transfer in the kernel's source), and what their views lower to (remote tiles through PeerCopy,
local ones as plain copies)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import pytest

from jax_tilescale.ir.nodes import Copy, PeerCopy, Put, walk_stmts
from tests.conftest import ROOT, load_example

summa_view = load_example("summa_view")
gemm_allreduce_view = load_example("gemm_allreduce_view")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_summa_view_2x2_matches_dot(dtype):
    assert summa_view.check(summa_view.mesh_2d(2), bm=32, bk=64, bn=32, dtype=dtype, seed=1)


@pytest.mark.parametrize("npes", [2, 4])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_gemm_allreduce_view_matches_dot(npes, dtype):
    mesh = jax.make_mesh((npes,), ("x",), devices=jax.devices()[:npes])
    assert gemm_allreduce_view.check(mesh, m=64, k=64, n=32, dtype=dtype, seed=npes)


def test_summa_view_3x3_in_a_subprocess():
    script = textwrap.dedent(
        """
        from jax_tilescale.platform import request_cpu_devices
        request_cpu_devices(9)
        import sys
        sys.path.insert(0, sys.argv[1])
        from tests.conftest import load_example
        ex = load_example("summa_view")
        assert ex.check(ex.mesh_2d(3), bm=32, bk=32, bn=32, dtype="float32", seed=9)
        print("ok")
        """
    )
    env = dict(os.environ, JAX_TILESCALE_TESTING="1")
    env.pop("XLA_FLAGS", None)
    out = subprocess.run([sys.executable, "-c", script, str(ROOT)], capture_output=True, text=True, env=env,
                         timeout=600)
    assert out.returncode == 0 and "ok" in out.stdout, out.stdout + out.stderr


@pytest.mark.parametrize("name", ["summa_view", "gemm_allreduce_view"])
def test_examples_use_views_only(name):
    """No explicit transfer, signal or wait in the example's source: the views do the communication."""
    tree = ast.parse((ROOT / "examples" / f"{name}.py").read_text())
    called = {n.func.attr for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)}
    transfers = ("putmem", "getmem", "put_", "get_block", "get_warp", "signal", "wait_")
    explicit = {c for c in called if c.startswith(transfers)}
    assert not explicit and "view" in called


def test_summa_view_lowers_remote_tiles_to_peer_copies_and_its_own_block_to_a_copy():
    kern = summa_view.summa_view(32, 64, 32, 2, jnp.float32)
    sds = jax.ShapeDtypeStruct((32, 64), jnp.float32), jax.ShapeDtypeStruct((64, 32), jnp.float32)
    ir = kern.trace(*sds, mesh_axes=("r", "c"), num_pes=4, mesh_axis_sizes=(2, 2))
    gets = [s for s in walk_stmts(ir.body) if isinstance(s, PeerCopy)]
    assert len(gets) == 2 and all(s.fallback for s in gets)  # A's and B's tiles, when a peer holds them
    assert isinstance(ir.body[-1], Copy)  # C's block is this PE's: a plain copy, no branch


def test_gemm_allreduce_view_reads_locally_and_reduces_with_puts():
    kern = gemm_allreduce_view.gemm_allreduce_view(64, 64, 32, 2, jnp.float32)
    sds = jax.ShapeDtypeStruct((64, 64), jnp.float32), jax.ShapeDtypeStruct((64, 32), jnp.float32)
    ir = kern.trace(*sds, mesh_axes=("x",), num_pes=2)
    stmts = list(walk_stmts(ir.body))
    assert not any(isinstance(s, PeerCopy) for s in stmts)  # A's and B's slabs are this PE's
    assert sum(isinstance(s, Put) and s.signal is not None for s in stmts) == 1  # the reduction's puts
