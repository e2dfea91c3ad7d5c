"""Faults on real GPUs (run through the launcher, one process per GPU; see conftest.py).

A staged buffer that does not fit NVSHMEM's symmetric heap: every rank gets the same error, which names
NVSHMEM_SYMMETRIC_SIZE and how to raise it, and the process goes on running kernels afterwards.
Waits that nothing satisfies: a WaitTimeoutError naming kernel, PE, statement and line after the wait
timeout, and the job goes on (scripts/wait_times_out.py, run as its own two-rank job by rank 0).
(Ranks that fail or die while a peer waits on the GPU: tools/gpu_test.sh, step two_nodes_fault.)
A failed run-time check in a kernel generated call-free: a KernelCheckError naming the kernel, the line
and what failed (scripts/check_fails_call_free.py, its own process: the trap ends its CUDA context).
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import jax_tilescale as ts
from jax_tilescale import language as T
from tests.conftest import load_example

allgather = load_example("allgather")

NVSHMEM_DEFAULT_HEAP = 1 << 30  # NVSHMEM's default NVSHMEM_SYMMETRIC_SIZE
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def heap_bytes() -> int:
    """NVSHMEM_SYMMETRIC_SIZE as NVSHMEM reads it (a number with an optional K/M/G/T suffix)."""
    raw = os.environ.get("NVSHMEM_SYMMETRIC_SIZE", "").strip().upper().removesuffix("B")
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([KMGT]?)", raw)
    return int(float(m.group(1)) * _UNITS[m.group(2)]) if m else NVSHMEM_DEFAULT_HEAP


def exchange(tag: str, value: str, timeout_ms: int = 120_000) -> list[str]:
    """Every rank's `value` (through jax.distributed's key-value store)."""
    from jax_tilescale._jax_compat import distributed_client

    client = distributed_client()
    client.key_value_set(f"tests/faults_gpu/{tag}/{jax.process_index()}", value)
    keys = [f"tests/faults_gpu/{tag}/{r}" for r in range(jax.process_count())]
    return [client.blocking_key_value_get(key, timeout_ms) for key in keys]


WAIT_SCRIPT = Path(__file__).resolve().parent / "scripts" / "wait_times_out.py"
CHECK_SCRIPT = Path(__file__).resolve().parent / "scripts" / "check_fails_call_free.py"
# What the outer launcher set for this rank; the inner job must start from a clean slate.
_LAUNCH_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "NODE_RANK", "NODES", "GPUS", "MASTER_ADDR", "MASTER_PORT",
                "JAX_COORDINATOR_ADDRESS")


@pytest.mark.own_gpu
def test_a_wait_nobody_satisfies_raises_a_named_error_and_the_job_goes_on(gpu_mesh):
    # Its own job (rank 0 launches it on two of the GPUs; every rank waits for the verdict), so that if the
    # timeout failed to end a wait, only that job would hang, bounded by its --timeout.
    if jax.process_index() == 0:
        env = {k: v for k, v in os.environ.items()
               if k not in _LAUNCH_VARS and not (k.startswith("TILESCALE_") and k not in (
                   "TILESCALE_CACHE_DIR", "TILESCALE_NVCC"))}
        # This job's processes hold most of the GPU memory: the inner one takes what it needs.
        env.update(XLA_PYTHON_CLIENT_PREALLOCATE="false", NVSHMEM_SYMMETRIC_SIZE="1G", PYTHONUNBUFFERED="1")
        cmd = [sys.executable, "-m", "jax_tilescale.launch", "-n", "2", "--timeout", "240", str(WAIT_SCRIPT)]
        try:
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, check=False,
                                  cwd=str(WAIT_SCRIPT.parents[3]))
            out, rc = proc.stdout + proc.stderr, proc.returncode
        except subprocess.TimeoutExpired as e:
            out, rc = f"{e.stdout or ''}{e.stderr or ''}", "timeout"
        print(out)  # the lead reads the times and messages from the GPU log
        problems = []
        if rc != 0:
            problems.append(f"the job exited {rc}")
        for r in (0, 1):
            if f"[rank {r}] rank {r}: OK" not in out:
                problems.append(f"rank {r} did not finish")
            if f"rank {r}: caught after" not in out:
                problems.append(f"rank {r} raised no WaitTimeoutError")
        verdict = "ok" if not problems else "; ".join(problems) + "\n" + out[-6000:]
    else:
        verdict = "rank 0 decides"
    verdicts = exchange("wait_timeout", verdict, timeout_ms=330_000)
    assert verdicts[0] == "ok", verdicts[0]


@pytest.mark.own_gpu
def test_symmetric_heap_too_small_is_a_clear_error_on_every_rank(gpu_mesh):
    # NVSHMEM grows its heap on demand under CUDA VMM (seen 2026-11-30: a 10 GB workspace ran with
    # NVSHMEM_SYMMETRIC_SIZE=8G), so the heap runs out only with the GPU memory outside XLA's pool; past it,
    # nvshmem_malloc would end the process (status 255, no message), so the handler checks first, on every PE
    # together (xla_ffi/heap_check.h). Ask for more than that memory, but little enough that XLA can still
    # allocate the output itself.
    stats = jax.local_devices()[0].memory_stats() or {}
    pool = stats.get("bytes_limit", 0)
    fraction = float(os.environ.get("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.75"))
    outside = int(pool / fraction) - pool if pool else 0
    n = 8192  # float32 rows of 32 KiB
    want = max(int(heap_bytes() * 1.25), outside + (8 << 30))
    rows = math.ceil(want / (n * 4) / 64) * 64
    if rows * n * 4 > pool - (8 << 30):
        pytest.skip(f"cannot exceed the memory outside XLA's pool ({outside} bytes) inside its pool ({pool} bytes)")

    # Peers write into `dst`, so all of it is staged in the symmetric workspace, though only 64 rows change.
    @ts.kernel(out_shape=jax.ShapeDtypeStruct((rows, n), jnp.float32), grid=(1,), threads=128)
    def too_big_for_the_heap(src, dst):
        T.putmem_nbi_block(dst[0:64, :], src, pe=(T.get_pe() + 1) % T.get_pe_num())

    f = jax.jit(jax.shard_map(too_big_for_the_heap, mesh=gpu_mesh, in_specs=P("x"), out_specs=P("x")))
    x = jax.device_put(jnp.ones((gpu_mesh.size * 64, n), jnp.float32), NamedSharding(gpu_mesh, P("x")))
    from jax_tilescale import _ffi

    workspace_before = _ffi.workspace_bytes()
    try:
        jax.block_until_ready(f(x))
    except Exception as e:  # JAX wraps the handler's RESOURCE_EXHAUSTED error
        message = str(e)
    else:
        pytest.fail(f"a staged output of {rows * n * 4} bytes ran with NVSHMEM_SYMMETRIC_SIZE="
                    f"{os.environ.get('NVSHMEM_SYMMETRIC_SIZE')}: NVSHMEM grew its heap past that size")
    assert "too_big_for_the_heap" in message and "symmetric heap is too small" in message, message
    assert "Raise NVSHMEM_SYMMETRIC_SIZE" in message
    assert "XLA_PYTHON_CLIENT_MEM_FRACTION" in message and "free of" in message, message
    assert _ffi.workspace_bytes() == workspace_before  # refused before anything was freed or allocated
    # Every rank failed, and in the same way (no rank left waiting in a collective allocation).
    first = re.search(r"needs a symmetric workspace of \d+ bytes", message).group(0)
    assert exchange("heap", first) == [first] * jax.process_count()

    # The process carries on: a kernel that fits runs and is right, again and again.
    for _ in range(2):
        xs = jax.device_put(jax.random.normal(jax.random.key(3), (gpu_mesh.size * 256, 128), jnp.float32),
                            NamedSharding(gpu_mesh, P("x")))
        got = allgather.gather_fn(gpu_mesh, 256, 128, jnp.float32)(xs)
        want_ = allgather.xla_gather_fn(gpu_mesh)(xs)
        for g, w in zip(got.addressable_shards, want_.addressable_shards):
            np.testing.assert_array_equal(np.asarray(g.data), np.asarray(w.data))


def test_a_failed_check_in_a_call_free_kernel_is_a_named_error():
    """One PE, its own process: the check's record reaches the watcher before the kernel traps."""
    env = {k: v for k, v in os.environ.items() if k not in _LAUNCH_VARS}
    env.update(XLA_PYTHON_CLIENT_PREALLOCATE="false", PYTHONUNBUFFERED="1")
    proc = subprocess.run([sys.executable, str(CHECK_SCRIPT)], env=env, capture_output=True, text=True, timeout=300,
                          check=False, cwd=str(CHECK_SCRIPT.parents[3]))
    out = proc.stdout + proc.stderr
    line = next(i for i, text in enumerate(CHECK_SCRIPT.read_text().splitlines(), 1) if "# CHECKED LINE" in text)
    assert "call_free=True" in out, out[-4000:]
    assert "the call returned" not in out, out[-4000:]
    assert "KernelCheckError: kernel `gemm_then_signal`, PE 0 of 1: a check failed at " in out, out[-4000:]
    assert f"check_fails_call_free.py:{line}" in out and "target PE outside the kernel PE space" in out, out[-4000:]
    assert "(value 5, limit 1)" in out, out[-4000:]

