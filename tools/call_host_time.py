"""Host time per call of a plain GEMM kernel in the two ways a user calls it (tools/, not a benchmark: no
targets): N separate jitted calls whose outputs are all kept (each call a fresh output address, so the
handler re-encodes its tensor maps), and the same calls with each output dropped (XLA's allocator hands
the same address back). Prints, per form, the wall time per call and the FFI handler's own host time per
call (`_ffi.take_handler_times`: whole handler, of it cuLaunchKernel), and XLA's `jnp.dot` in the same way.

    python tools/call_host_time.py [--shape 2048x2048x2048] [--calls 400]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import jax
import jax.numpy as jnp

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
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
    args = ap.parse_args()
    m, n, k = (int(v) for v in args.shape.split("x"))
    ka, kb = jax.random.split(jax.random.key(0))
    a = jax.random.normal(ka, (m, k), jnp.bfloat16)
    b = jax.random.normal(kb, (k, n), jnp.bfloat16)
    ours = jax.jit(gemm_example.gemm(m, n, k, jnp.dtype(jnp.bfloat16)))
    xla = jax.jit(lambda x, y: x @ y)
    print(f"{'form':>22} {'ours us':>8} {'XLA us':>8} {'handler us':>10} {'cuLaunch us':>11}")
    for keep in (True, False, True, False):
        _ffi.take_handler_times()
        t_ours = per_call_us(ours, a, b, args.calls, keep)
        calls, whole, launch = _ffi.take_handler_times()
        t_xla = per_call_us(xla, a, b, args.calls, keep)
        per = max(calls, 1)
        print(f"{'outputs kept' if keep else 'outputs dropped':>22} {t_ours:8.1f} {t_xla:8.1f} "
              f"{whole / per / 1e3:10.2f} {launch / per / 1e3:11.2f}")


if __name__ == "__main__":
    main()
