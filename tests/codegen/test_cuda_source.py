"""The generated CUDA source, read as text: entry, layout, checks and semantics helpers."""

from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import pytest

from jax_tilescale import KernelTraceError
from jax_tilescale import language as T
from jax_tilescale.codegen import LAUNCH_ARGS_BYTES, TS_ABI_VERSION, CudaModule, generate_cuda
from jax_tilescale.codegen.regions import walk_pair
from jax_tilescale.ir.nodes import Copy, Put

from . import kernels

BF16 = np.dtype(ml_dtypes.bfloat16)


def statement_block(module: CudaModule, index: int) -> str:
    """The generated code of statement `index` (from its comment to the next statement's)."""
    src = module.source
    start = src.index(f"// [{index}] ")
    nxt = src.find(f"// [{index + 1}] ", start)
    return src[start:] if nxt < 0 else src[start:nxt]


def test_entry_and_calling_convention():
    m = generate_cuda(kernels.ring_allgather(256, 128, 4, 64, np.float16))
    assert m.entry == "ts_ring_allgather"
    assert m.threads == 128 and m.grid == (4, 3, 1)
    assert m.uses_nvshmem and not m.grid_barrier
    sig = 'extern "C" __global__ void __launch_bounds__(128) ts_ring_allgather(const TsLaunchArgs args)'
    assert m.source.count(sig) == 1
    assert m.source.count("__global__") == 1
    assert f"#define TS_LAUNCH_ARGS_BYTES {LAUNCH_ARGS_BYTES}" in m.source  # the inlined jax_tilescale/abi/ts_abi.h
    assert "static_assert(sizeof(TsLaunchArgs) == TS_LAUNCH_ARGS_BYTES" in m.source
    assert f"#define TS_ABI_VERSION {TS_ABI_VERSION}" in m.source
    assert "void* buffers[TS_MAX_BUFFERS];" in m.source and "#define TS_MAX_BUFFERS 32" in m.source
    assert "extern __shared__ __align__(128) unsigned char ts_smem_raw[];" in m.source
    assert "unsigned char* const ts_smem = ts_smem_raw;" in m.source  # no Hopper plan: no realignment
    assert "#include <nvshmem.h>" in m.source and "#define TS_USES_NVSHMEM 1" in m.source
    # Inputs then outputs, in IR order.
    assert re.search(r"p_a = static_cast<unsigned char\*>\(args\.buffers\[0\]\)", m.source)
    assert re.search(r"p_b = static_cast<unsigned char\*>\(args\.buffers\[1\]\)", m.source)


def test_shared_layout_and_sizes():
    m = generate_cuda(kernels.ring_allgather(256, 128, 4, 64, np.float16))
    assert m.smem_bytes == 64 * 128 * 2 and m.scratch_bytes == 0

    def two_tiles(a, b):
        t1 = T.alloc_shared((3, 5), np.float32)  # 60 bytes: the next tile starts at 128
        t2 = T.alloc_shared((4, 8), np.float32)
        T.copy(a[0:3, 0:5], t1)
        T.copy(a[0:4, :], t2)
        T.copy(t2, b[0:4, :])
        T.copy(t1, b[4:7, 0:5])

    m = generate_cuda(
        kernels.build(
            two_tiles, name="tiles", inputs=[((8, 8), np.float32)], outputs=[((8, 8), np.float32)], grid=(1,), num_pes=1
        )
    )
    assert "p_t1 = ts_smem + 0;" in m.source and "p_t2 = ts_smem + 128;" in m.source
    assert m.smem_bytes == 256
    assert not m.uses_nvshmem and "#define TS_USES_NVSHMEM 0" in m.source


def test_scratch_layout_signals_and_grid_barrier():
    m = generate_cuda(kernels.signal_exchange(16, 64, 2, np.float32, blocks=2), p2p_peers=False)
    assert m.uses_nvshmem and m.grid_barrier
    # 4 signal words at 0..31, the barrier's two words at 32, rounded up to 256.
    assert m.scratch_bytes == 256
    assert "p_sig = ts_scratch + 0;" in m.source
    assert "reinterpret_cast<unsigned int*>(ts_scratch + 32)" in m.source
    assert "reinterpret_cast<unsigned int*>(ts_scratch + 36)" in m.source
    barrier = statement_block(m, 8)
    site = 'ts_wait_ctx(args), ts_where, "T.barrier_all (grid barrier: every block of this PE)");'
    assert barrier.count(f"ts_grid_barrier(ts_bar_count, ts_bar_gen, 2u, {site}") == 2
    # Block 0 meets the other PEs through the PE-space barrier (any PE map), not NVSHMEM's world barrier.
    team_site = 'ts_wait_ctx(args), ts_where, "T.barrier_all (team barrier: every PE)");'
    assert f"ts_team_barrier(ts_pe_bar, args.pe_map, args.npes, {team_site}" in barrier
    assert "nvshmem_quiet();" in barrier and 'const char* const ts_where = "' in barrier
    assert "TsTeamBarrier* const ts_pe_bar = reinterpret_cast<TsTeamBarrier*>(ts_scratch + 40);" in m.source
    # One block: no grid barrier and no scratch for it.
    one = generate_cuda(kernels.signal_exchange(16, 64, 2, np.float32, blocks=1))
    assert not one.grid_barrier and "ts_grid_barrier(" not in statement_block(one, 8)


def test_each_barrier_all_meets_twice_in_the_grid():
    m = generate_cuda(kernels.barrier_chain(8, 256, 2, np.float32, blocks=128), p2p_peers=False)
    assert m.grid_barrier and m.scratch_bytes == 256  # no signals: the barrier words alone
    for stmt in (1, 3):
        block = statement_block(m, stmt)
        assert block.count("ts_grid_barrier(ts_bar_count, ts_bar_gen, 128u, ts_wait_ctx(args), ts_where, ") == 2
        first, nv, second = (
            block.index("ts_grid_barrier"),
            block.index("ts_team_barrier(ts_pe_bar"),
            block.rindex("ts_grid_barrier"),
        )
        assert block.index("nvshmem_quiet();") < first < nv < second


def test_put_checks_target_pe_and_names_the_line():
    k = kernels.ring_shift(256, 64, 4, 64, np.float32)
    put = k.body[0]
    m = generate_cuda(k, p2p_peers=False)  # NVSHMEM's put (several machines); one machine: test_call_free.py
    block = statement_block(m, 0)
    assert "ts_target_pe(args.pe_map, args.npes, ts_mod((ts_pe + 1), 4, ts_where), ts_where," in block
    assert f'ts_where = "{put.loc.filename}:{put.loc.lineno}"' in block
    assert f'#line {put.loc.lineno} "{put.loc.filename}"' in block
    call = "nvshmemx_putmem_nbi_block(p_b + ((ts_bx * 64) * 64) * 4, p_a + ((ts_bx * 64) * 64) * 4, 16384, "
    assert call + "ts_target);" in block
    # The PE check itself prints the op, the PE and the line, then traps.
    assert "printf(" in m.source and "__trap();" in m.source


def test_python_floor_division_helpers_are_used():
    m = generate_cuda(kernels.python_index_math())
    copy, put = statement_block(m, 0), statement_block(m, 1)
    assert "ts_mod(((ts_bx * 3) - 4), 4, ts_where)" in copy
    assert "ts_min(ts_bx, 2)" in copy and "ts_max((ts_bx - 2), 0)" in copy
    assert "ts_floordiv((ts_bx - 5), 2, ts_where)" in put
    assert "ts_mod((ts_pe - 1), 4, ts_where)" in put
    # No raw C division or modulo on index values anywhere in the statements.
    for block in (copy, put):
        code = "\n".join(line for line in block.splitlines() if not line.strip().startswith(("//", "#line")))
        assert not re.search(r"ts_(bx|by|bz|pe)\)? [/%]", code)


def test_copy_vectorises_only_when_provably_aligned():
    m = generate_cuda(kernels.ring_allgather(256, 128, 4, 64, np.float16))
    assert "as 1024 x 16-byte accesses" in statement_block(m, 0)
    assert "uint4" in statement_block(m, 1)
    # Columns 1..33 of a 40-wide float32 row: no alignment, no vectors, and 2-D indexing.
    m = generate_cuda(kernels.local_copy())
    first = statement_block(m, 0)
    assert "as 528 x 4-byte accesses" in first
    assert "ts_c1 = ts_rest % 33u" in first and "ts_c0 * 40" in first


@pytest.mark.parametrize(
    "src_cols, dst_cols, width",
    [((0, 64), (0, 64), 16), ((8, 16), (0, 8), 16), ((4, 12), (0, 8), 8), ((2, 10), (0, 8), 4), ((1, 9), (0, 8), 2)],
)
def test_vector_width_choice(src_cols, dst_cols, width):
    def kernel(a, b):
        tile = T.alloc_shared((4, 8 if dst_cols[1] == 8 else 64), np.float16)
        T.copy(a[0:4, src_cols[0] : src_cols[1]], tile[:, dst_cols[0] : dst_cols[1]])
        T.copy(tile, b[0:4, 0 : tile.shape[1]])

    k = kernels.build(
        kernel, name="w", inputs=[((4, 64), np.float16)], outputs=[((4, 64), np.float16)], grid=(1,), num_pes=1
    )
    copy = k.body[0]
    assert isinstance(copy, Copy)
    assert walk_pair(copy.src, copy.dst).vector_bytes == width


def test_run_time_start_alignment_uses_affine_form():
    def kernel(a, b):
        bx = T.program_id(0)
        T.copy(a[T.ds(bx * 8, 8), :], b[T.ds(bx * 8, 8), :])  # offsets bx * 48 elements: 96-byte multiples
        T.copy(a[T.ds(bx + 1, 1), :], b[T.ds(bx, 1), :])  # offsets (bx + 1) * 6 elements: only 4-byte multiples

    k = kernels.build(
        kernel, name="a", inputs=[((64, 6), np.float16)], outputs=[((64, 6), np.float16)], grid=(4,), num_pes=1
    )
    first, second = k.body
    assert walk_pair(first.src, first.dst).vector_bytes == 16
    assert walk_pair(second.src, second.dst).vector_bytes == 4


def test_non_contiguous_put_goes_row_by_row_and_signals_after_a_fence():
    m = generate_cuda(kernels.signal_exchange(16, 64, 2, BF16, blocks=2), p2p_peers=False)
    fused, strided = statement_block(m, 0), statement_block(m, 1)
    assert "nvshmemx_putmem_signal_nbi_block(" in fused and "NVSHMEM_SIGNAL_ADD" in fused
    assert "16 runs of 64 bytes" in strided
    assert "nvshmemx_putmem_nbi_block(ts_dst + " in strided
    fence, signal = strided.index("nvshmem_fence();"), strided.index("nvshmemx_signal_op(")
    assert strided.index("for (uint64_t ts_row") < fence < signal
    assert "NVSHMEM_SIGNAL_SET" in strided and "(uint64_t)((ts_pe + 7))" in strided
    wait = statement_block(m, 2)
    # NVSHMEM's wait would spin forever: the header's ts_wait gives up after the wait timeout.
    assert "ts_wait<TS_CMP_GE, false, true, uint64_t>(ts_wait_ctx(args), ts_sig, ts_sig_value, -1, ts_where, " \
        '"T.signal_wait_until on sig[program_id(0)]");' in wait  # the record names the word
    assert "nvshmem_signal_wait_until" not in wait
    assert wait.index("__threadfence();") < wait.index("__syncthreads();")
    assert "ts_wait<TS_CMP_NE, " in statement_block(m, 5)
    assert "nvshmem_quiet();\n    __syncthreads();" in statement_block(m, 6)
    assert statement_block(m, 7).count("nvshmem_fence();") == 1


def test_blocking_put_and_shared_source_sync():
    def kernel(a, b):
        tile = T.alloc_shared((4, 8), np.float32)
        T.copy(a[0:4, :], tile)
        T.putmem_nbi_block(b[0:4, :], tile, pe=1)

    k = kernels.build(
        kernel, name="b", inputs=[((4, 8), np.float32)], outputs=[((4, 8), np.float32)], grid=(1,), num_pes=2
    )
    block = statement_block(generate_cuda(k, p2p_peers=False), 1)
    assert block.rstrip().endswith("}") and block.count("__syncthreads();") == 1  # the tile is read by the put
    blocking = Put(k.body[1].dst, k.body[1].src, k.body[1].pe, k.body[1].scope, blocking=True, loc=k.body[1].loc)
    k2 = type(k)(**{**k.__dict__, "body": (k.body[0], blocking)})
    assert "nvshmemx_putmem_block(" in statement_block(generate_cuda(k2, p2p_peers=False), 1)


def test_source_is_deterministic_and_line_directives_restore():
    k = kernels.signal_exchange(16, 64, 2, np.float16)
    a, b = generate_cuda(k), generate_cuda(kernels.signal_exchange(16, 64, 2, np.float16))
    assert a == b
    lines = a.source.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("#line ") and line.endswith(f'"{a.entry}.cu"'):
            assert int(line.split()[1]) == i + 2  # the next line's own number in the generated file


def test_too_many_buffers_is_a_clear_error():
    def kernel(*refs):
        T.copy(refs[0], refs[-1])

    k = kernels.build(
        kernel, name="many", inputs=[((4,), np.float32)] * 20, outputs=[((4,), np.float32)] * 13, grid=(1,), num_pes=1
    )
    with pytest.raises(KernelTraceError, match="at most 32"):
        generate_cuda(k)
