"""The CUDA of T.atomic_fetch_add (the turnstile kernel of tests/compute/test_fetch_add.py):
the block meets, thread 0 fences, adds, fences, the block meets again; it builds with nvcc."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jax_tilescale.codegen import generate_cuda
from jax_tilescale.compiler import compile_cubin
from tests.compute.test_fetch_add import BLOCKS, N, _turnstile

SDS = jax.ShapeDtypeStruct


def test_cuda_fences_around_one_thread_s_atomic_add(session_cache, require_nvcc):
    """The block meets, thread 0 fences (release), adds, fences (acquire), the block meets again."""
    mod = generate_cuda(_turnstile(dtype=jnp.int64).trace(SDS((BLOCKS, N), jnp.float32)))
    src = mod.source
    steps = ["__syncthreads();  // every thread's earlier accesses, before the release", "if (threadIdx.x == 0) {",
             "__threadfence();  // release", "atomicAdd(reinterpret_cast<unsigned long long*>(",
             "__threadfence();  // acquire", "__syncthreads();  // every thread reads the old count"]
    at = src.find(steps[0])
    for step in steps[1:]:  # each after the one before, within the statement's lines
        nxt = src.find(step, at)
        assert at >= 0 and 0 < nxt - at < 400, (step, at, nxt)
        at = nxt
    compile_cubin(src, arch=mod.arch, entry=mod.entry, nvshmem=False)
