// tilescale_call.cuh: how a launch of a generated kernel starts and ends (docs/calling_convention.md,
// "End of a call" and "Zero-copy"): the meeting of the PEs, the entry and end-of-call barriers, the
// zeroing of the scratch, and the publishing and reading of zero-copy buffers' addresses. Inlined into
// every generated kernel after tilescale_device.cuh, whose helpers (ts_wait, ts_peer_ptr, ...) it uses.

// ---- start and end of a call (docs/calling_convention.md, "End of a call") ----
// The handler neither zeroes the scratch nor runs host-side barriers: the kernel leaves its scratch
// zero for the next launch that uses the same half of the workspace (launches alternate halves by the
// parity of `seq`), proves its remote writes complete before it ends, and then advances the launch
// number (ts_launch_seq), all on the device: a launch replayed from a command buffer is a new launch.

#if TS_USES_NVSHMEM
// Thread 0 of the calling block: marks this PE arrived (word `slot(w)` = seq on every PE of the kernel's
// PE space) and waits for every other PE's arrival. Launch numbers only grow, so a word holding a later
// launch's number also proves arrival; nothing is ever cleared.
__device__ TS_HELPER void ts_call_meet(const TsLaunchArgs& args, uint64_t seq, bool exit_slots, bool signal,
                                       const char* where, const char* op) {
  const int32_t W = args.ctl_slots;
  uint64_t* slots = args.ctl + (exit_slots ? TS_CTL_EXIT(0, W) : TS_CTL_ENTRY(0));
  const int32_t me = args.pe_map[args.pe];
  if (signal) {
    for (int32_t k = 0; k < args.npes; ++k) {
#if TS_CALL_FREE
      if (k != args.pe) ts_p2p_signal_set(ts_peer_word(slots + me, args.pe_map[k], k, where, op), seq);
#else
      if (k != args.pe) nvshmemx_signal_op(slots + me, seq, NVSHMEM_SIGNAL_SET, args.pe_map[k]);
#endif
    }
  }
  // Acquire waits at system scope: what every peer did before its arrival is visible to this thread after
  // them, and to its block after the caller's __syncthreads; no further fence (a system fence here cost a
  // call about a microsecond: benchmarks/NOTES.md, issue 14).
  const TsWaitCtx wait = ts_wait_ctx(args);
  for (int32_t k = 0; k < args.npes; ++k) {
    if (k != args.pe) ts_wait<TS_CMP_GE, true, true, uint64_t>(wait, slots + args.pe_map[k], seq, k, where, op);
  }
}

// Copies n 16-byte pieces, the ones numbered first, first + stride, ... (a thread's share of a copy that
// `stride` threads make), TS_COPY_BATCH (codegen/common.py) at a time: every load of a batch before any of its stores. Written
// as a plain loop (`d[k] = s[k]`), the compiler must keep each load after the store before it (the two
// buffers might overlap), so a thread waited for one load per 16 bytes it copied: 8 waits for a warp's
// 4 KiB chunk (benchmarks/NOTES.md, 2026-12-02: the 1 MiB copy-in 1.5 us slower than the handler's copy).
#ifndef TS_COPY_BATCH
#error "TS_COPY_BATCH: the code generator defines it (codegen/common.py COPY_BATCH), before this header"
#endif
__device__ __forceinline__ void ts_copy_pieces(uint4* d, const uint4* s, int64_t n, int64_t first, int64_t stride) {
  int64_t k = first;
  for (; k + (TS_COPY_BATCH - 1) * stride < n; k += TS_COPY_BATCH * stride) {
    uint4 r[TS_COPY_BATCH];
#pragma unroll
    for (int u = 0; u < TS_COPY_BATCH; ++u) r[u] = __ldcg(s + k + u * stride);
#pragma unroll
    for (int u = 0; u < TS_COPY_BATCH; ++u) d[k + u * stride] = r[u];
  }
  for (; k < n; k += stride) d[k] = __ldcg(s + k);
}

// Staged inputs copied in by the kernel (codegen/stage_in.py, TS_STAGE_KERNEL_IN): `n` inputs, each `bytes`
// long, from XLA's buffer (args.home[home]) into the symmetric copy (args.buffers[param]), in chunks of
// TS_COPY_IN_CHUNK bytes (ts_abi.h) that the warps of whichever blocks are running claim one at a time
// (ctr[0], in the scratch: zero when the launch starts), so the copy never waits for a block that is not
// resident. Each warp counts the chunks it finished (ctr[1]); then thread 0 of every block waits until all
// are done, and fences at system scope, before the block goes on (to the entry barrier, whose arrival
// tells the peers the copies are there). The last block zeroes the counters with the rest of the scratch.
// A warp copies a 4 KiB chunk with one batch of loads (ts_copy_pieces): the code generator gives the kernel
// no more chunks than its grid has warps (codegen/stage_in.py), the handler's copy the rest.
struct TsCopyIn {
  int32_t home, param;
  int64_t bytes;
};

__device__ __forceinline__ uint64_t ts_copy_in_chunks(const TsCopyIn& in) {  // chunks of one input, the last partial
  return (static_cast<uint64_t>(in.bytes) + TS_COPY_IN_CHUNK - 1) / TS_COPY_IN_CHUNK;
}

__device__ TS_HELPER void ts_copy_in(const TsLaunchArgs& args, const TsCopyIn* ins, int n, uint64_t* ctr,
                                     const char* where) {
  uint64_t total = 0;
  for (int i = 0; i < n; ++i) total += ts_copy_in_chunks(ins[i]);
  const unsigned lane = threadIdx.x % 32u;
  for (;;) {
    uint64_t c = 0;
    if (lane == 0) c = atomicAdd(reinterpret_cast<unsigned long long*>(ctr), 1ull);
    c = __shfl_sync(0xffffffffu, c, 0);
    if (c >= total) break;
    int i = 0;
    for (uint64_t first = 0;; ++i) {  // the input chunk c falls in
      const uint64_t chunks = ts_copy_in_chunks(ins[i]);
      if (c < first + chunks) { c -= first; break; }
      first += chunks;
    }
    const int64_t at = static_cast<int64_t>(c) * TS_COPY_IN_CHUNK;
    const int64_t len = ins[i].bytes - at < TS_COPY_IN_CHUNK ? ins[i].bytes - at : TS_COPY_IN_CHUNK;
    const unsigned char* src = static_cast<const unsigned char*>(args.home[ins[i].home]) + at;
    unsigned char* dst = static_cast<unsigned char*>(args.buffers[ins[i].param]) + at;
    const int64_t vec = ((reinterpret_cast<uintptr_t>(src) | reinterpret_cast<uintptr_t>(dst)) & 15) == 0 ? len / 16 : 0;
    ts_copy_pieces(reinterpret_cast<uint4*>(dst), reinterpret_cast<const uint4*>(src), vec, lane, 32);
    for (int64_t k = vec * 16 + lane; k < len; k += 32) dst[k] = src[k];
    __syncwarp();
    if (lane == 0) {
      __threadfence();  // this warp's copies before its count
      atomicAdd(reinterpret_cast<unsigned long long*>(ctr + 1), 1ull);
    }
  }
  if (threadIdx.x == 0) {
    ts_wait<TS_CMP_GE, false, false, uint64_t>(ts_wait_ctx(args), ctr + 1, total, -1, where,
                                               "the kernel's copy of its staged inputs");
    __threadfence_system();  // what the warps copied (observed through the count) before anything peers see
  }
  __syncthreads();
}

// Entry barrier, first thing of every block, for kernels whose peers read this PE's inputs (staged
// copies the handler fills before the launch): no peer reads them before this PE's launch began,
// which is after its copies in stream order. Block (0,0,0) announces the arrival.
__device__ TS_HELPER void ts_call_start(const TsLaunchArgs& args, uint64_t seq, const char* where) {
  if (threadIdx.x == 0) {
    const bool first = blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0;
    ts_call_meet(args, seq, false, first, where, "the entry barrier (peers read this kernel's inputs)");
  }
  __syncthreads();
}
#endif

#if TS_CALL_FREE
// ---- zero-copy (docs/calling_convention.md, "Zero-copy") ----
// Published addresses: ts_pub_words and ts_pub_read (tilescale_device.cuh) give the pair's encoding.
template <bool ACQUIRE>
__device__ __forceinline__ void ts_pub_load(const uint64_t* pair, uint64_t& w0, uint64_t& w1) {
  if (ACQUIRE) asm volatile("ld.acquire.sys.global.v2.u64 {%0, %1}, [%2];" : "=l"(w0), "=l"(w1) : "l"(pair) : "memory");
  else asm volatile("ld.relaxed.sys.global.v2.u64 {%0, %1}, [%2];" : "=l"(w0), "=l"(w1) : "l"(pair) : "memory");
}

// First thing of block (0,0,0)'s thread 0 in a call-free kernel with TS_STAGE_P2P params (`mask`: their
// indices): tells each kernel peer where this launch's copy of each such buffer is, XLA's buffer (bit b of
// args.direct_mask), which the peer reaches through its mapping of this PE's allocation, or the staged copy
// in the symmetric workspace (bit 0 of the address set), which it reaches through nvshmem_ptr: one 16-byte
// release store per peer and buffer (above), so that what this PE's stream wrote into the buffer before the
// launch is visible to the peer that reads it. A peer reads the words of launch `seq` only after its own
// launch `seq` began, and no PE starts launch seq + 1 before every PE has passed launch seq's end-of-call
// barrier, so a word is never overwritten while a peer may still read it.
__device__ TS_HELPER void ts_publish_params(const TsLaunchArgs& args, uint64_t seq, uint32_t mask,
                                           const char* where) {
  // A PE space of one PE has no peer to tell: no load of the PE map (it held up the block's work)
  if (args.npes < 2 || threadIdx.x != 0 || blockIdx.x != 0 || blockIdx.y != 0 || blockIdx.z != 0) return;
  const int32_t W = args.ctl_slots, me = args.pe_map[args.pe];
  for (int b = 0; b < TS_MAX_BUFFERS; ++b) {
    if (((mask >> b) & 1u) == 0u) continue;
    uint64_t w0, w1;
    ts_pub_words(reinterpret_cast<uint64_t>(args.buffers[b]) | (((args.direct_mask >> b) & 1u) ? 0ull : 1ull), seq,
                 w0, w1);
    for (int32_t k = 0; k < args.npes; ++k) {
      if (k == args.pe) continue;
      uint64_t* pair = ts_peer_word(args.ctl + TS_CTL_PUB(me, b, W), args.pe_map[k], k, where,
                                    "publishing a buffer's address");
      asm volatile("st.release.sys.global.v2.u64 [%0], {%1, %2};" ::"l"(pair), "l"(w0), "l"(w1) : "memory");
    }
  }
}

// Waits (with the wait timeout) until the pair at `pair` holds launch `seq`'s address, and returns it; on a
// wait that gave up, 0 (the caller then uses this PE's own copy: the launch's outputs are garbage, and no
// write may reach a peer's buffer that a stale word names).
__device__ __forceinline__ uint64_t ts_wait_published(const TsWaitCtx& c, const uint64_t* pair, uint64_t seq,
                                                      int64_t peer, const char* where, const char* op) {
  uint64_t w0, w1, at;
  ts_pub_load<true>(pair, w0, w1);
  if (ts_pub_read(w0, w1, seq, at)) return at;
  uint64_t start = 0;
  for (uint32_t n = 1;; ++n) {
    ts_pub_load<false>(pair, w0, w1);
    if (ts_pub_read(w0, w1, seq, at)) break;
    if (c.timeout_ns == 0 || n % TS_WAIT_CHECK_EVERY != 0) continue;
    const uint64_t now = ts_globaltimer();
    if (start == 0) {  // the clock starts at the first check, as in ts_wait_slow
      start = now;
      continue;
    }
    if (ts_wait_aborted(c)) return 0;
    if (now - start >= c.timeout_ns) {
      ts_wait_gave_up(c, where, op, TS_CMP_EQ, w0 >> 32, ts_pub_tag(seq), 32, 0, peer, now - start);
      return 0;
    }
  }
  ts_acquire_fence<true>();
  return at;
}

// The peer's address of `local`, a byte of param `b` (whose pointer on this PE is `local_base`), in a
// call-free kernel where `b` is TS_STAGE_P2P: waits until the peer has published its copy for this
// launch, then translates: a staged copy through nvshmem_ptr, XLA's buffer through this PE's mapping of
// the peer's allocation (args.peer_allocs). Every thread of the block may call it.
__device__ TS_HELPER unsigned char* ts_peer_param_ptr(const TsLaunchArgs& args, uint64_t seq, int b,
                                                      const void* local_base, const void* local, int nvshmem_pe,
                                                      int64_t kernel_pe, const char* where, const char* op) {
  // This PE's own copy (a put or get to itself): its pointer, whatever it is; nothing is published to self.
  if (kernel_pe == args.pe) return static_cast<unsigned char*>(const_cast<void*>(local));
  const uint64_t at = ts_wait_published(ts_wait_ctx(args), args.ctl + TS_CTL_PUB(nvshmem_pe, b, args.ctl_slots),
                                        seq, kernel_pe, where, op);
  if (at == 0) return static_cast<unsigned char*>(const_cast<void*>(local));  // the wait gave up
  const uint64_t off = static_cast<uint64_t>(static_cast<const unsigned char*>(local) -
                                             static_cast<const unsigned char*>(local_base));
  if (at & 1ull) return ts_peer_ptr(reinterpret_cast<const void*>(at & ~1ull), nvshmem_pe, kernel_pe, where, op) + off;
  const TsPeerAlloc* t = args.peer_allocs;
  if (t != nullptr) {
    t += static_cast<size_t>(nvshmem_pe) * TS_PEER_ALLOCS;
    for (int i = 0; i < TS_PEER_ALLOCS; ++i) {
      if (at - t[i].base < t[i].size) return reinterpret_cast<unsigned char*>(t[i].mapped + (at - t[i].base)) + off;
    }
  }
  ts_fail(where, "zero-copy: the peer's buffer lies in memory this PE has not mapped (value: the kernel PE, "
          "limit: its NVSHMEM PE)", kernel_pe, nvshmem_pe);
  return nullptr;
}
#endif

#if TS_USES_NVSHMEM && !TS_CALL_FREE
// ---- staged outputs copied out by the kernel (codegen/stage_out.py, TS_STAGE_KERNEL_OUT) ----
// One window of a staged output: `rows` runs of `row_bytes`, `pitch` bytes apart, from `offset` bytes into
// param `param`'s symmetric copy (args.buffers) and XLA's buffer (args.home[home]) alike.
struct TsStageWindow {
  int32_t home, param;
  int64_t offset, rows, row_bytes, pitch;
};

// Every thread of the block, after a wait that proved the window landed (its signal came after the data,
// and the wait's block barrier ordered this block's reads after it): copies the window to XLA's buffer, in
// 16-byte pieces when every address and length allows. The loads bypass L1 (`ld.global.cg`): nothing in
// this launch read the window before, and L2 holds what the put delivered.
__device__ TS_HELPER void ts_stage_out(const TsLaunchArgs& args, const TsStageWindow& w) {
  const unsigned char* src = static_cast<const unsigned char*>(args.buffers[w.param]) + w.offset;
  unsigned char* dst = static_cast<unsigned char*>(args.home[w.home]) + w.offset;
  const int64_t run = w.row_bytes;
  const bool vec = ((reinterpret_cast<uintptr_t>(src) | reinterpret_cast<uintptr_t>(dst) | run | w.pitch) & 15) == 0;
  if (vec && (w.pitch == run || w.rows == 1)) {  // one contiguous run (whole rows): in batches of loads
    ts_copy_pieces(reinterpret_cast<uint4*>(dst), reinterpret_cast<const uint4*>(src), w.rows * run / 16,
                   threadIdx.x, blockDim.x);
  } else if (vec) {
    const int64_t per_row = run / 16, pieces = w.rows * per_row;
    for (int64_t i = threadIdx.x; i < pieces; i += blockDim.x) {
      const int64_t at = (i / per_row) * w.pitch + (i % per_row) * 16;
      *reinterpret_cast<uint4*>(dst + at) = __ldcg(reinterpret_cast<const uint4*>(src + at));
    }
  } else {
    for (int64_t i = threadIdx.x; i < w.rows * run; i += blockDim.x) {
      const int64_t at = (i / run) * w.pitch + i % run;
      dst[at] = __ldcg(src + at);
    }
  }
}
#endif

// Last thing of every block. The last block to finish (counted in ctl[TS_CTL_BLOCKS_DONE]) waits, for a
// kernel that communicates, until every PE of its PE space has finished with its remote writes (each
// block quiets before it counts itself, so a PE's arrival proves its puts complete), and then zeroes
// the `scratch_bytes` of scratch this launch used: no PE writes into that half of the workspace again
// before every PE has passed this launch's barrier, and the next launch that uses it is two launches on.
// Then it advances ctl[TS_CTL_ENDED] to this launch's number: every block has read it before (each
// counted itself done after its last read), and the next launch starts after this one ends.
// `meet` false (codegen/end_of_call.py): the kernel proved completion itself (every remote write into this
// PE is a put whose signal this PE waited for, and no peer reads its memory): no fence, no meeting.
// `seq`: the kernel's ts_seq, read when the kernel started, so that no thread waits for that load here.
__device__ TS_HELPER void ts_call_end(const TsLaunchArgs& args, uint64_t seq, uint32_t scratch_bytes,
                                      const char* where, bool meet) {
  // No static shared memory here: a kernel may use all the dynamic shared memory a block can have.
  int last = 0;
  __syncthreads();
  // A PE space of one PE has no peer to prove anything to: its writes are all local, and the kernel's end
  // makes them visible; the system-scope fence and the meeting are for peers (a one-PE call cost 3.4-3.8 us
  // more than a plain copy kernel with them: benchmarks/NOTES.md). Nor has a kernel that proved completion:
  // its puts' signals were released after their stores, and its peers waited for them.
  const bool peers = meet && args.npes > 1;
  if (threadIdx.x == 0) {
    const unsigned int nblocks = gridDim.x * gridDim.y * gridDim.z;
#if TS_USES_NVSHMEM && !TS_CALL_FREE
    nvshmem_quiet();
#elif TS_CALL_FREE
    // Every remote write of this block was a P2P store: fenced, complete. A grid of one block leaves that to its
    // meeting, whose signals are release stores at system scope made after the block barrier above: they
    // publish every write of the block before them (a fence of its own cost the two-PE 4 KiB shift ~0.3 us in
    // one A/B round: benchmarks/NOTES.md, fifteenth session).
    if (peers && nblocks != 1u) __threadfence_system();
#endif
    // A grid of one block is its own last block: no count, no fences between blocks.
    unsigned int* done = reinterpret_cast<unsigned int*>(args.ctl + TS_CTL_BLOCKS_DONE);
    if (nblocks == 1u) {
      last = 1;
    } else {
      __threadfence();
      last = atomicAdd(done, 1u) == nblocks - 1u;
      if (last) __threadfence();
    }
    if (last) {
#if TS_USES_NVSHMEM
      if (peers) ts_call_meet(args, seq, true, true, where, "the end-of-call barrier");
#endif
      if (nblocks != 1u) atomicExch(done, 0u);
    }
  }
  if (!__syncthreads_or(last)) return;
  if (scratch_bytes != 0) {
    // The scratch is 256-byte aligned and its size a multiple of 256 (codegen/layout.py).
    uint4* words = reinterpret_cast<uint4*>(ts_launch_scratch(args, seq));
    for (uint32_t i = threadIdx.x; i < scratch_bytes / 16u; i += blockDim.x) words[i] = make_uint4(0u, 0u, 0u, 0u);
  }
#if TS_USES_NVSHMEM
  __syncthreads();  // every thread of this block has its scratch address before the number moves
  if (threadIdx.x == 0) {
    asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(args.ctl + TS_CTL_ENDED), "l"(seq) : "memory");
  }
#endif
}
