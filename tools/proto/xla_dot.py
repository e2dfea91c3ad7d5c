"""XLA's bf16 dot at the benchmark shapes (a jitted loop of products), for the prototype's ratio."""
import time

import jax
import jax.numpy as jnp


def bench(m, n, k, reps=20):
    a = jax.random.normal(jax.random.key(0), (m, k), jnp.bfloat16)
    b = jax.random.normal(jax.random.key(1), (k, n), jnp.bfloat16)

    @jax.jit
    def loop(a, b):
        def body(i, acc):
            return acc + (a @ b)[0, 0].astype(jnp.float32)
        return jax.lax.fori_loop(0, reps, body, jnp.zeros((), jnp.float32))

    jax.block_until_ready(loop(a, b))
    ts = []
    for _ in range(5):
        t0 = time.perf_counter()
        jax.block_until_ready(loop(a, b))
        ts.append((time.perf_counter() - t0) / reps)
    t = sorted(ts)[2]
    dot = jax.jit(lambda a, b: a @ b)
    jax.block_until_ready(dot(a, b))
    t0 = time.perf_counter()
    outs = [dot(a, b) for _ in range(reps)]
    jax.block_until_ready(outs)
    t2 = (time.perf_counter() - t0) / reps
    tf2 = 2 * m * n * k / t2 / 1e12
    print(f"xla jnp.dot (separate calls, full outputs) {m}x{n}x{k}: {t2 * 1e3:.3f} ms {tf2:.1f} TFLOP/s")
    print(f"xla jnp.dot {m}x{n}x{k}: {t * 1e3:.3f} ms {2 * m * n * k / t / 1e12:.1f} TFLOP/s")


for shape in ((8192, 8192, 8192), (8192, 28672, 8192), (8192, 8192, 28672)):
    bench(*shape)
