"""Burst vs sustained speed of the generated GEMM and jnp.dot through XLA (8192^3 bf16), to tell
power/clock limits from launch-path costs. Development aid: prints TFLOP/s at points in time.

    python tools/proto/sustain_xla.py [seconds] [config]     # config as in bench_gemm, e.g. 128x256x64/4/g8
"""
import pathlib
import sys
import time

import jax
import jax.numpy as jnp

root = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(root / "examples"))
sys.path.insert(0, str(root / "benchmarks"))
from bench_gemm import parse_config  # noqa: E402
from gemm import gemm  # noqa: E402

seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 3.0
config, _ = parse_config(sys.argv[2] if len(sys.argv) > 2 else "128x256x64/4/g8")  # switches not applied here
n = 8192
flop = 2 * n**3
ka, kb = jax.random.split(jax.random.key(0))
a = jax.random.normal(ka, (n, n), jnp.bfloat16)
b = jax.random.normal(kb, (n, n), jnp.bfloat16)
reps = 10
products = {"ts": gemm(n, n, n, jnp.bfloat16, **config), "xla": lambda x, y: x @ y}
loops = {name: jax.jit(lambda x, y, p=p: jax.lax.fori_loop(
    0, reps, lambda i, acc: acc + p(x, y)[0, 0].astype(jnp.float32), jnp.float32(0)))
    for name, p in products.items()}
for f in loops.values():
    jax.block_until_ready(f(a, b))


def burst(name):
    time.sleep(1.5)  # let the GPU cool off / clocks recover
    t0 = time.perf_counter()
    jax.block_until_ready(loops[name](a, b))
    return flop * reps / (time.perf_counter() - t0) / 1e12


def sustained(name):
    marks, out, t_start = [0.05, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0], [], time.perf_counter()
    while True:
        t0 = time.perf_counter()
        jax.block_until_ready(loops[name](a, b))
        t1 = time.perf_counter()
        while marks and t1 - t_start >= marks[0]:
            out.append(f"t={t1 - t_start:.2f}s {flop * reps / (t1 - t0) / 1e12:.0f}")
            marks.pop(0)
        if t1 - t_start >= seconds:
            return " ".join(out)


for _round in range(2):
    for name in loops:
        print(f"{name} burst (after 1.5 s idle, {reps} products): {burst(name):.0f} TF/s", flush=True)
    for name in loops:
        print(f"{name} sustained: {sustained(name)} TF/s", flush=True)
