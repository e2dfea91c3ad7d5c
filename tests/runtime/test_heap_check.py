"""The symmetric heap check before each workspace growth (xla_ffi/heap_check.h), without a GPU: the verdict
from the request, NVSHMEM_SYMMETRIC_SIZE, the workspace so far and the free GPU memory, and the refusal's
message. (The agreement between PEs and the refusal through a kernel: tests/gpu/test_faults_gpu.py.)"""

from __future__ import annotations

import importlib.util
import re

import pytest

pytestmark = pytest.mark.skipif(importlib.util.find_spec("jax_tilescale._ffi") is None,
                                reason="GPU extension not built")

G = 1 << 30
M = 1 << 20


@pytest.fixture(scope="module")
def ffi():
    from jax_tilescale import _ffi

    return _ffi


@pytest.mark.parametrize(
    ("text", "expected"),
    [("8G", 8 * G), ("8g", 8 * G), ("512M", 512 * M), ("512MB", 512 * M), ("1.5G", 3 * G // 2), ("4096", 4096),
     ("2T", 2 << 40), ("64K", 64 << 10), ("", 7), ("lots", 7), ("8X", 7)],
)
def test_nvshmem_size_is_read_as_nvshmem_does(ffi, text, expected):
    assert ffi.parse_nvshmem_size(text, 7) == expected


def check(ffi, request, configured=G, known=0, free=20 * G, total=141 * G, min_free=None, npes=2, needed=None):
    return ffi.heap_check("ts_kern", needed or request, request, configured, known, free, total,
                          free if min_free is None else min_free, npes)


def test_a_request_inside_the_configured_heap_needs_no_free_memory(ffi):
    without, local, _ = check(ffi, 512 * M, configured=G, free=0)
    assert without and local


def test_nvshmem_keeps_a_share_of_the_configured_heap(ffi):
    # 1 GiB configured: 768 MiB are ours; more needs growth, hence free memory.
    assert check(ffi, 768 * M, free=0)[0]
    without, local, _ = check(ffi, 800 * M, free=0)
    assert not without and not local


def test_a_workspace_the_process_already_had_fits_again(ffi):
    without, local, _ = check(ffi, 10 * G, configured=G, known=10 * G, free=0)
    assert without and local


def test_growth_needs_the_request_in_whole_chunks_plus_a_margin_of_free_memory(ffi):
    # 2 GiB + 2 MiB rounds up to 2.5 GiB of chunks, plus the 1 GiB margin: 3.5 GiB.
    request = 2 * G + 2 * M
    assert not check(ffi, request, free=3 * G + 511 * M)[1]
    assert check(ffi, request, free=3 * G + 512 * M)[1]


def test_the_refusal_names_kernel_bytes_free_memory_and_the_fixes(ffi):
    _, ok, message = check(ffi, 43 * G, configured=8 * G, free=26 * G, min_free=20 * G, needed=43 * G - 4096)
    assert not ok
    assert message.startswith("kernel `ts_kern` needs a symmetric workspace of ")
    assert re.search(r"needs a symmetric workspace of \d+ bytes", message)
    assert "symmetric heap is too small" in message
    assert f"NVSHMEM_SYMMETRIC_SIZE is {8 * G} bytes" in message
    assert f"this PE has {26 * G} bytes (26.00 GiB) free" in message
    assert f"the least on any of the 2 PEs: {20 * G} bytes" in message
    assert "Raise NVSHMEM_SYMMETRIC_SIZE (e.g. NVSHMEM_SYMMETRIC_SIZE=44G)" in message
    assert "XLA_PYTHON_CLIENT_MEM_FRACTION" in message and "XLA_PYTHON_CLIENT_PREALLOCATE=false" in message
    assert "later calls that fit run as before" in message


def test_one_pe_says_nothing_about_the_others(ffi):
    message = check(ffi, 43 * G, npes=1)[2]
    assert "the least on any" not in message
