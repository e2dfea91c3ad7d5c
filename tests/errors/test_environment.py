"""A broken environment, met through a kernel (lowered for CUDA on this CPU machine, which needs no GPU):
the error reaches the user intact and names the fix, and nothing is left behind that spoils later runs."""

from __future__ import annotations

import dataclasses
import importlib
import os
import re
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_tilescale as ts
from jax_tilescale import codegen
from jax_tilescale import language as T
from jax_tilescale.compiler import cache, nvcc
from jax_tilescale.compiler.toolchain import find_nvcc, find_nvshmem
from jax_tilescale.errors import CompileError, LaunchError
from jax_tilescale.runtime import ffi_registry
from jax_tilescale.runtime import nvshmem_bootstrap as boot

HAVE_EXTENSION = importlib.util.find_spec("jax_tilescale._ffi") is not None


def _toolchain_missing() -> str | None:
    try:
        find_nvcc()
        find_nvshmem()
    except CompileError as e:
        return str(e)
    return None


needs_extension = pytest.mark.skipif(not HAVE_EXTENSION, reason="GPU extension not built")
needs_toolchain = pytest.mark.skipif(_toolchain_missing() is not None, reason=f"no toolchain: {_toolchain_missing()}")

X = np.arange(64 * 8, dtype=np.float32).reshape(64, 8)


def local_copy() -> ts.TileKernel:
    @ts.kernel(out_shape=jax.ShapeDtypeStruct((64, 8), jnp.float32), grid=(1,))
    def env_copy(src, dst):
        T.copy(src[0:64, :], dst[0:64, :])

    return env_copy


def remote_copy() -> ts.TileKernel:
    @ts.kernel(out_shape=jax.ShapeDtypeStruct((64, 8), jnp.float32), grid=(1,))
    def env_put(src, dst):
        T.putmem_nbi_block(dst, src, pe=T.get_pe())

    return env_put


def lower_for_cuda(k: ts.TileKernel) -> str:
    """The StableHLO of `k` for CUDA (compiles the kernel; no GPU needed)."""
    return jax.jit(k).trace(X).lower(lowering_platforms=("cuda",)).as_text()


def cubin_of(hlo: str) -> Path:
    return Path(re.search(r'cubin = "([^"]+)"', hlo).group(1))


def still_runs() -> None:
    np.testing.assert_array_equal(np.asarray(jax.jit(local_copy())(X)), X)  # the interpreter, on CPU


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "cache"
    monkeypatch.setenv("TILESCALE_CACHE_DIR", str(path))
    return path


@pytest.fixture
def unregistered(monkeypatch):
    monkeypatch.setattr(ffi_registry, "_registered", False)


def test_gpu_extension_missing(monkeypatch, unregistered):
    real = importlib.import_module

    def no_extension(name, *args, **kwargs):
        if name == "jax_tilescale._ffi":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(importlib, "import_module", no_extension)
    with pytest.raises(LaunchError, match=r"was not built: reinstall with the CUDA toolkit present .*pip install") as e:
        lower_for_cuda(local_copy())
    assert "interpret=True" in str(e.value)
    monkeypatch.undo()
    still_runs()


@needs_extension
def test_nvshmem4py_missing(monkeypatch, unregistered):
    @dataclasses.dataclass(frozen=True)
    class FakeGpu:
        platform: str = "gpu"
        local_hardware_id: int = 0

    monkeypatch.setattr(boot, "_info", None)
    monkeypatch.setattr(jax, "local_devices", lambda *a, **k: [FakeGpu()])  # what the bootstrap checks first
    monkeypatch.setitem(sys.modules, "nvshmem", None)
    monkeypatch.setitem(sys.modules, "nvshmem.core", None)
    with pytest.raises(LaunchError, match=r"nvshmem4py is not installed .*pip install 'jax-tilescale\[gpu\]'"):
        lower_for_cuda(remote_copy())
    assert not boot.is_initialized()
    monkeypatch.undo()
    still_runs()


@needs_extension
@needs_toolchain
def test_nvcc_failure_names_the_generated_source(monkeypatch, fresh_cache, unregistered):
    real = codegen.generate_cuda

    def broken(kernel_ir, arch="sm_90", **options):
        module = real(kernel_ir, arch, **options)
        return dataclasses.replace(module, source=module.source + "\nthis is not C++;\n")

    monkeypatch.setattr(codegen, "generate_cuda", broken)
    with pytest.raises(CompileError) as info:
        lower_for_cuda(local_copy())
    saved = next(fresh_cache.glob("*/ts_env_copy.cu"))
    assert str(saved) in str(info.value) and "this is not C++" in saved.read_text()
    assert "nvcc.log" in str(info.value)
    monkeypatch.setattr(codegen, "generate_cuda", real)
    cubin = cubin_of(lower_for_cuda(local_copy()))  # the good source builds (another cache key)
    assert cache.is_valid(cubin)
    still_runs()


@needs_extension
@needs_toolchain
def test_cubin_with_flipped_bytes_is_rebuilt(monkeypatch, fresh_cache, unregistered):
    builds: list[str] = []
    real_run = nvcc._run
    monkeypatch.setattr(nvcc, "_run", lambda cmd, what, src: builds.append(what) or real_run(cmd, what, src))
    cubin = cubin_of(lower_for_cuda(local_copy()))
    good = cubin.read_bytes()
    assert builds == ["compile"]  # no NVSHMEM: one whole-program step
    damaged = bytearray(good)
    for i in range(len(damaged) // 2, len(damaged) // 2 + 16):
        damaged[i] ^= 0xFF  # same size, same name: only the checksum can tell
    cubin.write_bytes(bytes(damaged))
    assert not cache.is_valid(cubin)
    assert cubin_of(lower_for_cuda(local_copy())) == cubin
    assert builds == ["compile"] * 2  # rebuilt, never loaded as it was
    assert cache.is_valid(cubin)
    assert cache.sha256_file(cubin) == cache.checksum_path(cubin).read_text().strip()
    still_runs()


@needs_toolchain
@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through a read-only mode (the path-based case covers root)")
def test_read_only_cache_directory_falls_back_with_a_warning(tmp_path, monkeypatch, unregistered):
    root = tmp_path / "cache"
    root.mkdir()
    root.chmod(0o500)
    monkeypatch.setenv("TILESCALE_CACHE_DIR", str(root))
    cache._fallback_root.cache_clear()
    try:
        with pytest.warns(RuntimeWarning, match="not writable"):
            cubin = cubin_of(lower_for_cuda(local_copy()))
        assert cache.is_valid(cubin) and root not in cubin.parents
    finally:
        root.chmod(0o700)
        cache._fallback_root.cache_clear()
    still_runs()
