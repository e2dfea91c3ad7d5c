"""Staging copies done by the kernel itself on GPUs, with NVSHMEM's calls ($TILESCALE_CALL_FREE=0, as across
machines): a kernel whose every write into an output is a signalled put it awaits copies each window to XLA's
buffer as its signal arrives (codegen/stage_out.py, TS_STAGE_KERNEL_OUT), a kernel whose peers read an input
copies it into its symmetric copy before its entry barrier (codegen/stage_in.py, TS_STAGE_KERNEL_IN), and the
handler copies nothing. Each result is compared with numpy on the host (NCCL refuses two ranks on one GPU), on fresh
random data, three times (both halves of the symmetric workspace); the handler's counts say who copied."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import jax_tilescale as ts
from jax_tilescale import abi
from jax_tilescale.codegen import generate_cuda
from tests.codegen import staging_kernels as K
from tests.primitives.util import assert_equal, per_device, random_rows, shard_run

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import allgather


def _ffi():
    from jax_tilescale import _ffi

    return _ffi


def _shifted(x: np.ndarray, n: int) -> np.ndarray:
    return np.roll(per_device(x, n), 1, axis=0).reshape(x.shape)


CASES = {  # name: (kernel, shape per PE, dtype)
    "column windows (2-D, 16-byte rows)": (K.column_shift(64, 512, np.float32, 32, 4), (64, 512), np.float32),
    "column windows of 6 bytes": (K.column_shift(16, 48, np.float16, 3, 2), (16, 48), np.float16),
    "crossed waits": (K.crossed_waits(64, 40, np.float32), (64, 40), np.float32),
}


@pytest.mark.parametrize("name", list(CASES))
def test_a_signalled_shift_copies_its_own_windows_out(gpu_mesh, monkeypatch, name):
    monkeypatch.setenv("TILESCALE_CALL_FREE", "0")  # NVSHMEM's calls: the output is staged
    kern, shape, dtype = CASES[name]
    n = gpu_mesh.size
    ir = K.trace(kern, shape, dtype, n)
    assert generate_cuda(ir, "sm_90").staged[1] == abi.STAGE_COPY_OUT | abi.STAGE_KERNEL_OUT
    rng = np.random.default_rng(23)
    _ffi().take_copy_out_counts()
    for _ in range(3):
        x = random_rows(rng, n, shape, dtype)
        (got,) = shard_run(kern, gpu_mesh, x)
        assert_equal(got, _shifted(x, n))
    assert _ffi().take_copy_out_counts() == (0, 3)


def test_the_allgather_push_with_nvshmem_calls(gpu_mesh, monkeypatch):
    monkeypatch.setenv("TILESCALE_CALL_FREE", "0")
    n, m, cols = gpu_mesh.size, 256, 128
    f = allgather.gather_fn(gpu_mesh, m, cols, np.dtype(np.float16), block_m=32)
    rng = np.random.default_rng(29)
    _ffi().take_copy_out_counts()
    for _ in range(3):
        x = random_rows(rng, n, (m, cols), np.float16)
        got = f(ts.testing.place(x, gpu_mesh, P("x")))
        for shard in got.addressable_shards:
            np.testing.assert_array_equal(np.asarray(shard.data), x)  # every PE holds every shard
    assert _ffi().take_copy_out_counts() == (0, 3)


PULLS = {  # name: (rows, cols, dtype, block rows): 16-byte pieces, a byte tail, several 64 KiB chunks
    "one chunk": (64, 64, np.float32, 32),
    "odd bytes": (96, 77, np.float16, 32),
    "17 chunks": (1040, 256, np.float32, 16),
}


@pytest.mark.parametrize("name", list(PULLS))
def test_a_pull_copies_its_input_in_itself(gpu_mesh, monkeypatch, name):
    monkeypatch.setenv("TILESCALE_CALL_FREE", "0")
    rows, cols, dtype, block_m = PULLS[name]
    kern = K.pull_rows(rows, cols, dtype, block_m)
    n = gpu_mesh.size
    assert generate_cuda(K.trace(kern, (rows, cols), dtype, n), "sm_90").staged[0] == (
        abi.STAGE_COPY_IN | abi.STAGE_KERNEL_IN)
    rng = np.random.default_rng(37)
    for _ in range(3):
        x = random_rows(rng, n, (rows, cols), dtype)
        (got,) = shard_run(kern, gpu_mesh, x)
        assert_equal(got, _shifted(x, n))


def test_the_switch_gives_the_copy_back_to_the_handler(gpu_mesh, monkeypatch):
    monkeypatch.setenv("TILESCALE_CALL_FREE", "0")
    monkeypatch.setenv("TILESCALE_KERNEL_STAGING", "0")
    kern = K.column_shift(32, 256, np.float32, 16, 2)  # a kernel of its own: not compiled with the switch on
    n = gpu_mesh.size
    x = random_rows(np.random.default_rng(31), n, (32, 256), np.float32)
    _ffi().take_copy_out_counts()
    (got,) = shard_run(kern, gpu_mesh, x)
    assert_equal(got, _shifted(x, n))
    assert _ffi().take_copy_out_counts() == (1, 0)

