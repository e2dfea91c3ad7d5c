"""Programmatic dependent launches (docs/calling_convention.md, "Dependent launches"): a plain kernel on sm_90 and
later begins by waiting for the grid before it (griddepcontrol.wait) and the handler launches it with
cuLaunchKernelEx and programmatic stream serialisation, so its launch may overlap the end of the kernel before it.
Checked here: such kernels are launched that way (the handler counts launches by kind), and a chain of two of our
kernels that read each other's outputs (a GEMM, then a scaling of its result that is the next GEMM's input) is right
at every step against jnp.dot in float32 on random data, run from the host and replayed from a recorded loop."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_tilescale as ts
from jax_tilescale import language as T
from jax_tilescale.codegen import cuda as codegen_cuda
from jax_tilescale.codegen import generate_cuda
from jax_tilescale.lowering.cuda import cuda_arch
from tests.conftest import load_example

gemm_example = load_example("gemm")
M, K = 2048, 1024  # x: [M, K], w: [K, K]; y = x @ w, then x' = y / sqrt(K) (the next step's x)
BM = 8  # rows per block of the scaling kernel
STEPS = 12
SCALE = 1.0 / math.sqrt(K)  # 1/32: exact in bfloat16, so the kernel's product and numpy's round alike
# One kernel per product (the table would split K at this shape, and XLA would sum the partials between our two).
GEMM_TILES = dict(block_m=128, block_n=256, block_k=64, num_stages=4, split_k=1)


def _scaled() -> ts.TileKernel:
    """x = y * SCALE, rounded to bfloat16: reads the GEMM's output the moment the GEMM ends. A new kernel per test,
    so that each test lowers it under its own code generator settings."""

    @ts.kernel(out_shape=jax.ShapeDtypeStruct((M, K), jnp.bfloat16), grid=(M // BM,), threads=128)
    def scaled(y, x):
        rows = T.ds(T.program_id(0) * BM, BM)
        y_s = T.alloc_shared((BM, K), jnp.bfloat16)
        t = T.alloc_fragment((BM, K), jnp.float32)
        T.copy(y[rows, :], y_s)
        for i, j in T.Parallel(BM, K):
            t[i, j] = y_s[i, j] * SCALE
        T.copy(t, x[rows, :])

    return scaled


def _launch_kinds() -> tuple[int, int, int]:
    from jax_tilescale import _ffi

    return _ffi.take_launch_kinds()


def _inputs():
    kx, kw = jax.random.split(jax.random.key(16))
    return (jax.random.normal(kx, (M, K), jnp.float32).astype(jnp.bfloat16),
            jax.random.normal(kw, (K, K), jnp.float32).astype(jnp.bfloat16))


def test_plain_kernels_are_dependent_launches():
    gemm, scaled = gemm_example.gemm(M, K, K, jnp.bfloat16, **GEMM_TILES), _scaled()
    x, w = _inputs()
    arch = cuda_arch()
    assert int(arch[3:]) >= 90, f"this test needs sm_90 or later (griddepcontrol), the GPU is {arch}"
    for module in (generate_cuda(gemm.trace(x, w), arch), generate_cuda(scaled.trace(x), arch)):
        assert module.dependent_launch, f"{module.entry} is a plain kernel on {arch} but not a dependent launch"
    _launch_kinds()
    jax.block_until_ready(jax.jit(lambda a, b: scaled(gemm(a, b)))(x, w))
    plain, dependent, cooperative = _launch_kinds()
    assert (plain, dependent, cooperative) == (0, 2, 0), (
        f"launches by kind (plain, dependent, cooperative): {(plain, dependent, cooperative)}, want (0, 2, 0)")


def test_plain_launches_when_dependent_launches_are_off(monkeypatch):
    """With codegen.cuda.DEPENDENT_LAUNCH off the same kernels are generated without the wait and launched plainly
    (the handler's launch and its count read one decision: kernel_module.h, LaunchKindOf), and still right."""
    monkeypatch.setattr(codegen_cuda, "DEPENDENT_LAUNCH", False)
    gemm, scaled = gemm_example.gemm(M, K, K, jnp.bfloat16, **GEMM_TILES), _scaled()
    x, w = _inputs()
    for module in (generate_cuda(gemm.trace(x, w), cuda_arch()), generate_cuda(scaled.trace(x), cuda_arch())):
        assert not module.dependent_launch, f"{module.entry} is a dependent launch with DEPENDENT_LAUNCH off"
    _launch_kinds()
    got = np.asarray(jax.block_until_ready(jax.jit(lambda a, b: scaled(gemm(a, b)))(x, w)), np.float32)
    assert _launch_kinds() == (2, 0, 0), "launches by kind (plain, dependent, cooperative), want (2, 0, 0)"
    want = np.asarray(jnp.dot(x.astype(jnp.float32), w.astype(jnp.float32)), np.float32) * np.float32(SCALE)
    err, scale = float(np.abs(got - want).max()), float(np.abs(want).max())
    assert scale > 0.1 and err <= 2e-2 * scale, f"max error {err} against scale {scale}"


def test_grid_barrier_kernels_are_cooperative_launches(gpu_mesh):
    """A kernel whose blocks meet (barrier_all with four blocks) is launched cooperatively, never as a dependent,
    and counted so (on every PE: each process counts its own launches)."""
    from tests.primitives import test_sync as sync_checks

    _launch_kinds()
    sync_checks.check_many_blocks(gpu_mesh, 0)  # checked against numpy's shift of the rows
    assert _launch_kinds() == (0, 0, 1), "launches by kind (plain, dependent, cooperative), want (0, 0, 1)"


@pytest.mark.parametrize("early", [False, True], ids=["trigger_at_end", "trigger_early_wait_late"])
def test_chain_of_dependent_kernels_matches_jnp_dot_at_every_step(monkeypatch, early):
    """Each GEMM reads what the scaling kernel before it wrote, each scaling what the GEMM before it wrote, and
    XLA reuses their buffers from step to step (a write after the read of the step before): every step's product is
    checked against jnp.dot in float32 of that step's input, and the scaling against numpy's. `early`: every kernel
    lets the next one launch as soon as its own blocks have begun (codegen.cuda.DEPENDENT_TRIGGER_EARLY), so the
    next kernel's blocks are resident and waiting while this one runs, and the GEMM waits after its set-up
    (DEPENDENT_WAIT_AFTER_SETUP): a wait that did not hold would read stale data here."""
    monkeypatch.setattr(codegen_cuda, "DEPENDENT_TRIGGER_EARLY", early)
    monkeypatch.setattr(codegen_cuda, "DEPENDENT_WAIT_AFTER_SETUP", early)
    gemm, scaled = gemm_example.gemm(M, K, K, jnp.bfloat16, **GEMM_TILES), _scaled()
    x, w = _inputs()

    def step(carry, _):
        y = gemm(carry, w)
        return scaled(y), (carry, y)

    run = jax.jit(lambda x0: jax.lax.scan(step, x0, None, length=STEPS))
    last, (xs, ys) = run(x)
    xs, ys = np.asarray(xs, np.float32), np.asarray(ys, np.float32)
    w32 = np.asarray(w, np.float32)
    nexts = [*xs[1:], np.asarray(last, np.float32)]
    for i in range(STEPS):
        want = np.asarray(jnp.dot(jnp.asarray(xs[i]), jnp.asarray(w32), precision="highest"), np.float32)
        scale = float(np.abs(want).max())
        err = float(np.abs(ys[i] - want).max())
        assert err <= 2e-2 * scale, f"step {i}: GEMM max error {err} against scale {scale}"
        want_x = ys[i] * np.float32(SCALE)  # exact: a power of two times a bfloat16
        assert np.array_equal(nexts[i], want_x), f"step {i}: the scaling kernel's output differs from numpy's"
    assert float(np.abs(xs[-1]).std()) > 0.1, "the chain decayed to zeros: the check would prove nothing"

    # The same chain as a loop XLA records as one CUDA graph (the launches replayed, not made by the handler):
    # bit for bit the steps above (the same kernels on the same inputs).
    loop = jax.jit(lambda x0: jax.lax.fori_loop(0, STEPS, lambda i, c: scaled(gemm(c, w)), x0),
                   compiler_options=ts.testing.LOOP_GRAPH_OPTIONS)
    for _ in range(3):
        assert np.array_equal(np.asarray(loop(x), np.float32), np.asarray(last, np.float32))
