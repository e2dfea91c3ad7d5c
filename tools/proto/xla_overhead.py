"""Where does the XLA path lose time against raw launches? Per-call cost of the generated GEMM in
jax at several sizes, with normal vs uniform data, clocks sampled alongside. Development aid."""
import pathlib
import subprocess
import sys
import time

import jax
import jax.numpy as jnp

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "examples"))
from gemm import gemm


def per_call(f, a, b, reps=20):
    jax.block_until_ready(f(a, b))
    ts = []
    for _ in range(5):
        t0 = time.perf_counter()
        jax.block_until_ready([f(a, b) for _ in range(reps)])
        ts.append((time.perf_counter() - t0) / reps)
    return sorted(ts)[2]


smi = subprocess.Popen(["nvidia-smi", "dmon", "-s", "pc", "-d", "1"], stdout=subprocess.PIPE, text=True)
for n in (1024, 4096, 8192):
    ka, kb = jax.random.split(jax.random.key(0))
    for dist in ("normal", "uniform"):
        if dist == "normal":
            a = jax.random.normal(ka, (n, n), jnp.bfloat16)
            b = jax.random.normal(kb, (n, n), jnp.bfloat16)
        else:
            a = (jax.random.uniform(ka, (n, n)) - 0.5).astype(jnp.bfloat16)
            b = (jax.random.uniform(kb, (n, n)) - 0.5).astype(jnp.bfloat16)
        ts_k = jax.jit(gemm(n, n, n, jnp.bfloat16))
        xla = jax.jit(lambda x, y: x @ y)
        t1, t2 = per_call(ts_k, a, b), per_call(xla, a, b)
        f = 2 * n**3 / 1e12
        print(f"n={n} {dist}: ts {t1 * 1e3:.3f} ms ({f / t1:.0f} TF/s)  xla {t2 * 1e3:.3f} ms ({f / t2:.0f} TF/s)")
smi.terminate()
print(smi.communicate()[0][-1500:])
