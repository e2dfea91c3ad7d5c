// ---- Hopper (sm_90a) helpers of the GEMM lowering: shared-memory layouts, mbarriers, cp.async,
// ---- wgmma descriptors. Inlined into generated sources that use T.gemm on sm_90a.
//
// Shared tiles that feed wgmma use the hardware's swizzled layouts, "SW<W>" for a swizzle width W of
// 128, 64 or 32 bytes (the widest that divides a tile row's bytes: codegen/gemm_sm90_load.swizzle_bytes):
// a tile of R rows x C columns (columns contiguous in global memory) is cut into column atoms of
// R rows x W bytes; in row r of an atom the 16-byte chunk c sits at chunk position c ^ ((r * W / 128) %
// (W / 16)) (bits 4.. of the byte offset XORed with bits 7.., which keeps both the producer's writes and
// the tensor core's reads free of bank conflicts). Every tile starts at a 1024-byte-aligned address, so
// the swizzle phase is the row's.

__device__ __forceinline__ uint32_t ts_smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Chunk `chunk` (16 bytes) of row `r` of an SW<W> tile with R rows, any element size: the chunk's
// atom, row and swizzled position.
template <int W>
__device__ __forceinline__ uint32_t ts_swizzled_chunk_offset(uint32_t r, uint32_t chunk, uint32_t rows) {
  constexpr uint32_t per_row = W / 16;  // chunks in an atom's row
  return (chunk / per_row) * rows * W + r * W + (((chunk % per_row) ^ ((r * W / 128u) % per_row)) << 4);
}

// One 16-byte chunk of an SW<W> tile read element by element (E bytes each) from a row-major
// global matrix of g_rows x g_cols elements at element (gr, gc), zero past its edges: the
// producer's copy of a source whose rows TMA cannot address (not a multiple of 16 bytes).
template <int E, int W>
__device__ __forceinline__ void ts_swizzled_chunk_from_global(unsigned char* tile, uint32_t r, uint32_t chunk,
                                                              uint32_t rows, const unsigned char* g, int64_t gr,
                                                              int64_t gc, int64_t g_rows, int64_t g_cols) {
  // the chunk's two halves in registers; 4 loads in flight at a time, within the producer's few registers
  uint64_t lo = 0, hi = 0;
  if (gr < g_rows) {
    const unsigned char* row = g + gr * g_cols * E;
#pragma unroll 4
    for (int e = 0; e < 16 / E; ++e) {
      if (gc + e < g_cols) {
        const uint64_t v = E == 2 ? (uint64_t)__ldg(reinterpret_cast<const unsigned short*>(row) + gc + e)
                                  : (uint64_t)__ldg(row + gc + e);
        const int bit = 8 * E * e;
        if (bit < 64) lo |= v << bit; else hi |= v << (bit - 64);
      }
    }
  }
  *reinterpret_cast<uint4*>(tile + ts_swizzled_chunk_offset<W>(r, chunk, rows)) =
      make_uint4((uint32_t)lo, (uint32_t)(lo >> 32), (uint32_t)hi, (uint32_t)(hi >> 32));
}

// wgmma matrix descriptor: start address, leading/stride byte offsets, the layout's swizzle (bits 62-63:
// 1 = 128-byte, 2 = 64-byte, 3 = 32-byte; the codes codegen/gemm_sm90_load.SWIZZLES writes).
__device__ __forceinline__ uint64_t ts_wgmma_desc(uint32_t smem_addr, uint32_t lbo, uint32_t sbo, uint32_t layout) {
  uint64_t d = 0;
  d |= static_cast<uint64_t>((smem_addr & 0x3FFFFu) >> 4);
  d |= static_cast<uint64_t>((lbo & 0x3FFFFu) >> 4) << 16;
  d |= static_cast<uint64_t>((sbo & 0x3FFFFu) >> 4) << 32;
  d |= static_cast<uint64_t>(layout & 3u) << 62;
  return d;
}

__device__ __forceinline__ void ts_wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void ts_wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void ts_wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"); }
// Keeps the compiler from moving accumulator reads/writes across an asynchronous wgmma.
template <int N>
__device__ __forceinline__ void ts_fence_regs(float (&acc)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(acc[i])::"memory");
}

// ---- mbarriers (shared memory, 8 bytes each) ----
__device__ __forceinline__ void ts_mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(ts_smem_addr(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void ts_mbar_init_fence() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }
__device__ __forceinline__ void ts_mbar_arrive(uint64_t* bar) {
  asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(ts_smem_addr(bar)) : "memory");
}
// `count` arrivals at once: one thread releasing a stage for every consumer warp (gemm_sm90_store's
// borrowed staging slots, released when the epilogue's stores have read them).
__device__ __forceinline__ void ts_mbar_arrive_count(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0], %1;\n" ::"r"(ts_smem_addr(bar)), "r"(count) : "memory");
}
// Waits until the barrier's phase with parity `parity` has completed.
__device__ __forceinline__ void ts_mbar_wait(uint64_t* bar, uint32_t parity) {
  const uint32_t addr = ts_smem_addr(bar);
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(addr), "r"(parity)
        : "memory");
  } while (!done);
}

// ---- cp.async (16 bytes, L2 only) completing on an mbarrier ----
__device__ __forceinline__ void ts_cp_async16(void* smem_dst, const void* gmem_src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(ts_smem_addr(smem_dst)), "l"(gmem_src) : "memory");
}
// The barrier receives one arrival from this thread once all its earlier cp.async are complete.
__device__ __forceinline__ void ts_cp_async_arrive(uint64_t* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(ts_smem_addr(bar)) : "memory");
}
__device__ __forceinline__ void ts_cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }
// Generic-proxy shared-memory writes become visible to the tensor cores (async proxy).
__device__ __forceinline__ void ts_fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
// Generic-proxy global writes this thread has acquired (a peer's puts or NVLink stores, announced by a
// signal) become ordered before its async-proxy (TMA) reads of global memory (gemm_sm90_comm).
__device__ __forceinline__ void ts_fence_proxy_async_global() { asm volatile("fence.proxy.async.global;\n" ::: "memory"); }

// ---- warpgroup roles ----
__device__ __forceinline__ void ts_named_sync(uint32_t id, uint32_t threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
// Arrives at named barrier `id` without waiting: the threads that bar.sync on it (threads in all) go on
// once these arrivals are in (gemm_sm90_pingpong: one warpgroup hands the tensor cores to the other).
__device__ __forceinline__ void ts_named_arrive(uint32_t id, uint32_t threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
template <int R>
__device__ __forceinline__ void ts_setmaxnreg_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(R)); }
template <int R>
__device__ __forceinline__ void ts_setmaxnreg_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(R)); }

// ---- bulk tensor copies (TMA) completing on an mbarrier ----
// The barrier expects `bytes` more bytes of transactions and gets this thread's arrival.
__device__ __forceinline__ void ts_mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(ts_smem_addr(bar)), "r"(bytes)
               : "memory");
}
// The barrier's current phase expects `bytes` more bytes of transactions (no arrival).
__device__ __forceinline__ void ts_mbar_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(ts_smem_addr(bar)), "r"(bytes)
               : "memory");
}
// Box (x, y) of a 2-D tensor map (x the contiguous dimension) into shared memory.
__device__ __forceinline__ void ts_tma_load_2d(void* smem_dst, const void* tmap, uint64_t* bar, int32_t x, int32_t y) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];\n" ::"r"(
          ts_smem_addr(smem_dst)),
      "l"(tmap), "r"(ts_smem_addr(bar)), "r"(x), "r"(y)
      : "memory");
}
// Box (x, y) of a 2-D tensor map from shared memory; elements of the box outside the tensor are not
// written. Completes in this thread's bulk group (ts_bulk_commit / ts_bulk_wait_read).
__device__ __forceinline__ void ts_tma_store_2d(const void* tmap, const void* smem_src, int32_t x, int32_t y) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];\n" ::"l"(tmap),
               "r"(ts_smem_addr(smem_src)), "r"(x), "r"(y)
               : "memory");
}
// L2 eviction priorities for the copies below (createpolicy: the whole of each access at that priority).
__device__ __forceinline__ uint64_t ts_l2_evict_first() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
  return policy;
}
__device__ __forceinline__ uint64_t ts_l2_evict_last() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;\n" : "=l"(policy));
  return policy;
}
// ts_tma_load_2d and ts_tma_store_2d with an L2 eviction priority (`policy` from ts_l2_evict_first/last).
__device__ __forceinline__ void ts_tma_load_2d_hint(void* smem_dst, const void* tmap, uint64_t* bar, int32_t x,
                                                    int32_t y, uint64_t policy) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1, {%3, %4}], [%2], %5;\n" ::"r"(ts_smem_addr(smem_dst)),
      "l"(tmap), "r"(ts_smem_addr(bar)), "r"(x), "r"(y), "l"(policy)
      : "memory");
}
__device__ __forceinline__ void ts_tma_store_2d_hint(const void* tmap, const void* smem_src, int32_t x, int32_t y,
                                                     uint64_t policy) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group.L2::cache_hint [%0, {%2, %3}], [%1], %4;\n" ::"l"(
                   tmap),
               "r"(ts_smem_addr(smem_src)), "r"(x), "r"(y), "l"(policy)
               : "memory");
}
__device__ __forceinline__ void ts_bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// This thread's committed bulk stores have read their shared memory (which may then be reused or
// released); their global writes complete before the grid does.
__device__ __forceinline__ void ts_bulk_wait_read() { asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory"); }
// ... all but the N most recently committed groups (a staging ring of N + 1 boxes: the next box's slot is free).
template <int N>
__device__ __forceinline__ void ts_bulk_wait_read_all_but() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}
// ... and their global writes are done (visible to this thread; a release after it publishes them).
__device__ __forceinline__ void ts_bulk_wait() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }
// Box (x, y) of `tmap` brought into L2 only: no shared memory, no barrier, nothing to wait for.
__device__ __forceinline__ void ts_tma_prefetch_2d(const void* tmap, int32_t x, int32_t y) {
  asm volatile("cp.async.bulk.prefetch.tensor.2d.L2.global.tile [%0, {%1, %2}];\n" ::"l"(tmap), "r"(x), "r"(y)
               : "memory");
}
__device__ __forceinline__ void ts_tma_prefetch_desc(const void* tmap) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(tmap) : "memory");
}

// ---- clusters of two blocks sharing a tile through TMA multicast (ts_cluster_rank, ts_cluster_sync:
// tilescale_compute.cuh) ----
// Box (x, y) into the same shared-memory offset of every block in `mask`, each block's barrier at
// `bar`'s offset receiving the bytes that land in it.
__device__ __forceinline__ void ts_tma_load_2d_multicast(void* smem_dst, const void* tmap, uint64_t* bar, int32_t x,
                                                         int32_t y, uint16_t mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
      " [%0], [%1, {%3, %4}], [%2], %5;\n" ::"r"(ts_smem_addr(smem_dst)),
      "l"(tmap), "r"(ts_smem_addr(bar)), "r"(x), "r"(y), "h"(mask)
      : "memory");
}
// One arrival on the barrier at `bar`'s offset in block `rank` of the cluster.
__device__ __forceinline__ void ts_mbar_arrive_cluster(uint64_t* bar, uint32_t rank) {
  asm volatile(
      "{\n.reg .b32 remote;\nmapa.shared::cluster.u32 remote, %0, %1;\n"
      "mbarrier.arrive.shared::cluster.b64 _, [remote];\n}\n" ::"r"(ts_smem_addr(bar)),
      "r"(rank)
      : "memory");
}
