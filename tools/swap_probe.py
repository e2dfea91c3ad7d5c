"""Why is the swapped frame's main loop slower per k-step? A probe that times, interleaved with jnp.dot at two K:

- `pick`: gemm()'s table pick (128x192 ping-pong, B's tile read MN-major on wgmma's n side);
- `swap`: the persistent swapped ping-pong 160x128 (C^T = B^T A^T: B's tile MN-major on wgmma's m64 side, `tnspA`);
- `swap_kk`: the same grid and tiles with B given as B^T (N x K, made once outside the timed loop), so that both of
  the swapped product's operands are K-major (no `tnspA`): if this one runs at the pick's rate per k-step and `swap`
  does not, the MN-major left operand is what slows the swapped loop;
- `coop192` / `swap192`: cooperative 128x192 against the swapped cooperative 192x128 (wgmma n192 in both, only the
  operand that is MN-major differs): n160 against n192 set apart from the frame.

`--set layouts`: the pick's own frame (128x192 ping-pong) with A given as A^T (wgmma's m side read MN-major) and/or
B as B^T (its n side read K-major): which operand placement costs the swapped frame its k-steps. `--set order`: the
pick and the swapped ping-pong with their tiles grouped along N instead of M (GemmConfig.group_columns, which came
out of this probe).

The per-k-step rate is the slope between the two K (the epilogue and the start cancel). Each kernel is checked
against jnp.dot (float32 reference) before it is timed.

    python tools/swap_probe.py [--shapes 16384x8192x1024,16384x8192x4096] [--rounds 5] [--set layouts]

Findings: benchmarks/NOTES.md ("The swapped loop's probe run", thirty-ninth session).
"""

from __future__ import annotations

import argparse
import dataclasses
import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(ROOT / "benchmarks"))
import gemm as G  # noqa: E402
from bench_gemm import interleaved_times, loop_and_calls, median, reps_for  # noqa: E402

import jax_tilescale as ts  # noqa: E402
from jax_tilescale import language as T  # noqa: E402
from jax_tilescale.codegen.gemm_table import GemmConfig  # noqa: E402

# the table's ping-pong tiles, and XLA's (cuBLAS's 128x160) computed swapped, both persistent
PICK = GemmConfig(block_m=128, block_n=192, block_k=64, persistent=True, pingpong=True)
SWAP = GemmConfig(block_m=160, block_n=128, block_k=64, persistent=True, pingpong=True, swap=True)


def swapped_kk_kernel(m: int, n: int, k: int, dtype, cfg: GemmConfig, num_sms: int) -> ts.TileKernel:
    """G.persistent_swapped_kernel with B given transposed (Bt: N x K): Ct = Bt A^T with both tiles K-major."""
    bm, bn, bk = cfg.block_m, cfg.block_n, cfg.block_k
    tiles_m, tiles_n, tiles, blocks, group = G.persistent_grid(m, n, cfg, num_sms)

    @ts.kernel(out_shape=jax.ShapeDtypeStruct((m, n), dtype), grid=(blocks,), threads=cfg.threads,
               pingpong=cfg.pingpong)
    def gemm_swapped_kk(A, Bt, C):
        Ct = T.alloc_fragment((bn, bm), jnp.float32)
        A_s = T.alloc_shared((bm, bk), dtype)
        Bt_s = T.alloc_shared((bn, bk), dtype)
        for w in T.serial(T.ceildiv(tiles, blocks)):
            tile = w * blocks + T.program_id(0)
            if tile < tiles:
                tm, tn = G.persistent_tile(tile, tiles_m, tiles_n, group, cfg)
                T.clear(Ct)
                for ko in T.Pipelined(T.ceildiv(k, bk), num_stages=cfg.num_stages):
                    T.copy(A[T.ds(tm * bm, bm), T.ds(ko * bk, bk)], A_s)
                    T.copy(Bt[T.ds(tn * bn, bn), T.ds(ko * bk, bk)], Bt_s)
                    T.gemm(Bt_s, A_s, Ct, transpose_B=True)
                G.store_transposed(Ct, C, tm * bm, tn * bn)

    return gemm_swapped_kk


def layout_kernel(m: int, n: int, k: int, dtype, cfg: GemmConfig, num_sms: int, a_t: bool, b_t: bool) -> ts.TileKernel:
    """G.persistent_kernel (the pick's grid, order and ping-pong) with A given as A^T (K x M: wgmma's m side read
    MN-major, `tnspA`) where `a_t` and B given as B^T (N x K: its n side read K-major) where `b_t`: the pick's frame
    with each operand's major swapped on its own, to set apart which placement the swapped frame's loop pays for."""
    bm, bn, bk = cfg.block_m, cfg.block_n, cfg.block_k
    tiles_m, tiles_n, tiles, blocks, group = G.persistent_grid(m, n, cfg, num_sms)

    @ts.kernel(out_shape=jax.ShapeDtypeStruct((m, n), dtype), grid=(blocks,), threads=cfg.threads,
               pingpong=cfg.pingpong)
    def gemm_layout(A, B, C):
        A_s = T.alloc_shared((bk, bm) if a_t else (bm, bk), dtype)
        B_s = T.alloc_shared((bn, bk) if b_t else (bk, bn), dtype)
        C_f = T.alloc_fragment((bm, bn), jnp.float32)
        for w in T.serial(T.ceildiv(tiles, blocks)):
            tile = w * blocks + T.program_id(0)
            if tile < tiles:
                tm, tn = G.persistent_tile(tile, tiles_m, tiles_n, group, cfg)
                T.clear(C_f)
                for ko in T.Pipelined(T.ceildiv(k, bk), num_stages=cfg.num_stages):
                    if a_t:
                        T.copy(A[T.ds(ko * bk, bk), T.ds(tm * bm, bm)], A_s)
                    else:
                        T.copy(A[T.ds(tm * bm, bm), T.ds(ko * bk, bk)], A_s)
                    if b_t:
                        T.copy(B[T.ds(tn * bn, bn), T.ds(ko * bk, bk)], B_s)
                    else:
                        T.copy(B[T.ds(ko * bk, bk), T.ds(tn * bn, bn)], B_s)
                    T.gemm(A_s, B_s, C_f, transpose_A=a_t, transpose_B=b_t)
                T.copy(C_f, C[T.ds(tm * bm, bm), T.ds(tn * bn, bn)])

    return gemm_layout


def swapped_ct_kernel(m: int, n: int, k: int, dtype, cfg: GemmConfig, num_sms: int) -> ts.TileKernel:
    """G.persistent_swapped_kernel storing its tiles as computed, into C^T (N x M), with the plain epilogue: the
    swapped loop without the transposed store."""
    bm, bn = cfg.block_m, cfg.block_n
    tiles_m, tiles_n, tiles, blocks, group = G.persistent_grid(m, n, cfg, num_sms)

    @ts.kernel(out_shape=jax.ShapeDtypeStruct((n, m), dtype), grid=(blocks,), threads=cfg.threads,
               pingpong=cfg.pingpong)
    def gemm_swapped_ct(A, B, Ct_out):
        Ct = T.alloc_fragment((bn, bm), jnp.float32)
        for w in T.serial(T.ceildiv(tiles, blocks)):
            tile = w * blocks + T.program_id(0)
            if tile < tiles:
                tm, tn = G.persistent_tile(tile, tiles_m, tiles_n, group, cfg)
                G.swapped_product(A, B, Ct, tm, tn, T.ceildiv(k, cfg.block_k), 0, cfg, dtype)
                T.copy(Ct, Ct_out[T.ds(tn * bn, bn), T.ds(tm * bm, bm)])

    return gemm_swapped_ct


def order_runners(m: int, n: int, k: int, sms: int, groups: tuple[int, ...] = ()) -> dict:
    """The pick and the swapped ping-pong in their grouped order (groups of 8 tile rows) and turned round (groups
    of 8 tile columns, GemmConfig.group_columns); with `groups`, the pick's column groups of those sizes in place of
    the swapped pair."""
    bf16 = jnp.bfloat16
    columns = dataclasses.replace(PICK, group_columns=True)
    runs = {
        "XLA jnp.dot": lambda x, y: x @ y,
        "pick (row groups)": G.build(m, n, k, bf16, PICK, sms),
        "pick, column groups": G.build(m, n, k, bf16, columns, sms),
    }
    for group in groups:
        runs[f"pick, column groups of {group}"] = G.build(m, n, k, bf16, dataclasses.replace(columns, group_m=group),
                                                          sms)
    if not groups:
        runs["swap 160x128 pp"] = G.build(m, n, k, bf16, SWAP, sms)
        runs["swap, column groups"] = G.build(m, n, k, bf16, dataclasses.replace(SWAP, group_columns=True), sms)
    return runs


TRANSPOSED_OUTPUT = {"swap 160x128 pp, C^T out"}  # runners whose output is C^T: checked against the product's transpose


def layout_runners(m: int, n: int, k: int, sms: int, at, bt) -> dict:
    """The pick's frame with each operand's major swapped (`layout_kernel`), against the pick and the swapped frame."""
    bf16 = jnp.bfloat16
    b_km = layout_kernel(m, n, k, bf16, PICK, sms, a_t=False, b_t=True)
    a_mn = layout_kernel(m, n, k, bf16, PICK, sms, a_t=True, b_t=False)
    both = layout_kernel(m, n, k, bf16, PICK, sms, a_t=True, b_t=True)
    both160 = layout_kernel(m, n, k, bf16, dataclasses.replace(PICK, block_n=160), sms, a_t=True, b_t=True)
    ct = swapped_ct_kernel(m, n, k, bf16, SWAP, sms)
    return {
        "XLA jnp.dot": lambda x, y: x @ y,
        "pick (A K, B MN)": G.build(m, n, k, bf16, PICK, sms),
        "B K-major": lambda x, y: b_km(x, bt),
        "A MN-major": lambda x, y: a_mn(at, y),
        "A MN, B K": lambda x, y: both(at, bt),
        "A MN, B K, 128x160": lambda x, y: both160(at, bt),
        "swap 160x128 pp": G.build(m, n, k, bf16, SWAP, sms),
        "swap 160x128 pp, C^T out": ct,
    }


def runners(m: int, n: int, k: int, sms: int, bt) -> dict:
    """The timed products, each a function of (A, B); the `_mk` and `_kk` swapped kernels share one configuration."""
    bf16 = jnp.bfloat16
    coop = GemmConfig(block_m=128, block_n=192, block_k=64, persistent=True)
    kk = swapped_kk_kernel(m, n, k, bf16, SWAP, sms)
    return {
        "XLA jnp.dot": lambda x, y: x @ y,
        "pick": G.gemm(m, n, k, bf16),
        "swap 160x128 pp": G.build(m, n, k, bf16, SWAP, sms),
        "swap_kk 160x128 pp": lambda x, y: kk(x, bt),
        "coop 128x192": G.build(m, n, k, bf16, coop, sms),
        "swap 192x128 coop": G.build(m, n, k, bf16, dataclasses.replace(coop, block_m=192, block_n=128, swap=True),
                                     sms),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--shapes", default="16384x8192x1024,16384x8192x4096")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--set", choices=("frame", "layouts", "order"), default="frame",
                    help="frame: the swapped frame against the pick (thirty-ninth session); layouts: the pick's "
                         "frame with A read MN-major and/or B read K-major (forty-second session); order: the pick and "
                         "the swapped ping-pong with their groups of tiles along N instead of M")
    ap.add_argument("--groups", default="", help="with --set order: the pick's column groups of these sizes too "
                    "(comma-separated), in place of the swapped ping-pong's two")
    args = ap.parse_args()
    groups = tuple(int(g) for g in args.groups.split(",") if g)
    sms = G.device_sm_count()
    print(f"device: {jax.devices()[0].device_kind}; jax {jax.__version__}; {sms} SMs")
    per_k: dict[str, list[tuple[int, float]]] = {}
    for shape in args.shapes.split(","):
        m, n, k = map(int, shape.split("x"))
        rng = np.random.default_rng(0)
        a = jnp.asarray(rng.standard_normal((m, k), np.float32), jnp.bfloat16)
        b = jnp.asarray(rng.standard_normal((k, n), np.float32), jnp.bfloat16)
        bt, at = jnp.asarray(b.T), jnp.asarray(a.T)
        want = jnp.dot(a.astype(jnp.float32), b.astype(jnp.float32))
        scale = float(jnp.max(jnp.abs(want)))
        if args.set == "frame":
            product = runners(m, n, k, sms, bt)
        elif args.set == "layouts":
            product = layout_runners(m, n, k, sms, at, bt)
        else:
            product = order_runners(m, n, k, sms, groups)
        for name, run in product.items():
            out = jax.jit(run)(a, b).astype(jnp.float32)
            err = float(jnp.max(jnp.abs((out.T if name in TRANSPOSED_OUTPUT else out) - want))) / scale
            status = "ok" if err < 2e-2 else "WRONG"
            print(f"{shape} {name:>20}: max error / max |C| {err:.2e} {status}", flush=True)
            if status != "ok":
                raise SystemExit(f"{name} is wrong at {shape}")
        reps = reps_for(a, b, args.reps, 20.0)
        loops = {name: loop_and_calls(run, reps)[0] for name, run in product.items()}
        times = interleaved_times(loops, a, b, reps, rounds=args.rounds)
        xla = median(times["XLA jnp.dot"])
        print(f"\n{shape}: {reps} products a run, {args.rounds} rounds")
        for name, t in times.items():
            print(f"{name:>20}  {median(t) * 1e3:7.3f} ms  {2 * m * n * k / median(t) / 1e12:6.1f} TF/s  "
                  f"x XLA {xla / median(t):.3f}  rounds {min(t) * 1e3:.3f}-{max(t) * 1e3:.3f}")
            per_k.setdefault(name, []).append((k, median(t)))
    print("\nper 1024 of K (slope between the shapes' K; the same M and N assumed):")
    for name, points in per_k.items():
        if len(points) >= 2:
            (k0, t0), (k1, t1) = points[0], points[-1]
            slope = (t1 - t0) / (k1 - k0) * 1024 * 1e3
            print(f"{name:>20}  {slope:7.3f} ms per 1024 of K")


if __name__ == "__main__":
    main()
