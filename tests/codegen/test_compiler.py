"""The compiler driver: cache hits, corrupted entries, bad sources, missing tools, concurrency.

These use small kernels built without NVSHMEM (about a second of nvcc each), except where
NVSHMEM itself is the subject.
"""

from __future__ import annotations

import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from jax_tilescale.codegen import generate_cuda
from jax_tilescale.compiler import cache, compile_cubin, nvcc, ptxas_report
from jax_tilescale.errors import CompileError

from . import kernels

PLAIN = """
extern "C" __global__ void ts_plain(float* out) { out[threadIdx.x] = 2.0f * threadIdx.x; }
"""


@pytest.fixture
def count_nvcc(monkeypatch) -> list[str]:
    """Records each nvcc step the driver runs."""
    calls: list[str] = []
    real = nvcc._run

    def counting(cmd, what, source):
        calls.append(what)
        return real(cmd, what, source)

    monkeypatch.setattr(nvcc, "_run", counting)
    return calls


def test_compile_then_hit(fresh_cache, require_nvcc, count_nvcc):
    path = compile_cubin(PLAIN, entry="ts_plain", nvshmem=False)
    assert path.is_file() and path.parent.parent == fresh_cache
    assert (path.parent / "ts_plain.cu").read_text() == PLAIN  # kept for reading
    assert count_nvcc == ["compile"]  # no NVSHMEM: one whole-program step, no device link
    assert compile_cubin(PLAIN, entry="ts_plain", nvshmem=False) == path
    assert count_nvcc == ["compile"]  # served from the cache
    assert "ptxas" in (ptxas_report(path) or "")
    other_arch = compile_cubin(PLAIN, arch="sm_80", entry="ts_plain", nvshmem=False)
    assert other_arch != path  # the arch is part of the key


@pytest.mark.parametrize("damage", ["garbage", "truncate", "no_checksum", "bad_checksum"])
def test_corrupted_entry_is_rebuilt(fresh_cache, require_nvcc, count_nvcc, damage):
    path = compile_cubin(PLAIN, entry="ts_plain", nvshmem=False)
    good = path.read_bytes()
    checksum = cache.checksum_path(path)
    if damage == "garbage":
        path.write_bytes(b"\x00garbage" * 100)
    elif damage == "truncate":
        path.write_bytes(good[: len(good) // 2])
    elif damage == "no_checksum":
        checksum.unlink()
    else:
        checksum.write_text("0" * 64)
    assert not cache.is_valid(path)
    again = compile_cubin(PLAIN, entry="ts_plain", nvshmem=False)
    assert again == path and cache.is_valid(path)
    assert (
        path.read_bytes()[:4] == b"\x7fELF" and b"ts_plain\0" in path.read_bytes()
    )  # nvcc output varies by a few bytes
    assert count_nvcc.count("compile") == 2


def test_syntax_error_names_the_saved_source(fresh_cache, require_nvcc):
    bad = 'extern "C" __global__ void ts_bad(float* out) { out[0] = 1.0f +; }\n'
    with pytest.raises(CompileError) as info:
        compile_cubin(bad, entry="ts_bad", nvshmem=False)
    message = str(info.value)
    saved = next(fresh_cache.glob("*/ts_bad.cu"))
    assert str(saved) in message and saved.read_text() == bad
    assert "expected an expression" in message  # nvcc's own words
    assert (saved.parent / "nvcc.log").is_file()
    assert not list(fresh_cache.glob("*/ts_bad.cubin"))


def test_generated_error_points_at_the_user_line(fresh_cache, require_nvcc, monkeypatch):
    # A statement whose generated code does not compile is reported at the kernel's source line.
    module = generate_cuda(kernels.local_copy())
    copy = kernels.local_copy().body[1]
    broken = module.source.replace("__syncthreads();\n  }\n#line", "__syncthreads()\n  }\n#line", 2)
    with pytest.raises(CompileError) as info:
        compile_cubin(broken, entry=module.entry, nvshmem=False)
    assert f"{Path(copy.loc.filename).name}" in str(info.value)


def test_missing_nvcc_is_a_clear_error(fresh_cache, monkeypatch, tmp_path):
    monkeypatch.setenv("TILESCALE_NVCC", str(tmp_path / "no-nvcc"))
    with pytest.raises(CompileError, match="TILESCALE_NVCC"):
        compile_cubin(PLAIN, entry="ts_plain", nvshmem=False)


def test_missing_nvshmem_names_the_package(fresh_cache, monkeypatch, tmp_path, require_nvcc):
    monkeypatch.setenv("NVSHMEM_HOME", str(tmp_path))
    with pytest.raises(CompileError, match="pip install nvidia-nvshmem-cu13"):
        compile_cubin(PLAIN, entry="ts_plain")
    # A kernel that does not communicate does not need NVSHMEM at all.
    assert compile_cubin(PLAIN, entry="ts_plain", nvshmem=False).is_file()


def test_bad_arguments(fresh_cache):
    with pytest.raises(CompileError, match="arch"):
        compile_cubin(PLAIN, arch="sm_90; rm -rf /", entry="ts_plain")
    with pytest.raises(CompileError, match="C identifier"):
        compile_cubin(PLAIN, entry="../escape")


def test_unwritable_cache_falls_back_with_a_warning(monkeypatch, tmp_path, require_nvcc):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("TILESCALE_CACHE_DIR", str(blocker / "cache"))  # cannot be created, even by root
    cache._fallback_root.cache_clear()
    with pytest.warns(RuntimeWarning, match="not writable"):
        path = compile_cubin(PLAIN, entry="ts_plain", nvshmem=False)
    assert path.is_file() and not str(path).startswith(str(blocker))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # warned once per process, not per kernel
        assert compile_cubin(PLAIN, entry="ts_plain", nvshmem=False) == path


def test_concurrent_builds_of_one_kernel_compile_once(fresh_cache, require_nvcc, count_nvcc):
    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = [pool.submit(compile_cubin, PLAIN, entry="ts_plain", nvshmem=False) for _ in range(4)]
        results = {f.result() for f in futures}
    assert len(results) == 1
    assert count_nvcc == ["compile"]
