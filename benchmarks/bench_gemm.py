"""bf16 GEMM: the T.Pipelined + T.gemm kernel of examples/gemm.py against jnp.dot, same run, same GPU.

Both are timed the same two ways, interleaved (7 rounds, each running every variant once, so
that clock and temperature drift hit all alike; medians reported):
- loop: one jitted `fori_loop` of `reps` products, each reduced to one element so that nothing
  else is timed (the method of the issue and of shared/reference/gemm_ceiling.py);
- calls: `reps` jitted calls dispatched back to back, full outputs, blocked on at the end.
Every kernel result is first checked against jnp.dot in float32 (all elements, random data).
Prints one row per shape and config: time, TFLOP/s, ratio to XLA, and ptxas's registers/spills.

    python benchmarks/bench_gemm.py [--reps 20] [--shapes 8192x8192x8192,...]
"""

from __future__ import annotations

import argparse
import pathlib
import re
import sys
import time

import jax
import jax.numpy as jnp

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "examples"))
from gemm import gemm

from jax_tilescale.codegen import generate_cuda
from jax_tilescale.compiler import compile_cubin, ptxas_report

SHAPES = ((8192, 8192, 8192), (8192, 28672, 8192), (8192, 8192, 28672))
CONFIGS = "128x256x64/4/g8,256x128x64/4/g8"  # block_m x block_n x block_k / stages / group_m


def parse_config(text: str) -> dict:
    tiles, stages, group = text.split("/")
    bm, bn, bk = map(int, tiles.split("x"))
    return dict(block_m=bm, block_n=bn, block_k=bk, num_stages=int(stages), group_m=int(group.lstrip("g")))


def loop_and_calls(product, reps: int):
    """(loop, calls): functions of (a, b) that run `reps` products, jitted (see the docstring)."""
    loop = jax.jit(lambda x, y: jax.lax.fori_loop(
        0, reps, lambda i, acc: acc + product(x, y)[0, 0].astype(jnp.float32), jnp.float32(0)))
    call = jax.jit(product)
    return (lambda a, b: loop(a, b)), (lambda a, b: [call(a, b) for _ in range(reps)])


def interleaved_medians(runners: dict[str, object], a, b, reps: int, rounds: int = 7) -> dict[str, float]:
    """Seconds per product of each runner: median over `rounds` rounds in which every runner runs
    once, in turn (clocks and temperature drift alike for all of them)."""
    for run in runners.values():
        jax.block_until_ready(run(a, b))
    times: dict[str, list[float]] = {name: [] for name in runners}
    for _ in range(rounds):
        for name, run in runners.items():
            t0 = time.perf_counter()
            jax.block_until_ready(run(a, b))
            times[name].append((time.perf_counter() - t0) / reps)
    return {name: sorted(ts)[len(ts) // 2] for name, ts in times.items()}


def resources(kern, a, b) -> str:
    module = generate_cuda(kern.trace(a, b), "sm_90")
    report = ptxas_report(compile_cubin(module.source, arch=module.arch, entry=module.entry, nvshmem=False)) or ""
    regs = re.search(r"Used (\d+) registers", report)
    spill = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", report)
    path = "wgmma" if module.arch == "sm_90a" else "portable"
    return (f"{path}, {regs.group(1) if regs else '?'} regs, "
            f"spills {spill.group(1) + '/' + spill.group(2) if spill else '?'} B")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--shapes", default=",".join("x".join(map(str, s)) for s in SHAPES))
    ap.add_argument("--configs", default=CONFIGS, help="tiles/stages/group, comma-separated")
    args = ap.parse_args()
    print(f"device: {jax.devices()[0].device_kind}; jax {jax.__version__}")
    rows = []
    for shape in args.shapes.split(","):
        m, n, k = map(int, shape.split("x"))
        ka, kb = jax.random.split(jax.random.key(0))
        a = jax.random.normal(ka, (m, k), jnp.bfloat16)
        b = jax.random.normal(kb, (k, n), jnp.bfloat16)
        want = jnp.dot(a.astype(jnp.float32), b.astype(jnp.float32), precision=jax.lax.Precision.HIGHEST)
        scale = float(jnp.max(jnp.abs(want)))
        kernels = {c: gemm(m, n, k, jnp.bfloat16, **parse_config(c)) for c in args.configs.split(",")}
        runners = {}
        for name, product in [("XLA jnp.dot", lambda x, y: x @ y), *((f"ts {c}", kv) for c, kv in kernels.items())]:
            runners[(name, "loop")], runners[(name, "calls")] = loop_and_calls(product, args.reps)
        t = interleaved_medians(runners, a, b, args.reps)
        rows.append((shape, "XLA jnp.dot", t["XLA jnp.dot", "loop"], t["XLA jnp.dot", "calls"], 1.0, 1.0, "-", True))
        for name, kern in kernels.items():
            got = jax.jit(kern)(a, b)
            err = float(jnp.max(jnp.abs(got.astype(jnp.float32) - want)))
            tl, tc = t[f"ts {name}", "loop"], t[f"ts {name}", "calls"]
            rows.append((shape, f"ts {name}", tl, tc, t["XLA jnp.dot", "loop"] / tl, t["XLA jnp.dot", "calls"] / tc,
                         resources(kern, a, b), err <= 2e-2 * scale))
    print(f"\n{'shape':>18} {'what':>21} {'loop ms':>8} {'TF/s':>6} {'xXLA':>5} {'calls ms':>8} {'TF/s':>6} "
          f"{'xXLA':>5}  ok  code")
    for shape, what, tl, tc, rl, rc, res, ok in rows:
        m, n, k = map(int, shape.split("x"))
        f = 2 * m * n * k / 1e12
        print(f"{shape:>18} {what:>21} {tl * 1e3:8.3f} {f / tl:6.1f} {rl:5.2f} {tc * 1e3:8.3f} {f / tc:6.1f} "
              f"{rc:5.2f}  {'yes' if ok else 'NO'}  {res}")


if __name__ == "__main__":
    main()
