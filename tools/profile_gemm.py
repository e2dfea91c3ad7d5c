"""The workload for tools/profile_gemm.sh: one shape's product through XLA (`jnp.dot`) and through our
kernel (`examples/gemm.py`'s `gemm()`, the tile table's pick unless `--config` names one), each run a few
times after its compilation (and XLA's autotuning), then once each inside a profiler range
(cuProfilerStart/Stop), so that a profiler (ncu, nsys) sees exactly the two kernels, on the same inputs. Checks
ours against XLA's before it ends (bf16 tolerance), so a profile is never of a wrong kernel.

    python tools/profile_gemm.py 16384x8192x1024 [--config 128x256x64/3/g8/p] [--runs 3]
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import importlib.util
import pathlib
import sys

import jax
import jax.numpy as jnp

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))
from gemm import gemm  # noqa: E402


def bench_config(text: str) -> dict:
    """gemm() keyword arguments of a bench_gemm.py --configs entry (its parser, one definition); the
    entry's code generator switches are set for the rest of the run."""
    spec = importlib.util.spec_from_file_location("bench_gemm", ROOT / "benchmarks" / "bench_gemm.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    cfg, switches = module.parse_config(text)
    for (owner, name), value in switches.items():  # "/pp", "/mc", "/direct": for the whole run (one kernel)
        setattr(owner, name, value)
    return cfg


@contextlib.contextmanager
def profiled_range():
    """cuProfilerStart/Stop (the driver's, always loaded with a GPU): a profiler started with
    `--profile-from-start off` then sees only this range, not XLA's autotuning launches before it
    (which an earlier run profiled by mistake: ncu replays each with a memory backup, minutes)."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:  # no GPU driver (a CPU run of this script): nothing to mark
        yield
        return
    # cuProfilerStart acts on the calling thread's current context: make it XLA's, device 0's primary one.
    # cuda.h maps these names to their _v2 entry points; the unversioned symbols are a legacy ABI (a first
    # run's cuCtxPushCurrent answered CUDA_ERROR_INVALID_CONTEXT). Each call is checked before the next.
    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    steps = (("cuDeviceGet", lambda: cuda.cuDeviceGet(ctypes.byref(dev), 0)),
             ("cuDevicePrimaryCtxRetain", lambda: cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev)),
             ("cuCtxPushCurrent_v2", lambda: cuda.cuCtxPushCurrent_v2(ctx)),
             ("cuProfilerStart", lambda: cuda.cuProfilerStart()))
    for call, run in steps:
        rc = run()
        if rc != 0:
            raise SystemExit(f"{call} failed (CUresult {rc}): no profiler range")
    try:
        yield
    finally:
        cuda.cuProfilerStop()
        cuda.cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p()))
        cuda.cuDevicePrimaryCtxRelease_v2(dev)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("shape", help="MxNxK")
    ap.add_argument("--config", default="", help="a bench_gemm.py --configs entry (default: the table's pick)")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    m, n, k = map(int, args.shape.split("x"))
    ka, kb = jax.random.split(jax.random.key(0))
    a = jax.random.normal(ka, (m, k), jnp.bfloat16)
    b = jax.random.normal(kb, (k, n), jnp.bfloat16)
    xla = jax.jit(lambda x, y: x @ y)
    ours = jax.jit(gemm(m, n, k, jnp.bfloat16, **(bench_config(args.config) if args.config else {})))
    for _ in range(args.runs):  # compiled, and XLA's autotuner has picked its kernel, before profiling starts
        want = xla(a, b).block_until_ready()
        got = ours(a, b).block_until_ready()
    with profiled_range():  # what ncu --profile-from-start off sees: one product each
        want = xla(a, b).block_until_ready()
        got = ours(a, b).block_until_ready()
    err = float(jnp.max(jnp.abs(got.astype(jnp.float32) - want.astype(jnp.float32))))
    scale = float(jnp.max(jnp.abs(want.astype(jnp.float32))))
    print(f"{args.shape}: max |ours - XLA| = {err:.3g} (max |C| {scale:.3g})")
    if err > 2e-2 * scale:
        raise SystemExit("our product differs from XLA's beyond bf16 tolerance")


if __name__ == "__main__":
    main()
