"""AllGather-GEMM and GEMM-ReduceScatter (examples/allgather_gemm.py, gemm_reducescatter.py) against
XLA's all_gather + dot and dot + psum_scatter, bf16, M=8192, (N, K) in (8192, 8192), (28672, 8192),
(8192, 28672), in the same run: time per call, TFLOP/s per GPU, ratio to XLA. With one PE each
kernel is also timed against examples/gemm.py's kernel on the same per-GPU problem (the target:
0.95x or better). Prints ptxas's registers/spills of each kernel.

Run with one process (`python benchmarks/bench_overlap.py`) or through the launcher. With two PEs
sharing one GPU (TILESCALE_PES_SHARE_GPU=1) NCCL refuses XLA's collectives: their rows are skipped,
saying so. Timing: interleaved medians as in bench_gemm.py (each call its own jitted call).
"""

from __future__ import annotations

import os
import pathlib
import sys
import time

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "examples"))
from allgather_gemm import ag_gemm, allgather_gemm
from gemm import gemm
from gemm_reducescatter import gemm_reducescatter, gemm_rs

from jax_tilescale.codegen import generate_cuda
from jax_tilescale.compiler import compile_cubin, kernel_resources

SHAPES = [(8192, 8192, 8192), (8192, 28672, 8192), (8192, 8192, 28672)]  # (M, N, K)
if os.environ.get("BENCH_OVERLAP_SHAPES"):  # e.g. "8192x8192x8192" (M x N x K, comma-separated): a shorter run
    SHAPES = [tuple(map(int, s.split("x"))) for s in os.environ["BENCH_OVERLAP_SHAPES"].split(",")]
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "5"))


def medians(runners: dict, args: dict, rounds: int = ROUNDS, heat_s: float = 0.3) -> dict[str, float]:
    for name, run in runners.items():
        jax.block_until_ready(run(*args[name]))
    times: dict[str, list[float]] = {n: [] for n in runners}
    for _ in range(rounds):
        for name, run in runners.items():
            until = time.perf_counter() + heat_s
            while time.perf_counter() < until:
                jax.block_until_ready(run(*args[name]))
            t0 = time.perf_counter()
            jax.block_until_ready(run(*args[name]))
            times[name].append(time.perf_counter() - t0)
    return {n: sorted(t)[len(t) // 2] for n, t in times.items()}


def regs(kern, shapes, npes) -> str:
    mod = generate_cuda(kern.trace(*shapes, mesh_axes=("x",), num_pes=npes), "sm_90")
    compiled = kernel_resources(compile_cubin(mod.source, arch=mod.arch, entry=mod.entry, nvshmem=mod.uses_nvshmem),
                                mod.entry)
    if compiled is None:
        return f"{mod.arch} ? regs"
    warn = "wgmma serialized" if compiled.wgmma_serialized else "wgmma async"
    return f"{mod.arch} {compiled.registers} regs, {compiled.spill_stores} B spilled, {warn}"


def main() -> None:
    mesh = jax.make_mesh((jax.device_count(),), ("x",))
    npes = mesh.size
    xla_ok = os.environ.get("TILESCALE_PES_SHARE_GPU") != "1"
    if not xla_ok:
        print("XLA rows skipped: two PEs share one GPU and NCCL refuses XLA's collectives there")
    bf = jnp.bfloat16
    key = jax.random.key(0)
    print(f"{'kernel':<10} {'M x N x K':<20} {'ms':>8} {'TFLOP/s/GPU':>12} {'vs XLA':>7} {'vs gemm.py':>10}  resources")
    for m, n, k in SHAPES:
        flops = 2 * m * n * k / npes
        a_ag = jax.random.normal(key, (m, k), jnp.float32).astype(bf)
        b_ag = jax.random.normal(key, (k, n), jnp.float32).astype(bf)
        sh = lambda x, spec: jax.device_put(x, jax.NamedSharding(mesh, spec))
        ag_args = (sh(a_ag, P("x", None)), sh(b_ag, P(None, "x")))
        rs_args = (sh(a_ag, P(None, "x")), sh(b_ag, P("x", None)))
        run = {
            "ag": jax.jit(jax.shard_map(lambda a, b: ag_gemm(a, b, npes), mesh=mesh,
                                        in_specs=(P("x", None), P(None, "x")), out_specs=P(None, "x"))),
            "rs": jax.jit(jax.shard_map(lambda a, b: gemm_rs(a, b, npes), mesh=mesh,
                                        in_specs=(P(None, "x"), P("x", None)), out_specs=P("x", None))),
        }
        args = {"ag": ag_args, "rs": rs_args}
        if xla_ok:
            run["xla_ag"] = jax.jit(jax.shard_map(
                lambda a, b: jnp.dot(jax.lax.all_gather(a, "x", axis=0, tiled=True), b), mesh=mesh,
                in_specs=(P("x", None), P(None, "x")), out_specs=P(None, "x")))
            run["xla_rs"] = jax.jit(jax.shard_map(
                lambda a, b: jax.lax.psum_scatter(jnp.dot(a, b, preferred_element_type=jnp.float32).astype(bf), "x",
                                                  scatter_dimension=0, tiled=True), mesh=mesh,
                in_specs=(P(None, "x"), P("x", None)), out_specs=P("x", None)))
            args |= {"xla_ag": ag_args, "xla_rs": rs_args}
        if npes == 1:
            run["gemm"] = jax.jit(gemm(m, n, k, bf))
            args["gemm"] = (a_ag, b_ag)
        t = medians(run, args)
        res = {
            "ag": regs(allgather_gemm(m // npes, k, n // npes, npes, bf),
                       (jax.ShapeDtypeStruct((m // npes, k), bf), jax.ShapeDtypeStruct((k, n // npes), bf)), npes),
            "rs": regs(gemm_reducescatter(m, k // npes, n, npes, bf), (jax.ShapeDtypeStruct((m, k // npes), bf),
                                                                       jax.ShapeDtypeStruct((k // npes, n), bf)), npes),
        }
        for name in ("ag", "rs"):
            vs_xla = f"{t[f'xla_{name}'] / t[name]:.2f}x" if xla_ok else "skip"
            vs_gemm = f"{t['gemm'] / t[name]:.2f}x" if npes == 1 else "-"
            print(f"{name:<10} {f'{m}x{n}x{k}':<20} {t[name] * 1e3:8.3f} {flops / t[name] / 1e12:12.0f} {vs_xla:>7} "
                  f"{vs_gemm:>10}  {res[name]}")
            if xla_ok:
                x = t[f"xla_{name}"]
                print(f"{'xla_' + name:<10} {f'{m}x{n}x{k}':<20} {x * 1e3:8.3f} {flops / x / 1e12:12.0f}")
        if npes == 1:
            print(f"{'gemm.py':<10} {f'{m}x{n}x{k}':<20} {t['gemm'] * 1e3:8.3f} {flops / t['gemm'] / 1e12:12.0f}")


if __name__ == "__main__":
    main()
