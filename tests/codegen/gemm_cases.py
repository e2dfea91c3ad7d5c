"""GEMM kernels for the code-generation tests, each with what it must compute: the shared cases of the
mma.sync (test_gemm_sm80) and Hopper (test_gemm_sm90_emulated, test_gemm_config_fuzz) lowerings' runs on the CPU
emulator (tests/codegen/emulator)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np

import jax_tilescale as ts
from jax_tilescale import language as T
from jax_tilescale.codegen import generate_cuda
from jax_tilescale.codegen.gemm_table import GemmConfig
from tests.codegen import emulator
from tests.conftest import load_example

gemm_example = load_example("gemm")
fp8_example = load_example("gemm_fp8")
S = jax.ShapeDtypeStruct
BF16, F32 = jnp.bfloat16, jnp.float32
SMS = 4  # persistent grids of 4 blocks: every block walks more than one tile at the emulated shapes


def np_dtype(dtype) -> np.dtype:
    """numpy's dtype of a JAX one (bfloat16 through ml_dtypes)."""
    return np.dtype(ml_dtypes.bfloat16) if dtype == BF16 else np.dtype(dtype)


@dataclass
class Case:
    """A kernel, its inputs' shapes and dtypes, and what it must compute (float64 from the inputs)."""

    kern: object
    shapes: tuple[tuple[int, ...], ...]
    dtypes: tuple[object, ...]
    out_shape: tuple[int, int]
    want: Callable[..., np.ndarray]

    def ir(self):
        return self.kern.trace(*(S(s, d) for s, d in zip(self.shapes, self.dtypes)))


def gemm_case(m, n, k, *, bm=128, bn=128, bk=64, stages=3, threads=256, dtype=BF16, out_dtype=None, ta=False,
              tb=False, serial=False, fill=0.0, clear_accum=False, non_affine=False, out_cols=None) -> Case:
    """C = op(A) @ op(B) (+ fill), tiles bm x bn x bk; `out_cols` > n leaves C's rows wider than the
    product (odd row strides take the scalar stores); `non_affine` spells A's K start with // and %;
    sizes that the tiles do not divide make the edge tiles overhang (clipped copies: loads
    zero-filled, stores skipped outside)."""
    out_dtype = out_dtype or dtype
    out_cols = out_cols or n

    @ts.kernel(out_shape=S((m, out_cols), out_dtype), grid=(-(-n // bn), -(-m // bm)), threads=threads)
    def kern(A, B, C):
        bx, by = T.program_id(0), T.program_id(1)
        A_s = T.alloc_shared((bk, bm) if ta else (bm, bk), dtype)
        B_s = T.alloc_shared((bn, bk) if tb else (bk, bn), dtype)
        C_f = T.alloc_fragment((bm, bn), F32)
        T.fill(C_f, fill)
        steps = -(-k // bk)
        loop = T.serial(steps) if serial else T.Pipelined(steps, num_stages=stages)
        for ko in loop:
            k0 = (ko // 2) * (2 * bk) + (ko % 2) * bk if non_affine else ko * bk
            T.copy(A[T.ds(k0, bk), T.ds(by * bm, bm)] if ta else A[T.ds(by * bm, bm), T.ds(k0, bk)], A_s)
            T.copy(B[T.ds(bx * bn, bn), T.ds(ko * bk, bk)] if tb else B[T.ds(ko * bk, bk), T.ds(bx * bn, bn)], B_s)
            T.gemm(A_s, B_s, C_f, transpose_A=ta, transpose_B=tb, clear_accum=clear_accum)
        T.copy(C_f, C[T.ds(by * bm, bm), T.ds(bx * bn, bn)])

    def want(a, b):
        a, b = (a.T if ta else a), (b.T if tb else b)
        if clear_accum:  # every step overwrites: the last one's product
            a, b = a[:, k - bk:], b[k - bk:, :]
        out = np.full((m, out_cols), np.nan)
        out[:, :n] = a @ b + fill
        return out

    shapes = (((k, m) if ta else (m, k)), ((n, k) if tb else (k, n)))
    return Case(kern, shapes, (dtype, dtype), (m, out_cols), want)


def example_case(m: int, n: int, k: int, cfg: GemmConfig, dtype=BF16) -> Case:
    """examples/gemm.py's kernel for one unsplit configuration as a Case: C = A @ B."""
    kern = gemm_example.build(m, n, k, jnp.dtype(dtype), cfg, SMS)
    return Case(kern, ((m, k), (k, n)), (dtype, dtype), (m, n), lambda a, b: a @ b)


# ---- Hopper kernels for the emulator ----------------------------------------------------------------------


@dataclass(frozen=True)
class Emulated:
    """A kernel's IR, its inputs (from a seeded generator) and the output it must produce, float64."""

    ir: Callable[[], object]
    inputs: Callable[[np.random.Generator], list[np.ndarray]]
    want: Callable[..., np.ndarray]


def _ints(rng: np.random.Generator, shape, dtype) -> np.ndarray:
    return rng.integers(-3, 4, shape).astype(np.float64).astype(dtype)


def example(m: int, n: int, k: int, cfg: GemmConfig, dtype=BF16, split_reduce: str = "xla") -> Emulated:
    """examples/gemm.py's kernel for one configuration: C = A @ B, or split-K's float32 partials, one slab a split
    (`split_reduce="kernel"`: C, summed by each tile's last split)."""
    kern = gemm_example.build(m, n, k, jnp.dtype(dtype), cfg, SMS, split_reduce)
    npd = np_dtype(dtype)

    def want(a, b):
        if cfg.split_k == 1 or split_reduce != "xla":
            return a @ b
        per = -(-k // cfg.block_k) // cfg.split_k * cfg.block_k  # K of one split
        slabs = np.zeros((cfg.split_k, kern.rows, n))
        for s in range(cfg.split_k):
            slabs[s, :m] = a[:, s * per:(s + 1) * per] @ b[s * per:(s + 1) * per]
        return slabs.reshape(-1, n)

    return Emulated(lambda: kern.trace(S((m, k), dtype), S((k, n), dtype)),
                    lambda rng: [_ints(rng, (m, k), npd), _ints(rng, (k, n), npd)], want)


def user_kernel(m: int, n: int, k: int, **kw) -> Emulated:
    """tests/codegen/gemm_cases.gemm_case: a kernel written with T.gemm's options (transposes, fill, clear_accum)."""
    case = gemm_case(m, n, k, **kw)
    return Emulated(case.ir, lambda rng: [_ints(rng, s, np_dtype(d)) for s, d in zip(case.shapes, case.dtypes)],
                    case.want)


def started_from_shared(m: int, n: int, k: int, bm: int = 64, bn: int = 64, bk: int = 64) -> Emulated:
    """C = A @ B + 3 D in float32: the accumulator starts from D's tile through a shared tile, which a T.Parallel then
    doubles in place (every thread rewriting elements other threads' accumulators were loaded from) and the epilogue
    adds: the fragment's load must be complete in every thread before the tile is rewritten."""

    @ts.kernel(out_shape=S((m, n), F32), grid=(-(-n // bn), -(-m // bm)), threads=128)
    def kern(A, B, D, C):
        bx, by = T.program_id(0), T.program_id(1)
        A_s = T.alloc_shared((bm, bk), BF16)
        B_s = T.alloc_shared((bk, bn), BF16)
        D_s = T.alloc_shared((bm, bn), F32)
        C_f = T.alloc_fragment((bm, bn), F32)
        T.copy(D[T.ds(by * bm, bm), T.ds(bx * bn, bn)], D_s)
        T.copy(D_s, C_f)
        for i, j in T.Parallel(bm, bn):
            D_s[i, j] = D_s[i, j] * 2.0
        for ko in T.Pipelined(-(-k // bk), num_stages=2):
            T.copy(A[T.ds(by * bm, bm), T.ds(ko * bk, bk)], A_s)
            T.copy(B[T.ds(ko * bk, bk), T.ds(bx * bn, bn)], B_s)
            T.gemm(A_s, B_s, C_f)
        for i, j in T.Parallel(bm, bn):
            C_f[i, j] = C_f[i, j] + D_s[i, j]
        T.copy(C_f, C[T.ds(by * bm, bm), T.ds(bx * bn, bn)])

    bf16 = np_dtype(BF16)
    return Emulated(lambda: kern.trace(S((m, k), BF16), S((k, n), BF16), S((m, n), F32)),
                    lambda rng: [_ints(rng, (m, k), bf16), _ints(rng, (k, n), bf16), _ints(rng, (m, n), np.float32)],
                    lambda a, b, d: a @ b + 3 * d)


def reloaded_per_tile(m: int, n: int, k: int, blocks: int = 2, bm: int = 64, bn: int = 64, bk: int = 64) -> Emulated:
    """C = A @ B + D shifted a row within each tile, float32, on a persistent grid: each tile loads D's tile into a
    shared tile that the epilogue reads across threads (row i + 1 of the tile for row i), and the next tile reloads
    it: no thread may reload it while another still reads the last tile's."""
    tiles_n = -(-n // bn)
    tiles = -(-m // bm) * tiles_n

    @ts.kernel(out_shape=S((m, n), F32), grid=(blocks,), threads=128)
    def kern(A, B, D, C):
        A_s = T.alloc_shared((bm, bk), BF16)
        B_s = T.alloc_shared((bk, bn), BF16)
        D_s = T.alloc_shared((bm, bn), F32)
        C_f = T.alloc_fragment((bm, bn), F32)
        for w in T.serial(-(-tiles // blocks)):
            tile = w * blocks + T.program_id(0)
            tm, tn = tile // tiles_n, tile % tiles_n
            T.copy(D[T.ds(tm * bm, bm), T.ds(tn * bn, bn)], D_s)
            T.clear(C_f)
            for ko in T.Pipelined(-(-k // bk), num_stages=2):
                T.copy(A[T.ds(tm * bm, bm), T.ds(ko * bk, bk)], A_s)
                T.copy(B[T.ds(ko * bk, bk), T.ds(tn * bn, bn)], B_s)
                T.gemm(A_s, B_s, C_f)
            for i, j in T.Parallel(bm, bn):
                C_f[i, j] = C_f[i, j] + D_s[(i + 1) % bm, j]
            T.copy(C_f, C[T.ds(tm * bm, bm), T.ds(tn * bn, bn)])

    def want(a, b, d):
        shifted = np.concatenate([np.roll(d[r:r + bm], -1, axis=0) for r in range(0, m, bm)])
        return a @ b + shifted

    bf16 = np_dtype(BF16)
    return Emulated(lambda: kern.trace(S((m, k), BF16), S((k, n), BF16), S((m, n), F32)),
                    lambda rng: [_ints(rng, (m, k), bf16), _ints(rng, (k, n), bf16), _ints(rng, (m, n), np.float32)],
                    want)


def fp8(m: int, n: int, k: int, dtype, **cfg) -> Emulated:
    """examples/gemm_fp8.py: C = scale_a * scale_b * A @ B^T, float8 tiles both K-major, bf16 out."""
    kern = fp8_example.gemm_fp8(m, n, k, dtype, **cfg)
    return Emulated(
        lambda: kern.trace(S((m, k), dtype), S((n, k), dtype), S((1,), F32), S((1,), F32)),
        lambda rng: [_ints(rng, (m, k), dtype), _ints(rng, (n, k), dtype), np.array([0.5], np.float32),
                     np.array([-4.0], np.float32)],
        lambda a, b, sa, sb: sa[0] * sb[0] * (a @ b.T))


@dataclass(frozen=True)
class Run:
    mod: object
    inputs: list[np.ndarray]
    want: np.ndarray
    got: np.ndarray | None


def run_emulated(case: Emulated, seed: int, mutate: Callable[[str], str] | None = None) -> Run:
    """The case's sm_90 module (its source changed by `mutate`), which must take the Hopper lowering, run by
    tests/codegen/emulator on seeded integer data (fp32 sums exact) with the output poisoned."""
    ir = case.ir()
    mod = generate_cuda(ir, "sm_90")
    assert mod.arch == "sm_90a" and not mod.notes, mod.notes  # the Hopper lowering, nothing left out
    if mutate:
        mod = dataclasses.replace(mod, source=mutate(mod.source))
    inputs = case.inputs(np.random.default_rng(seed))
    outputs = [np.full(o.shape, np.nan, np_dtype(o.dtype)) for o in ir.outputs]
    want = case.want(*(x.astype(np.float64) for x in inputs)).astype(outputs[0].dtype)
    got = emulator.run(mod, inputs, outputs)[0]  # the first output (an in-kernel split-K's slabs are its second)
    return Run(mod, inputs, want, got)
