"""Tiles whose rows are not a multiple of 128 bytes take the Hopper lowering in a narrower swizzle
(gemm_sm90_load.swizzle_bytes): 160- and 208-wide B and C tiles (XLA's 128x160), 32- and 16-deep A
tiles. Each side of a swizzled tile reads the width from the tile: TMA's tensor map (box and swizzle
code), wgmma's descriptors (stride and layout code), the epilogue's staging boxes, whose generated addressing
is evaluated here for every thread against the hardware's swizzle pattern. They build without spills;
tests/gpu/test_gemm_paths_gpu.py::test_narrower_swizzles_match_dot runs them."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jax_tilescale.codegen import gemm_sm90_load, generate_cuda
from jax_tilescale.codegen.gemm_sm90_load import SWIZZLES, TENSOR_MAP_FIELDS, swizzle_bytes
from jax_tilescale.compiler import compile_cubin
from tests.codegen.test_compute_codegen import _no_spills
from tests.conftest import load_example

gemm_example = load_example("gemm")
BF16 = jnp.bfloat16
S = jax.ShapeDtypeStruct


def _module(m, n, k, **cfg):
    kern = gemm_example.gemm(m, n, k, jnp.dtype(BF16), num_sms=132, **cfg)
    return generate_cuda(kern.trace(S((m, k), BF16), S((k, n), BF16)), "sm_90")


def _maps(mod) -> np.ndarray:
    return np.asarray(mod.tensor_maps, dtype=np.int64).reshape(-1, TENSOR_MAP_FIELDS)


@pytest.mark.parametrize("row_bytes,width", [(128, 128), (512, 128), (320, 64), (448, 64), (416, 32), (32, 32),
                                             (400, None), (16, None)])
def test_the_widest_swizzle_that_divides_a_row(row_bytes, width):
    assert swizzle_bytes(row_bytes) == width


# (config, the bytes of B's and C's box rows, of A's)
CASES = {
    "128x160": (dict(block_m=128, block_n=160), 64, 128),
    "128x208/t128": (dict(block_m=128, block_n=208, threads=128), 32, 128),
    "128x160/5/p/pp": (dict(block_m=128, block_n=160, num_stages=5, persistent=True, pingpong=True), 64, 128),
    "256x160/4/p": (dict(block_m=256, block_n=160, num_stages=4, persistent=True), 64, 128),
    "128x128x32/6": (dict(block_m=128, block_n=128, block_k=32, num_stages=6), 128, 64),
    "128x128x16/8": (dict(block_m=128, block_n=128, block_k=16, num_stages=8), 128, 32),
}


@pytest.mark.parametrize("case", CASES)
def test_each_side_of_a_tile_reads_its_swizzle(session_cache, require_nvcc, case):
    cfg, bc_width, a_width = CASES[case]
    m, n, k = 2048, 2048, 1024  # every row a multiple of 16 bytes: TMA loads both tiles and stores C
    mod = _module(m, n, k, **cfg)
    assert mod.arch == "sm_90a" and "wgmma" in mod.source, mod.notes
    maps = _maps(mod)
    a_map, b_map, c_map = maps  # A's and B's loads, then C's store (param order 0, 1, 2)
    assert list(maps[:, 0]) == [0, 1, 2]
    for spec, width, rows in ((a_map, a_width, cfg["block_m"]), (b_map, bc_width, cfg.get("block_k", 64)),
                              (c_map, bc_width, None)):
        assert spec[8] == SWIZZLES[width][0]  # CUtensorMapSwizzle
        assert spec[6] == width // 2  # the box's contiguous extent: one atom's row of bf16
        if rows is not None:
            assert spec[7] == rows
    # the ring descriptors: the 8-row stride and the layout code of each operand's width
    src = mod.source
    a_desc = src.split("const uint64_t ts_da_ring = ts_wgmma_desc(", 1)[1].split(";", 1)[0]
    b_desc = src.split("const uint64_t ts_db_ring = ts_wgmma_desc(", 1)[1].split(";", 1)[0]
    assert a_desc.endswith(f"{8 * a_width}u, {SWIZZLES[a_width][1]}u)")
    assert b_desc.endswith(f"{8 * bc_width}u, {SWIZZLES[bc_width][1]}u)")
    # B stored K x N is read MN-major: its leading offset is one atom of the ring's K rows
    assert f", {cfg.get('block_k', 64) * bc_width}u, " in b_desc
    _no_spills(compile_cubin(src, arch=mod.arch, entry=mod.entry, nvshmem=False))


def test_thread_copied_tiles_take_the_narrower_layout():
    mod = _module(1024, 1001, 512, block_m=128, block_n=160)  # B's rows 2002 bytes: no tensor map
    assert "ts_swizzled_chunk_from_global<2, 64>(" in mod.source
    assert [int(s[8]) for s in _maps(mod)] == [SWIZZLES[128][0]]  # A's map only; C stored from registers


def test_a_row_no_swizzle_divides_is_left_to_the_portable_path_with_the_reason():
    mod = _module(1024, 1024, 512, block_m=128, block_n=200)  # 400-byte rows of B
    assert "wgmma.mma_async" not in mod.source and mod.arch != "sm_90a"
    assert any("tile B_s is 64 x 200: its contiguous dimension must be a multiple of 16" in note
               for note in mod.notes), mod.notes


def _c_to_python(expr: str) -> str:
    """An unsigned C index expression of the epilogue as Python (integer division, no `u` suffixes)."""
    return re.sub(r"(\d+)u\b", r"\1", expr).replace("threadIdx.x", "tid").replace("/", "//")


def _canonical(row: int, col_bytes: int, width: int) -> int:
    """Byte offset of (row, byte col_bytes) in a box of `width`-byte rows in the hardware's swizzle (the layout
    TMA's swizzled stores read: 16-byte chunk c of row r at c ^ ((r * width / 128) % (width / 16)))."""
    chunk, byte = divmod(col_bytes, 16)
    return row * width + ((chunk ^ ((row * width // 128) % (width // 16))) << 4) + byte


@pytest.mark.parametrize("cfg,width", [
    (dict(block_m=128, block_n=256), 128),
    (dict(block_m=256, block_n=128), 128),  # two slabs per warpgroup
    (dict(block_m=128, block_n=160), 64),
    (dict(block_m=128, block_n=208, threads=128), 32),
    (dict(block_m=128, block_n=96, threads=128), 64),
    (dict(block_m=64, block_n=112, threads=128), 32),
])
def test_the_epilogue_writes_each_element_where_its_box_holds_it(cfg, width):
    """The staging writes of the TMA-store epilogue, evaluated for every consumer thread and accumulator pair:
    each pair lands where the box that the leader stores holds its (row, column) in the box's swizzle, and
    together they fill every box exactly once."""
    m, n = 2048, 2048
    mod = _module(m, n, 1024, **cfg)
    src = mod.source[mod.source.index("char* const ts_box"):]
    r_expr = _c_to_python(re.search(r"const uint32_t ts_r = (.*?);", src).group(1))
    t_expr = _c_to_python(re.search(r"const uint32_t ts_t = (.*?);", src).group(1))
    bounds = {v: int(b) for v, b in re.findall(r"for \(int (ts_[mjh]) = 0; \1 < (\d+); \+\+\1\)", src)}
    at_expr = _c_to_python(re.search(r"\*reinterpret_cast<__nv_bfloat162\*>\(ts_box \+ \((.*)\)\) =", src).group(1))
    boxes = [(int(off), int(col)) for off, col in
             re.findall(r"ts_tma_store_2d\(&ts_maps\.m\[\d+\], ts_box \+ (\d+), \(int32_t\)\(.*?\)\) \+ (\d+), ", src)]
    box_cols = width // 2
    assert [col for _, col in boxes] == list(range(0, cfg["block_n"], box_cols))
    box_bytes = cfg["block_m"] * width
    assert [off for off, _ in boxes] == [b * box_bytes for b in range(len(boxes))]
    written = np.zeros(len(boxes) * box_bytes, np.int32)
    for tid in range(cfg.get("threads", 256)):
        lane = tid % 32
        ts_r = eval(r_expr, {"tid": tid})
        ts_t = eval(t_expr, {"tid": tid, "ts_r": ts_r})
        for ts_m in range(bounds["ts_m"]):
            for ts_j in range(bounds["ts_j"]):
                for ts_h in range(bounds["ts_h"]):
                    got = eval(at_expr, {"ts_t": ts_t, "ts_m": ts_m, "ts_j": ts_j, "ts_h": ts_h})
                    row, col = ts_r + 64 * ts_m + 8 * ts_h, ts_j * 8 + (lane % 4) * 2
                    box = col // box_cols
                    assert got == boxes[box][0] + _canonical(row, (col % box_cols) * 2, width), (tid, ts_m, ts_j)
                    written[got:got + 4] += 1  # a bf16 pair
    assert np.all(written == 1)


def test_the_producers_thread_copies_write_each_chunk_where_tma_would(tmp_path):
    """`ts_swizzled_chunk_offset<W>` (tilescale_sm90.cuh: where a thread-copied 16-byte chunk of a tile row lands),
    compiled for the host and run for every row and chunk of a tile of 64 rows and four atoms, at each width:
    the positions TMA's swizzled boxes give the same elements, atom after atom."""
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("g++ is not on the PATH")
    header = (Path(gemm_sm90_load.__file__).parent / "tilescale_sm90.cuh").read_text()
    start = header.index("template <int W>\n__device__ __forceinline__ uint32_t ts_swizzled_chunk_offset")
    function = header[start:header.index("\n}\n", start) + 3]
    rows, atoms = 64, 4
    program = "\n".join([
        "#include <cstdint>", "#include <cstdio>", "#define __device__", "#define __forceinline__ inline",
        function,
        "int main() {",
        *(f"  for (uint32_t r = 0; r < {rows}; ++r) for (uint32_t c = 0; c < {atoms * w // 16}; ++c) "
          f"std::printf(\"%u\\n\", ts_swizzled_chunk_offset<{w}>(r, c, {rows}u));" for w in SWIZZLES),
        "}",
    ])
    (tmp_path / "chunks.cc").write_text(program)
    subprocess.run([gxx, "-O1", "-o", str(tmp_path / "chunks"), str(tmp_path / "chunks.cc")], check=True)
    got = [int(v) for v in subprocess.run([str(tmp_path / "chunks")], check=True, capture_output=True,
                                          text=True).stdout.split()]
    want = [a * rows * w + _canonical(r, (c % (w // 16)) * 16, w)
            for w in SWIZZLES for r in range(rows) for c in range(atoms * w // 16) for a in [c // (w // 16)]]
    assert got == want
