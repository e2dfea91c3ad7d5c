"""The generated CUDA of issue 3's primitives: read as text (scopes, checks, layout, the team
barrier), and built with nvcc against NVSHMEM (two kernels that hold every primitive, and every
new example kernel), plus the `staged` flags the FFI call gets."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import jax
import numpy as np
import pytest

from jax_tilescale.codegen import CudaModule, generate_cuda
from jax_tilescale.compiler import compile_cubin
from jax_tilescale.lowering import staged_flags
from tests.conftest import load_example

from . import primitive_kernels

I32 = np.int32


def stmt(module: CudaModule, index: int) -> str:
    src = module.source
    start = src.index(f"// [{index}] ")
    nxt = src.find(f"// [{index + 1}] ", start)
    return src[start:] if nxt < 0 else src[start:nxt]


@pytest.fixture(scope="module")
def p2p() -> CudaModule:
    return generate_cuda(primitive_kernels.point_to_point())


@pytest.fixture(scope="module")
def coll() -> CudaModule:
    return generate_cuda(primitive_kernels.collectives(grid=(2,)))


def test_scopes_pick_the_nvshmem_function_and_the_threads(p2p: CudaModule) -> None:
    thread, warp, block = stmt(p2p, 0), stmt(p2p, 1), stmt(p2p, 3)
    assert "if (threadIdx.x == 0) {\n      nvshmem_putmem(ts_dst, ts_src, 2048, ts_target);" in thread
    assert "if (threadIdx.x < 32) {" in warp and "8 runs of 128 bytes" in warp  # a column slice: row by row
    assert "nvshmemx_putmem_nbi_warp(ts_dst + ((int64_t)ts_c0 * 64) * 4, " in warp
    assert "nvshmemx_putmem_signal_block(" in block and "if (threadIdx.x" not in block
    # Operands (and their checks, which may stop the kernel) are computed by every thread first.
    assert thread.index("ts_target_pe(") < thread.index("if (threadIdx.x == 0)")
    assert thread.index("unsigned char* const ts_dst = p_out0 + ") < thread.index("if (threadIdx.x == 0)")
    # Column slices go row by row; the signal follows a fence, from one thread of the scope.
    thread_sig, warp_sig = stmt(p2p, 4), stmt(p2p, 5)
    assert "nvshmem_putmem_nbi(ts_dst + " in thread_sig
    assert thread_sig.index("nvshmem_fence();") < thread_sig.index(
        "nvshmemx_signal_op(ts_sig, ts_sig_value, NVSHMEM_SIGNAL_SET, ts_target);"
    )
    assert "nvshmemx_putmem_nbi_warp(ts_dst + " in warp_sig
    assert warp_sig.index("nvshmem_fence();") < warp_sig.index("__syncwarp();") < warp_sig.index("nvshmemx_signal_op(")


def test_run_time_size_reads_the_input_and_checks_rows(p2p: CudaModule) -> None:
    sized = stmt(p2p, 6)
    assert "ts_load<int32_t>(p_counts, ts_bound(ts_pe, 4, ts_where))" in sized
    assert "const size_t ts_bytes = ts_row_bytes(" in sized and ", 256, (int64_t)0, 32, ts_pe, 32, ts_where);" in sized
    assert "nvshmemx_putmem_nbi_block(p_out3 + (ts_pe * 64) * 4, p_a, ts_bytes, ts_target);" in sized


def test_signal_op_fence_and_gets(p2p: CudaModule) -> None:
    assert "nvshmem_fence();\n    __syncthreads();" in stmt(p2p, 7)
    assert "nvshmemx_signal_op(ts_sig, ts_sig_value, NVSHMEM_SIGNAL_ADD, ts_target);" in stmt(p2p, 8)
    assert "nvshmemx_getmem_block(p_tile, p_a + " in stmt(p2p, 11)
    assert "nvshmem_getmem_nbi(ts_dst, ts_src, 256, ts_target);" in stmt(p2p, 12)
    assert "source PE outside the kernel PE space" in stmt(p2p, 12)
    assert "nvshmemx_getmem_nbi_block(p_tile + 768, p_a + 800, 32, ts_target);" in stmt(p2p, 15)


def test_peer_copies_go_through_nvshmem_ptr_with_a_reachability_check(p2p: CudaModule) -> None:
    put, warp_put, get = stmt(p2p, 17), stmt(p2p, 18), stmt(p2p, 19)
    assert "unsigned char* const ts_peer = ts_peer_ptr(p_out0, ts_peer_nv, ts_peer_k, ts_where, \"put_block\");" in put
    assert "ts_dst = reinterpret_cast<uint4*>(ts_peer + " in put
    assert put.index("ts_dst[ts_c0] = ts_src[ts_c0];") < put.index("__threadfence_system();") < put.index(
        "__syncthreads();"
    )
    assert "if (threadIdx.x < 32) {" in warp_put and "ts_i += 32u" in warp_put
    assert "ts_peer_ptr(p_sym, " in get and "ts_src = reinterpret_cast<const uint4*>(ts_peer)" in get
    assert "__threadfence_system" not in get
    assert "is not load/store reachable" in p2p.source and "nvshmem_ptr returned null" in p2p.source


def test_waits_poll_local_and_remote_words_and_give_up_after_the_timeout(p2p: CudaModule) -> None:
    # ts_wait (the device header): system-scope polls with back-off, the wait site for a timeout's report.
    local, remote, remote_out = stmt(p2p, 22), stmt(p2p, 23), stmt(p2p, 24)
    assert "const int32_t* const ts_word = reinterpret_cast<int32_t*>(p_word);" in local
    assert "ts_wait<TS_CMP_EQ, true, true, int32_t>(ts_wait_ctx(args), ts_word, ts_value, -1, ts_where, " \
        '"T.wait_eq on word[0]");' in local  # the record names the word by the kernel's name
    assert "ts_peer_ptr(p_word, ts_peer_nv" in remote and "reinterpret_cast<int32_t*>(ts_peer) + 1" in remote
    assert "ts_wait_ctx(args), ts_word, ts_value, ts_peer_k, ts_where, " in remote  # names the polled PE
    assert "ts_wait<TS_CMP_NE, true, true, uint64_t>(" in remote_out
    assert "ts_load<int32_t>(p_counts, 0)" in stmt(p2p, 27)


def test_scratch_layout_of_signals_symmetric_buffers_and_barriers(p2p: CudaModule, coll: CudaModule) -> None:
    # 4 signal words (32 bytes), then symmetric buffers at 128-byte offsets.
    assert "p_sig = ts_scratch + 0;" in p2p.source and "p_sym = ts_scratch + 128;" in p2p.source
    assert "p_word = ts_scratch + 2176;" in p2p.source and p2p.scratch_bytes == 2304
    # Collectives: grid barrier words, then the two TsTeamBarrier states (barrier_all's and the team's).
    assert coll.grid_barrier
    assert "reinterpret_cast<unsigned int*>(ts_scratch + 512)" in coll.source
    assert "ts_pe_bar = reinterpret_cast<TsTeamBarrier*>(ts_scratch + 520);" in coll.source
    assert "ts_team_bar = reinterpret_cast<TsTeamBarrier*>(ts_scratch + 536);" in coll.source


def test_barriers_and_collectives_use_the_pe_space_barrier(coll: CudaModule) -> None:
    sync_all = stmt(coll, 2)
    assert "nvshmem_quiet" not in sync_all
    assert 'ts_team_barrier(ts_pe_bar, args.pe_map, args.npes, ts_wait_ctx(args), ts_where, "T.sync_all' in sync_all
    assert "nvshmem_quiet();" in stmt(coll, 1)
    team = stmt(coll, 3)
    assert team.index("nvshmem_quiet();") < team.index("__threadfence_system();") < team.index("ts_team_barrier(")
    assert "if (threadIdx.x == 0) ts_team_barrier(ts_team_bar, args.pe_map, args.npes, ts_wait_ctx(args), " in team
    assert "nvshmem_quiet" not in stmt(coll, 5)  # sync_all_block
    bcast = stmt(coll, 7)
    assert "if (ts_pe == ts_root) {" in bcast and "for (int32_t ts_q = 0; ts_q < args.npes; ++ts_q) {" in bcast
    assert "nvshmem_putmem_nbi(ts_dst, ts_src, 512, args.pe_map[ts_q]);" in bcast
    fcollect = stmt(coll, 10)
    assert "unsigned char* const ts_dst = p_gathered + ((ts_pe * 4) * 32) * 4;" in fcollect
    assert "nvshmem_putmem_nbi(ts_dst, ts_src, 512, args.pe_map[ts_q]);" in fcollect
    assert "nvshmemx_barrier_all" not in coll.source  # teams: never NVSHMEM's world barrier


def example_kernels() -> dict[str, object]:
    """Every new example's kernel, traced for 2 PEs (the GPU machine's)."""
    f32, bf16 = np.dtype(np.float32), jax.numpy.bfloat16
    sd = jax.ShapeDtypeStruct
    a2a = load_example("all_to_all").all_to_all(32, 64, 2, bf16)
    put = load_example("primitives/put_block").push(64, 64, np.dtype(np.float16))
    get = load_example("primitives/get_block").pull(64, 64, f32)
    sync = load_example("primitives/sync").team_ops(16, 32, 2, f32, "x")
    queries = load_example("nvshmem_queries").queries(16, 32, f32)
    return {
        "all_to_all": a2a.trace(sd((32, 64), bf16), sd((3,), I32), sd((2,), I32), mesh_axes=("x",), num_pes=2),
        "put_block": put.trace(sd((64, 64), np.float16), mesh_axes=("x",), num_pes=2),
        "get_block": get.trace(sd((64, 64), f32), mesh_axes=("x",), num_pes=2),
        "sync": sync.trace(sd((16, 32), f32), mesh_axes=("x",), num_pes=2),
        "nvshmem_queries": queries.trace(sd((256,), I32), sd((16, 32), f32), mesh_axes=("x", "y"), num_pes=2,
                                         mesh_axis_sizes=(1, 2)),
    }


def test_staged_flags_follow_what_peers_touch() -> None:
    k = example_kernels()
    assert staged_flags(k["get_block"]) == [2, 0, 0]  # peers read the input: copied in
    assert staged_flags(k["put_block"]) == [0, 1, 0]  # peers store into `received`: copied out
    assert staged_flags(k["all_to_all"]) == [0, 0, 0, 0]  # puts land in symmetric scratch
    assert staged_flags(k["sync"]) == [0, 1, 1, 0, 0]  # fcollect and broadcast write outputs on peers


@pytest.fixture(scope="module")
def built(session_cache, require_nvshmem) -> dict[str, tuple[CudaModule, object]]:
    """Every primitive kernel and example kernel compiling, nvcc runs in parallel."""
    kernels = {
        "point_to_point": primitive_kernels.point_to_point(),
        "collectives": primitive_kernels.collectives(grid=(2,)),
        **example_kernels(),
    }
    modules = {name: generate_cuda(k) for name, k in kernels.items()}
    with ThreadPoolExecutor(max_workers=max(2, min(8, os.cpu_count() or 2))) as pool:
        futures = {
            name: pool.submit(compile_cubin, m.source, arch="sm_90", entry=m.entry, nvshmem=m.uses_nvshmem)
            for name, m in modules.items()
        }
        return {name: (modules[name], futures[name].result()) for name in modules}


@pytest.mark.parametrize(
    "name", ["point_to_point", "collectives", "all_to_all", "put_block", "get_block", "sync", "nvshmem_queries"]
)
def test_builds_with_nvcc(built, name: str) -> None:
    module, cubin = built[name]
    data = cubin.read_bytes()
    assert data[:4] == b"\x7fELF" and module.entry.encode() + b"\0" in data
    assert b"nvshmemi_device_state_d" in data  # linked against NVSHMEM's device library
