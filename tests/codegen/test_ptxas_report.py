"""compiler/ptxas.py: one kernel's registers, spills and ptxas's "Potential Performance Loss" messages read from the
report nvcc leaves beside each cubin, and the CUDA lowering's PerformanceWarning carrying them (nvcc on this machine,
no GPU)."""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_tilescale as ts
from jax_tilescale.codegen import gemm_sm90_edge, generate_cuda
from jax_tilescale.compiler import compile_cubin, kernel_resources, parse_report
from tests.conftest import load_example, needs_extension, needs_toolchain

gemm_example = load_example("gemm")

# Reports as ptxas 13.0 writes them (from this project's own builds): a relocatable build whose NVSHMEM device
# functions spill a little while the kernel does not, and a kernel whose accumulators do not fit.
RELOCATABLE = """\
ptxas info    : (C7504) Potential Performance Loss: 'setmaxnreg' ignored to maintain compatibility across \
compilation units.
ptxas info    : 503 bytes gmem
ptxas info    : Compiling entry function 'ts_gemm_comm' for 'sm_90a'
ptxas info    : Function properties for ts_gemm_comm
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 90 registers, used 1 barriers
ptxas info    : Compile time = 299.888 ms
ptxas info    : Function properties for _Z14nvshmemi_quietIL13threadgroup_t3EEvv
    8 bytes stack frame, 8 bytes spill stores, 8 bytes spill loads
ptxas info    : Compile time = 2.795 ms
"""
SPILLING = """\
ptxas info    : (C7511) Potential Performance Loss: wgmma.mma_async instructions are serialized due to insufficient \
register resources for the wgmma pipeline in the function 'ts_gemm_persistent'
ptxas info    : (C7512) Potential Performance Loss: wgmma.mma_async instructions are serialized due to insufficient \
register resources for the function 'ts_other'
ptxas info    : 8 bytes gmem
ptxas info    : Compiling entry function 'ts_gemm_persistent' for 'sm_90a'
ptxas info    : Function properties for ts_gemm_persistent
    960 bytes stack frame, 1312 bytes spill stores, 1444 bytes spill loads
ptxas info    : Used 240 registers, used 1 barriers, 960 bytes cumulative stack size
ptxas info    : Compile time = 377.636 ms
"""


def test_the_kernel_s_own_lines_are_read_and_nvshmem_s_functions_left_out():
    got = parse_report(RELOCATABLE, "ts_gemm_comm")
    assert (got.registers, got.stack_bytes, got.spill_stores, got.spill_loads) == (90, 0, 0, 0)
    assert got.losses == (("C7504", "'setmaxnreg' ignored to maintain compatibility across compilation units"),)
    assert got.notes() == ()  # C7504 comes with every relocatable build: nothing the kernel's author can change
    assert got.summary() == "90 regs, spills 0/0 B"


def test_spills_and_serialized_wgmma_are_noted_and_another_function_s_loss_is_not():
    got = parse_report(SPILLING, "ts_gemm_persistent")
    assert (got.registers, got.stack_bytes, got.spill_stores, got.spill_loads) == (240, 960, 1312, 1444)
    assert got.losses == (("C7511", "wgmma.mma_async instructions are serialized due to insufficient register "
                                    "resources for the wgmma pipeline"),)
    assert got.wgmma_serialized and got.summary() == "240 regs, spills 1312/1444 B, wgmma serialized"
    spill, serialized = got.notes()
    assert spill.startswith("ptxas spills 1312 bytes of registers to local memory and loads 1444 back (240 registers")
    assert serialized.startswith("ptxas (C7511): wgmma.mma_async instructions are serialized")


def test_a_report_without_the_kernel_reads_as_unknown_registers():
    got = parse_report(SPILLING, "ts_missing")
    assert got.registers is None and got.spill_stores == 0 and got.summary().startswith("? regs")


def _lower_for_cuda(m, n, k, **cfg):
    kern = gemm_example.gemm(m, n, k, jnp.dtype(jnp.bfloat16), **cfg)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k)).astype(jnp.bfloat16)
    b = rng.standard_normal((k, n)).astype(jnp.bfloat16)
    return jax.jit(kern).trace(a, b).lower(lowering_platforms=("cuda",))


@needs_extension
@needs_toolchain
def test_lowering_a_spilling_tile_warns_with_ptxas_s_figures(tmp_path, monkeypatch):
    """128 x 256 accumulators on one consumer warpgroup: the code generator's note says which threads fit, ptxas's
    lines say what it cost (spilled bytes, serialized wgmma), in the one warning the user sees when jitting."""
    monkeypatch.setenv("TILESCALE_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.warns(ts.PerformanceWarning) as seen:
        _lower_for_cuda(512, 512, 256, block_m=128, block_n=256, block_k=64, threads=128, num_stages=3)
    (w,) = seen
    text = str(w.message)
    assert "take threads=256" in text and "ptxas spills" in text
    assert "wgmma.mma_async instructions are serialized" in text


@needs_extension
@needs_toolchain
def test_lowering_the_table_pick_warns_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("TILESCALE_CACHE_DIR", str(tmp_path / "cache"))
    with warnings.catch_warnings():
        warnings.simplefilter("error", ts.PerformanceWarning)
        _lower_for_cuda(4096, 4096, 4096)


@needs_toolchain
@pytest.mark.parametrize("m,n,k,cfg", [
    (16, 4096, 4096, {}),  # the swapped picks: one tile a block, the transposed copy at the kernel's end
    (64, 6144, 4096, {}),
    (16384, 8192, 1024, dict(block_m=160, block_n=128, num_stages=4, persistent=True, pingpong=True)),
])
def test_the_swapped_products_compile_without_serialized_wgmma(m, n, k, cfg):
    """The transposed TMA epilogue reads the accumulators as pairs (gemm_sm90_store._transposed_lines): with one
    conversion an element ptxas serialized the main loop's wgmma at the first two shapes (C7514)."""
    kern = gemm_example.gemm(m, n, k, jnp.dtype(jnp.bfloat16), swap=True, **cfg)
    mod = generate_cuda(kern.trace(jax.ShapeDtypeStruct((m, k), jnp.bfloat16),
                                   jax.ShapeDtypeStruct((k, n), jnp.bfloat16)), "sm_90")
    got = kernel_resources(compile_cubin(mod.source, arch=mod.arch, entry=mod.entry, nvshmem=False), mod.entry)
    assert got is not None and got.registers is not None
    assert not got.wgmma_serialized and got.spill_stores == 0, got.losses


@needs_toolchain
@pytest.mark.parametrize("group_columns", [False, True])
def test_the_edge_loop_compiles_without_serialized_wgmma(monkeypatch, group_columns):
    """gemm_sm90_edge: the pick at 16384 x 8192 x 1024 with its edge column's n128 loop beside the n192 one (the
    loop duplicated, chosen once a tile) keeps 168 registers, no spills, no serialized wgmma (a branch around each
    wgmma instead: C7520); in row groups and in column groups (the table's order there)."""
    monkeypatch.setattr(gemm_sm90_edge, "EDGE_LOOP", True)
    m, n, k = 16384, 8192, 1024
    kern = gemm_example.gemm(m, n, k, jnp.dtype(jnp.bfloat16), block_m=128, block_n=192, num_stages=4,
                             persistent=True, pingpong=True, edge_last=True, group_columns=group_columns,
                             num_sms=132)
    mod = generate_cuda(kern.trace(jax.ShapeDtypeStruct((m, k), jnp.bfloat16),
                                   jax.ShapeDtypeStruct((k, n), jnp.bfloat16)), "sm_90")
    assert "ts_wgmma_m64n128k16_bf16_km_in192(" in mod.source
    got = kernel_resources(compile_cubin(mod.source, arch=mod.arch, entry=mod.entry, nvshmem=False), mod.entry)
    assert got.registers == 168 and got.spill_stores == 0 and not got.wgmma_serialized, got.losses


@needs_toolchain
@pytest.mark.parametrize("order", [dict(serpentine=True), dict(band_columns=16, band_rows=16),
                                   dict(band_columns=16, band_rows=16, group_m=4),  # the table's pick
                                   dict(band_columns=16, band_rows=16, tile_queue=True),
                                   dict(band_columns=16, band_rows=16, group_m=4, tile_queue=True, queue_tail=3)])
def test_the_pick_in_other_column_orders_compiles_without_spills(order):
    """The ping-pong pick at 16384 x 8192 x 1024 in serpentine or banded column groups (the producer's index
    arithmetic longer: the banded order computes two super-group widths' cases and selects), and banded with its
    tiles from a tile queue (the consumers read each round's ticket from shared memory): 168 registers, no
    spills, no serialized wgmma."""
    m, n, k = 16384, 8192, 1024
    kern = gemm_example.gemm(m, n, k, jnp.dtype(jnp.bfloat16), block_m=128, block_n=192, num_stages=4,
                             persistent=True, pingpong=True, group_columns=True, num_sms=132, **order)
    mod = generate_cuda(kern.trace(jax.ShapeDtypeStruct((m, k), jnp.bfloat16),
                                   jax.ShapeDtypeStruct((k, n), jnp.bfloat16)), "sm_90")
    got = kernel_resources(compile_cubin(mod.source, arch=mod.arch, entry=mod.entry, nvshmem=False), mod.entry)
    assert got.registers == 168 and got.spill_stores == 0 and not got.wgmma_serialized, got.losses


@needs_toolchain
@pytest.mark.parametrize("tile_queue,group,tail", [(False, 4, 0), (False, 8, 0), (True, 8, 0), (True, 4, 3)],
                         ids=["static-g4", "static-g8", "tile-queue-g8", "queue-tail-g4"])
def test_the_banded_pick_divides_only_by_constants(tile_queue, group, tail, tmp_path):
    """The banded order's index arithmetic (two super-group widths, a select between their divisors) compiles to
    divisions by constants (multiplications) in the static deal, and from a tile queue too: the ticket is read
    zero-extended, so with the loop's exit test its range is known. Read as a signed int, nvcc divided by the
    selected divisor at run time, 8 divisions in the PTX (10 in the SASS, in the producer's k-loop among them),
    and the kernel took 1.23-1.25x XLA's cycles against 1.02 (benchmarks/NOTES.md, forty-seventh session)."""
    import re
    import subprocess

    from jax_tilescale.compiler.nvcc import COMPILE_FLAGS, arch_flags, find_nvcc

    m, n, k = 16384, 8192, 1024
    kern = gemm_example.gemm(m, n, k, jnp.dtype(jnp.bfloat16), block_m=128, block_n=192, num_stages=4,
                             persistent=True, pingpong=True, group_columns=True, band_columns=16, band_rows=16,
                             group_m=group, tile_queue=tile_queue, queue_tail=tail or None, num_sms=132)
    mod = generate_cuda(kern.trace(jax.ShapeDtypeStruct((m, k), jnp.bfloat16),
                                   jax.ShapeDtypeStruct((k, n), jnp.bfloat16)), "sm_90")
    assert ("ts_qfull" in mod.source) == tile_queue
    assert ("< 38u ?" in mod.source) == (tail == 3)  # 41 full waves of 132 blocks: the first 38 dealt statically
    src, ptx = tmp_path / "k.cu", tmp_path / "k.ptx"
    src.write_text(mod.source)
    subprocess.run([str(find_nvcc().path), *arch_flags(mod.arch), *COMPILE_FLAGS, "-ptx", "-o", str(ptx), str(src)],
                   check=True, capture_output=True)
    by_register = re.findall(r"^\s*(?:div|rem)\.\w+\s+[^;]*,\s*%r\w*;", ptx.read_text(), re.M)
    assert not by_register, by_register[:4]


@needs_toolchain
def test_the_l2_priority_switches_compile_to_the_hinted_copies(monkeypatch):
    """gemm_sm90_store.OUTPUT_EVICT_FIRST and gemm_sm90_load.OPERANDS_EVICT_LAST (bench `/cfirst`, `/oplast`): the
    pick at 16384 x 8192 x 1024 with both assembles (the `.L2::cache_hint` forms of both bulk copies and the
    policies' `createpolicy`) and keeps 168 registers, no spills, no serialized wgmma."""
    from jax_tilescale.codegen import gemm_sm90_load, gemm_sm90_store

    monkeypatch.setattr(gemm_sm90_store, "OUTPUT_EVICT_FIRST", True)
    monkeypatch.setattr(gemm_sm90_load, "OPERANDS_EVICT_LAST", True)
    m, n, k = 16384, 8192, 1024
    kern = gemm_example.gemm(m, n, k, jnp.dtype(jnp.bfloat16), num_sms=132)
    mod = generate_cuda(kern.trace(jax.ShapeDtypeStruct((m, k), jnp.bfloat16),
                                   jax.ShapeDtypeStruct((k, n), jnp.bfloat16)), "sm_90")
    body = mod.source.split("__global__", 1)[1]
    assert body.count("ts_tma_store_2d_hint(") == 3 and "ts_tma_store_2d(" not in body
    assert body.count("ts_tma_load_2d_hint(") == 4 and "ts_tma_load_2d(" not in body
    monkeypatch.setattr(gemm_sm90_load, "OPERANDS_EVICT_LAST", "a")  # A's box only (`/alast`)
    only_a = generate_cuda(kern.trace(jax.ShapeDtypeStruct((m, k), jnp.bfloat16),
                                      jax.ShapeDtypeStruct((k, n), jnp.bfloat16)), "sm_90").source
    assert only_a.count("ts_tma_load_2d_hint(p_A_s") == 1 and only_a.count("ts_tma_load_2d(p_B_s") == 3
    got = kernel_resources(compile_cubin(mod.source, arch=mod.arch, entry=mod.entry, nvshmem=False), mod.entry)
    assert got.registers == 168 and got.spill_stores == 0 and not got.wgmma_serialized, got.losses
