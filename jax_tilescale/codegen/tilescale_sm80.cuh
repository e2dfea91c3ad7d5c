// ---- mma.sync GEMM helpers (sm_80 and later): cp.async, ldmatrix, mma.sync m16n8k16. Inlined into
// ---- generated sources whose T.gemm loops take the lowering of codegen/gemm_sm80.py.
//
// Shared tiles of that lowering are row-major (R rows x C 16-bit columns, C contiguous as in global
// memory), cut into 16-byte chunks; chunk c of row r sits at chunk position c ^ ((r >> SHIFT) & (S - 1)),
// S = 8, 4 or 2 for rows of a multiple of 128, 64 or 32 bytes (SHIFT = 0, 1, 2). Any 8 consecutive rows
// then cover every bank once in each chunk column, so ldmatrix (8 row addresses per 8x8 matrix) and the
// cp.async writes are free of bank conflicts. The generator computes the addresses; these wrappers only
// issue the instructions. Like CUTLASS, the ldmatrix and mma wrappers carry no "memory" clobber (the
// barriers and cp.async waits around them do), so the compiler may interleave them freely.

__device__ __forceinline__ uint32_t ts_smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared, through L2 only (.cg); completes with the thread's commit groups.
__device__ __forceinline__ void ts_cp_async_cg16(uint32_t smem, const void* gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem), "l"(gmem));
}
// The same where the chunk may lie past the end of its buffer (a clipped window): `inside` false
// reads nothing (src-size 0, from `safe`, a valid address) and zero-fills the 16 bytes.
__device__ __forceinline__ void ts_cp_async_cg16_zfill(uint32_t smem, const void* gmem, bool inside, const void* safe) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem), "l"(inside ? gmem : safe),
               "r"(inside ? 16 : 0));
}
// 8 16-bit elements global -> shared where the source is only 2-byte aligned (rows of an odd length, a start
// off the 16-byte grid): plain loads, the elements from `valid` on read as zero (a chunk across the buffer's
// end), one 16-byte shared store. Synchronous: the block barrier before the stage is read publishes it, as it
// does the cp.async groups.
__device__ __forceinline__ void ts_copy16_u16(uint32_t smem, const void* gmem, int valid) {
  const unsigned short* src = static_cast<const unsigned short*>(gmem);
  uint32_t w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t lo = 2 * i < valid ? src[2 * i] : 0u, hi = 2 * i + 1 < valid ? src[2 * i + 1] : 0u;
    w[i] = lo | (hi << 16);
  }
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(smem), "r"(w[0]), "r"(w[1]), "r"(w[2]), "r"(w[3])
               : "memory");
}
__device__ __forceinline__ void ts_cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most N of this thread's commit groups are still in flight.
template <int N>
__device__ __forceinline__ void ts_cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

// Four 8x8 b16 matrices; lanes 8i..8i+7 give the row addresses of matrix i, register i receives it.
__device__ __forceinline__ void ts_ldsm_x4(uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3, uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}
// The same, each matrix transposed (column-major tiles, e.g. B stored K x N).
__device__ __forceinline__ void ts_ldsm_x4_trans(uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3,
                                                 uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}

// d += a (16x16, row) * b (16x8, col), fp32 accumulators. Thread t holds d rows t/4 and t/4 + 8,
// columns 2 (t % 4) + {0, 1}: d[0], d[1] on the first row, d[2], d[3] on the second.
__device__ __forceinline__ void ts_mma_16816_bf16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
__device__ __forceinline__ void ts_mma_16816_f16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
