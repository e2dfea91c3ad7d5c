"""Kernels with thread-block clusters (ts.kernel(cluster=), ir/cluster.py) that the interpreter, the
code generator and the GPU tests share, and the host reference of what they compute."""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np

import jax_tilescale as ts
from jax_tilescale import language as T

M, N = 16, 32  # one block's tile


def blocks_of(grid: tuple[int, ...]) -> list[tuple[int, ...]]:
    """Every block of `grid`, x fastest."""
    return [tuple(reversed(b)) for b in itertools.product(*(range(g) for g in reversed(grid)))]


def linear(block: tuple[int, ...], grid: tuple[int, ...]) -> int:
    """The block's tile: x + gx * (y + gy * z)."""
    out = 0
    for b, g in reversed(list(zip(block, grid))):
        out = out * g + b
    return out


def rank_of(block: tuple[int, ...], cluster: tuple[int, ...]) -> int:
    """CUDA's %cluster_ctarank, written out: x % cx + cx * (y % cy + cy * (z % cz))."""
    out = 0
    for b, c in reversed(list(zip(block, cluster))):
        out = out * c + b % c
    return out


def member(block: tuple[int, ...], cluster: tuple[int, ...], rank: int) -> tuple[int, ...]:
    """Block `rank` of `block`'s cluster."""
    out = []
    for b, c in zip(block, cluster):
        out.append(b - b % c + rank % c)
        rank //= c
    return tuple(out)


def rotate_reference(a: np.ndarray, grid: tuple[int, ...], cluster: tuple[int, ...]) -> np.ndarray:
    """`rotate`'s result: each block's tile of C holds the tile of A of the block one rank before it
    in its cluster."""
    size = int(np.prod(cluster))
    out = np.empty_like(a)
    for b in blocks_of(grid):
        sender = member(b, cluster, (rank_of(b, cluster) - 1) % size)
        t, s = linear(b, grid), linear(sender, grid)
        out[t * M:(t + 1) * M] = a[s * M:(s + 1) * M]
    return out


def rotate(grid: tuple[int, ...], cluster: tuple[int, ...], dtype=jnp.float32, sync: bool = True,
           through_fragment: bool = True, interpret: bool | None = None) -> ts.TileKernel:
    """Every block puts its tile of A into the shared tile S of the next block of its cluster (rank + 1,
    wrapping), from a fragment (cast to float32 on the way when `dtype` is narrower) or from its own shared
    tile; after the cluster meets, each block stores its S to its tile of C. `sync=False` leaves the meeting
    out: a race."""
    tiles = int(np.prod(grid))

    @ts.kernel(out_shape=jax.ShapeDtypeStruct((tiles * M, N), jnp.float32), grid=grid, threads=128,
               cluster=cluster, interpret=interpret)
    def rotate_kernel(A, C):
        S = T.alloc_shared((M, N), jnp.float32)
        t = 0
        for axis in reversed(range(len(grid))):
            t = t * grid[axis] + T.program_id(axis)
        size = int(np.prod(cluster))
        if through_fragment:
            F = T.alloc_fragment((M, N), jnp.float32)
            T.copy(A[T.ds(t * M, M), :], F)
            T.copy(F, T.cluster_tile(S, (T.cluster_rank() + 1) % size))
        else:
            L = T.alloc_shared((M, N), dtype)
            T.copy(A[T.ds(t * M, M), :], L)
            T.copy(L, T.cluster_tile(S, (T.cluster_rank() + 1) % size))
        if sync:
            T.cluster_sync()
        T.copy(S, C[T.ds(t * M, M), :])

    return rotate_kernel


def pull(grid: tuple[int, ...], cluster: tuple[int, ...], interpret: bool | None = None) -> ts.TileKernel:
    """Every block stores its tile of A in its own S; after the cluster meets, each reads the S of the
    block one rank before it (a peer's tile as the source) into a float32 fragment and stores it to C:
    the same result as `rotate`, bfloat16 in, float32 out."""
    tiles = int(np.prod(grid))
    size = int(np.prod(cluster))

    @ts.kernel(out_shape=jax.ShapeDtypeStruct((tiles * M, N), jnp.float32), grid=grid, threads=128,
               cluster=cluster, interpret=interpret)
    def pull_kernel(A, C):
        S = T.alloc_shared((M, N), jnp.bfloat16)
        F = T.alloc_fragment((M, N), jnp.float32)
        t = 0
        for axis in reversed(range(len(grid))):
            t = t * grid[axis] + T.program_id(axis)
        T.copy(A[T.ds(t * M, M), :], S)
        T.cluster_sync()
        T.copy(T.cluster_tile(S, (T.cluster_rank() + size - 1) % size), F)
        T.copy(F, C[T.ds(t * M, M), :])

    return pull_kernel


def swap_partials(m: int, n: int, k: int, bm: int = 64, bn: int = 128, bk: int = 64, stages: int = 4,
                  interpret: bool | None = None) -> ts.TileKernel:
    """Each tile's two halves of K in a cluster of two blocks (grid z): each block multiplies its half into a
    float32 accumulator (on Hopper: wgmma's, in registers), stores it into its own shared tile S, the cluster meets,
    and each block loads the *other* block's S into its accumulator (a peer's tile into registers) and stores it:
    output rows [split * m, (split + 1) * m) hold the product of the other half of K."""
    tiles_n, tiles_m, per = n // bn, m // bm, k // bk // 2

    @ts.kernel(out_shape=jax.ShapeDtypeStruct((2 * m, n), jnp.float32), grid=(tiles_n, tiles_m, 2), threads=128,
               cluster=(1, 1, 2), interpret=interpret)
    def swap_partials_kernel(A, B, C):
        tn, tm, split = T.program_id(0), T.program_id(1), T.program_id(2)
        A_s = T.alloc_shared((bm, bk), jnp.bfloat16)
        B_s = T.alloc_shared((bk, bn), jnp.bfloat16)
        S = T.alloc_shared((bm, bn), jnp.float32)
        C_f = T.alloc_fragment((bm, bn), jnp.float32)
        T.clear(C_f)
        for ko in T.Pipelined(per, num_stages=stages):
            T.copy(A[T.ds(tm * bm, bm), T.ds((split * per + ko) * bk, bk)], A_s)
            T.copy(B[T.ds((split * per + ko) * bk, bk), T.ds(tn * bn, bn)], B_s)
            T.gemm(A_s, B_s, C_f)
        T.copy(C_f, S)
        T.cluster_sync()
        T.copy(T.cluster_tile(S, 1 - T.cluster_rank()), C_f)
        T.copy(C_f, C[T.ds(split * m + tm * bm, bm), T.ds(tn * bn, bn)])

    return swap_partials_kernel


def swap_partials_reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """`swap_partials`'s result in float64: the product of K's second half above that of its first."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    half = a.shape[1] // 2
    return np.concatenate([a[:, half:] @ b[half:], a[:, :half] @ b[:half]])
