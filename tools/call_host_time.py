"""Host time per call of a plain GEMM kernel in the two ways a user calls it (tools/, not a benchmark: no
targets): N separate jitted calls whose outputs are all kept (each call a fresh output address, so the
handler re-encodes its tensor maps), and the same calls with each output dropped (XLA's allocator hands
the same address back). Prints, per form, the wall time per call and the FFI handler's own host time per
call (`_ffi.take_handler_times`: whole handler, of it cuLaunchKernel), and XLA's `jnp.dot` in the same way.
`--torch`: torch's CUDA context in the same process (as in benchmarks/bench_gemm.py) and torch.matmul's calls
in the same form, last; `--sampler`: the bench's NVML sampler thread (benchmarks/_gpu_power.py) running while
the calls are timed. Both ask whether the bench's calls column (45 us a call at 2048^3 where this tool measured
27) is the process the bench runs in rather than the call.

    python tools/call_host_time.py [--shape 2048x2048x2048] [--calls 400] [--torch] [--sampler]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import jax
import jax.numpy as jnp

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks"))
import gemm as gemm_example

from jax_tilescale import _ffi


def per_call_us(fn, a, b, calls: int, keep: bool) -> float:
    jax.block_until_ready(fn(a, b))
    kept = []
    t0 = time.perf_counter()
    for _ in range(calls):
        out = fn(a, b)
        if keep:
            kept.append(out)
    jax.block_until_ready(out)
    return (time.perf_counter() - t0) / calls * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="2048x2048x2048")
    ap.add_argument("--calls", type=int, default=400)
    ap.add_argument("--torch", action="store_true", help="torch's CUDA context in the process; its calls timed too")
    ap.add_argument("--sampler", action="store_true", help="the bench's NVML sampler thread runs while timing")
    args = ap.parse_args()
    m, n, k = (int(v) for v in args.shape.split("x"))
    ka, kb = jax.random.split(jax.random.key(0))
    a = jax.random.normal(ka, (m, k), jnp.bfloat16)
    b = jax.random.normal(kb, (k, n), jnp.bfloat16)
    ours = jax.jit(gemm_example.gemm(m, n, k, jnp.dtype(jnp.bfloat16)))
    xla = jax.jit(lambda x, y: x @ y)
    torch_calls = _torch_calls(a, b) if args.torch else None
    sampler = _sampler() if args.sampler else None
    print(f"{'form':>22} {'ours us':>8} {'XLA us':>8} {'handler us':>10} {'cuLaunch us':>11}"
          + (f" {'torch us':>8}" if torch_calls else ""))
    for keep in (True, False, True, False):
        if sampler is not None:
            sampler.start()
        _ffi.take_handler_times()
        t_ours = per_call_us(ours, a, b, args.calls, keep)
        calls, whole, launch = _ffi.take_handler_times()
        t_xla = per_call_us(xla, a, b, args.calls, keep)
        t_torch = torch_calls(args.calls) if torch_calls else None
        if sampler is not None:
            sampler.stop()
        per = max(calls, 1)
        print(f"{'outputs kept' if keep else 'outputs dropped':>22} {t_ours:8.1f} {t_xla:8.1f} "
              f"{whole / per / 1e3:10.2f} {launch / per / 1e3:11.2f}"
              + (f" {t_torch:8.1f}" if t_torch is not None else ""))


def _torch_calls(a, b):
    """calls(n) -> us per torch.matmul call on the same values, dispatched back to back, the last synchronized."""
    import torch
    from _cublas_torch import torch_operands

    ta, tb = torch_operands(torch, a, b)

    def calls(n: int) -> float:
        torch.matmul(ta, tb)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            out = torch.matmul(ta, tb)
        torch.cuda.synchronize()
        del out
        return (time.perf_counter() - t0) / n * 1e6

    return calls


def _sampler():
    from _gpu_power import Sampler, open_nvml

    nvml = open_nvml()
    if nvml is None:
        raise SystemExit("--sampler: no NVIDIA driver (libnvidia-ml.so.1) on this machine")
    return Sampler(nvml)


if __name__ == "__main__":
    main()
