// Prototype of the generated warp-specialised GEMM (see gemm_ws_proto.py). Development aid only.
#include <cuda_bf16.h>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>
// ---- Hopper (sm_90a) helpers of the GEMM lowering: shared-memory layouts, mbarriers, cp.async,
// ---- wgmma descriptors. Inlined into generated sources that use T.gemm on sm_90a.
//
// Shared tiles that feed wgmma use one layout, "SW128": a tile of R rows x C 16-bit columns
// (columns contiguous in global memory) is cut into C/64 column atoms of R rows x 128 bytes; in
// row r the 16-byte chunk c sits at chunk position c ^ (r % 8) (the hardware's 128-byte swizzle,
// which keeps both the cp.async writes and the tensor core's reads free of bank conflicts).
// Every tile starts at a 1024-byte-aligned address, so the swizzle phase is the row's.

__device__ __forceinline__ uint32_t ts_smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Byte offset of element (r, c) of an SW128 tile with R rows (16-bit elements).
__device__ __forceinline__ uint32_t ts_sw128_offset(uint32_t r, uint32_t c, uint32_t rows) {
  return (c >> 6) * rows * 128u + r * 128u + ((((c >> 3) & 7u) ^ (r & 7u)) << 4) + ((c & 7u) << 1);
}

// wgmma matrix descriptor: start address, leading/stride byte offsets, 128-byte swizzle.
__device__ __forceinline__ uint64_t ts_wgmma_desc(uint32_t smem_addr, uint32_t lbo, uint32_t sbo) {
  uint64_t d = 0;
  d |= static_cast<uint64_t>((smem_addr & 0x3FFFFu) >> 4);
  d |= static_cast<uint64_t>((lbo & 0x3FFFFu) >> 4) << 16;
  d |= static_cast<uint64_t>((sbo & 0x3FFFFu) >> 4) << 32;
  d |= static_cast<uint64_t>(1) << 62;  // 128-byte swizzle
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

// ---- warpgroup roles ----
__device__ __forceinline__ void ts_named_sync(uint32_t id, uint32_t threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
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
// Box (x, y) of a 2-D tensor map (x the contiguous dimension) into shared memory.
__device__ __forceinline__ void ts_tma_load_2d(void* smem_dst, const void* tmap, uint64_t* bar, int32_t x, int32_t y) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];\n" ::"r"(
          ts_smem_addr(smem_dst)),
      "l"(tmap), "r"(ts_smem_addr(bar)), "r"(x), "r"(y)
      : "memory");
}
__device__ __forceinline__ void ts_tma_prefetch_desc(const void* tmap) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(tmap) : "memory");
}

__device__ __forceinline__ void ts_wgmma_m64n128k16_bf16_km(
    float (&acc)[64], uint64_t desc_a, uint64_t desc_b, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 1;\n}\n"
      : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3]), "+f"(acc[4]), "+f"(acc[5]), "+f"(acc[6]), "+f"(acc[7]), "+f"(acc[8]), "+f"(acc[9]), "+f"(acc[10]), "+f"(acc[11]), "+f"(acc[12]), "+f"(acc[13]), "+f"(acc[14]), "+f"(acc[15]), "+f"(acc[16]), "+f"(acc[17]), "+f"(acc[18]), "+f"(acc[19]), "+f"(acc[20]), "+f"(acc[21]), "+f"(acc[22]), "+f"(acc[23]), "+f"(acc[24]), "+f"(acc[25]), "+f"(acc[26]), "+f"(acc[27]), "+f"(acc[28]), "+f"(acc[29]), "+f"(acc[30]), "+f"(acc[31]), "+f"(acc[32]), "+f"(acc[33]), "+f"(acc[34]), "+f"(acc[35]), "+f"(acc[36]), "+f"(acc[37]), "+f"(acc[38]), "+f"(acc[39]), "+f"(acc[40]), "+f"(acc[41]), "+f"(acc[42]), "+f"(acc[43]), "+f"(acc[44]), "+f"(acc[45]), "+f"(acc[46]), "+f"(acc[47]), "+f"(acc[48]), "+f"(acc[49]), "+f"(acc[50]), "+f"(acc[51]), "+f"(acc[52]), "+f"(acc[53]), "+f"(acc[54]), "+f"(acc[55]), "+f"(acc[56]), "+f"(acc[57]), "+f"(acc[58]), "+f"(acc[59]), "+f"(acc[60]), "+f"(acc[61]), "+f"(acc[62]), "+f"(acc[63])
      : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}
__device__ __forceinline__ void ts_wgmma_m64n256k16_bf16_km(
    float (&acc)[128], uint64_t desc_a, uint64_t desc_b, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, %128, %129, p, 1, 1, 0, 1;\n}\n"
      : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3]), "+f"(acc[4]), "+f"(acc[5]), "+f"(acc[6]), "+f"(acc[7]), "+f"(acc[8]), "+f"(acc[9]), "+f"(acc[10]), "+f"(acc[11]), "+f"(acc[12]), "+f"(acc[13]), "+f"(acc[14]), "+f"(acc[15]), "+f"(acc[16]), "+f"(acc[17]), "+f"(acc[18]), "+f"(acc[19]), "+f"(acc[20]), "+f"(acc[21]), "+f"(acc[22]), "+f"(acc[23]), "+f"(acc[24]), "+f"(acc[25]), "+f"(acc[26]), "+f"(acc[27]), "+f"(acc[28]), "+f"(acc[29]), "+f"(acc[30]), "+f"(acc[31]), "+f"(acc[32]), "+f"(acc[33]), "+f"(acc[34]), "+f"(acc[35]), "+f"(acc[36]), "+f"(acc[37]), "+f"(acc[38]), "+f"(acc[39]), "+f"(acc[40]), "+f"(acc[41]), "+f"(acc[42]), "+f"(acc[43]), "+f"(acc[44]), "+f"(acc[45]), "+f"(acc[46]), "+f"(acc[47]), "+f"(acc[48]), "+f"(acc[49]), "+f"(acc[50]), "+f"(acc[51]), "+f"(acc[52]), "+f"(acc[53]), "+f"(acc[54]), "+f"(acc[55]), "+f"(acc[56]), "+f"(acc[57]), "+f"(acc[58]), "+f"(acc[59]), "+f"(acc[60]), "+f"(acc[61]), "+f"(acc[62]), "+f"(acc[63]), "+f"(acc[64]), "+f"(acc[65]), "+f"(acc[66]), "+f"(acc[67]), "+f"(acc[68]), "+f"(acc[69]), "+f"(acc[70]), "+f"(acc[71]), "+f"(acc[72]), "+f"(acc[73]), "+f"(acc[74]), "+f"(acc[75]), "+f"(acc[76]), "+f"(acc[77]), "+f"(acc[78]), "+f"(acc[79]), "+f"(acc[80]), "+f"(acc[81]), "+f"(acc[82]), "+f"(acc[83]), "+f"(acc[84]), "+f"(acc[85]), "+f"(acc[86]), "+f"(acc[87]), "+f"(acc[88]), "+f"(acc[89]), "+f"(acc[90]), "+f"(acc[91]), "+f"(acc[92]), "+f"(acc[93]), "+f"(acc[94]), "+f"(acc[95]), "+f"(acc[96]), "+f"(acc[97]), "+f"(acc[98]), "+f"(acc[99]), "+f"(acc[100]), "+f"(acc[101]), "+f"(acc[102]), "+f"(acc[103]), "+f"(acc[104]), "+f"(acc[105]), "+f"(acc[106]), "+f"(acc[107]), "+f"(acc[108]), "+f"(acc[109]), "+f"(acc[110]), "+f"(acc[111]), "+f"(acc[112]), "+f"(acc[113]), "+f"(acc[114]), "+f"(acc[115]), "+f"(acc[116]), "+f"(acc[117]), "+f"(acc[118]), "+f"(acc[119]), "+f"(acc[120]), "+f"(acc[121]), "+f"(acc[122]), "+f"(acc[123]), "+f"(acc[124]), "+f"(acc[125]), "+f"(acc[126]), "+f"(acc[127])
      : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}
typedef __nv_bfloat16 bf16;

template <int N> struct Wg;
template <> struct Wg<256> { static __device__ __forceinline__ void mma(float (&a)[128], uint64_t da, uint64_t db) { ts_wgmma_m64n256k16_bf16_km(a, da, db, 1); } };
template <> struct Wg<128> { static __device__ __forceinline__ void mma(float (&a)[64], uint64_t da, uint64_t db) { ts_wgmma_m64n128k16_bf16_km(a, da, db, 1); } };

template <int BM, int BN, int BK, int STAGES, bool GROUPED>
__global__ void __launch_bounds__(BM / 64 * 128 + 128, 1)
gemm_ws(const bf16* __restrict__ A, const bf16* __restrict__ B, bf16* __restrict__ C, int M, int N, int K) {
  constexpr int CONS = BM / 64, USER = CONS * 128;
  constexpr int A_BYTES = BM * BK * 2, B_BYTES = BK * BN * 2;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* smem = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  unsigned char* sA = smem;
  unsigned char* sB = smem + STAGES * A_BYTES;
  uint64_t* full = reinterpret_cast<uint64_t*>(sB + STAGES * B_BYTES);
  uint64_t* empty = full + STAGES;
  int bn = blockIdx.x, bm = blockIdx.y;
  if (GROUPED) {  // groups of 8 M-tiles walk N together (L2 reuse of B)
    const int pid = blockIdx.y * gridDim.x + blockIdx.x, tiles_n = gridDim.x, tiles_m = gridDim.y, G = 8;
    const int group = pid / (G * tiles_n), first_m = group * G, gm = min(tiles_m - first_m, G);
    bm = first_m + (pid % (G * tiles_n)) % gm;
    bn = (pid % (G * tiles_n)) / gm;
  }
  const int KT = K / BK;
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) { ts_mbar_init(&full[s], 128); ts_mbar_init(&empty[s], CONS * 4); }
    ts_mbar_init_fence();
  }
  __syncthreads();
  if (threadIdx.x >= USER) {
    ts_setmaxnreg_dec<56>();
    const int t = threadIdx.x - USER;
    const bf16* a_rows = A + (size_t)bm * BM * K;
    const bf16* b_cols = B + (size_t)bn * BN;
    for (int k = 0; k < KT; ++k) {
      const int s = k % STAGES;
      if (k >= STAGES) ts_mbar_wait(&empty[s], ((k / STAGES) - 1) & 1);
#pragma unroll
      for (int i = t; i < BM * BK / 8; i += 128) {
        const int r = i / (BK / 8), c = (i % (BK / 8)) * 8;
        ts_cp_async16(sA + s * A_BYTES + ts_sw128_offset(r, c, BM), a_rows + (size_t)r * K + k * BK + c);
      }
#pragma unroll
      for (int i = t; i < BK * BN / 8; i += 128) {
        const int r = i / (BN / 8), c = (i % (BN / 8)) * 8;
        ts_cp_async16(sB + s * B_BYTES + ts_sw128_offset(r, c, BK), b_cols + (size_t)(k * BK + r) * N + c);
      }
      ts_cp_async_arrive(&full[s]);
    }
    ts_cp_async_wait_all();
  } else {
    ts_setmaxnreg_inc<224>();
    const int wg = threadIdx.x / 128, lane = threadIdx.x % 32, warp = (threadIdx.x % 128) / 32;
    float acc[BN / 2];
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) acc[i] = 0.f;
    for (int k = 0; k < KT; ++k) {
      const int s = k % STAGES;
      ts_mbar_wait(&full[s], (k / STAGES) & 1);
      ts_fence_proxy_async();
      const uint32_t a_base = ts_smem_addr(sA + s * A_BYTES) + wg * 64 * 128;
      const uint32_t b_base = ts_smem_addr(sB + s * B_BYTES);
      ts_fence_regs(acc);
      ts_wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < BK / 16; ++kk) {
        const uint64_t da = ts_wgmma_desc(a_base + (kk * 16 / 64) * BM * 128 + (kk * 16 % 64) * 2, 16, 1024);
        const uint64_t db = ts_wgmma_desc(b_base + kk * 16 * 128, BK * 128, 1024);
        Wg<BN>::mma(acc, da, db);
      }
      ts_wgmma_commit();
      ts_fence_regs(acc);
      ts_wgmma_wait<1>();
      ts_fence_regs(acc);
      if (k > 0 && lane == 0) ts_mbar_arrive(&empty[(k - 1) % STAGES]);
    }
    ts_wgmma_wait<0>();
    ts_fence_regs(acc);
    const int row0 = bm * BM + wg * 64 + warp * 16 + lane / 4;
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
      const int col = bn * BN + j * 8 + (lane % 4) * 2;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        __nv_bfloat162 v = __floats2bfloat162_rn(acc[j * 4 + h * 2], acc[j * 4 + h * 2 + 1]);
        *reinterpret_cast<__nv_bfloat162*>(C + (size_t)(row0 + 8 * h) * N + col) = v;
      }
    }
  }
}

__global__ void naive(const bf16* A, const bf16* B, float* C, int M, int N, int K, const int* rows, const int* cols, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float s = 0;
  for (int k = 0; k < K; ++k) s += __bfloat162float(A[(size_t)rows[i] * K + k]) * __bfloat162float(B[(size_t)k * N + cols[i]]);
  C[i] = s;
}

__global__ void init(bf16* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    uint32_t x = (uint32_t)i * 2654435761u ^ seed; x ^= x >> 13; x *= 0x5bd1e995; x ^= x >> 15;
    p[i] = __float2bfloat16(((x & 0xFFFF) / 65536.0f) - 0.5f);
  }
}

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("CUDA error %s at %d\n", cudaGetErrorString(e), __LINE__); exit(1); } } while (0)

template <int BM, int BN, int BK, int STAGES, bool GROUPED>
void run(int M, int N, int K, const char* name) {
  bf16 *A, *B, *C;
  CK(cudaMalloc(&A, (size_t)M * K * 2)); CK(cudaMalloc(&B, (size_t)K * N * 2)); CK(cudaMalloc(&C, (size_t)M * N * 2));
  init<<<1024, 256>>>(A, (size_t)M * K, 1); init<<<1024, 256>>>(B, (size_t)K * N, 2);
  CK(cudaMemset(C, 0xFF, (size_t)M * N * 2));
  auto kern = gemm_ws<BM, BN, BK, STAGES, GROUPED>;
  const int smem = STAGES * (BM * BK + BK * BN) * 2 + 2 * STAGES * 8 + 1024;
  CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  dim3 grid(N / BN, M / BM), block(BM / 64 * 128 + 128);
  kern<<<grid, block, smem>>>(A, B, C, M, N, K);
  CK(cudaGetLastError()); CK(cudaDeviceSynchronize());
  // check 4096 sampled elements (every tile corner region included) against a naive fp32 product
  const int n = 4096;
  std::vector<int> rows(n), cols(n);
  for (int i = 0; i < n; ++i) { rows[i] = (i * 7919 + (i / 64) * 13) % M; cols[i] = (i * 104729 + i / 3) % N; }
  rows[0] = 0; cols[0] = 0; rows[1] = M - 1; cols[1] = N - 1;
  int *dr, *dc; float* ref;
  CK(cudaMalloc(&dr, n * 4)); CK(cudaMalloc(&dc, n * 4)); CK(cudaMalloc(&ref, n * 4));
  CK(cudaMemcpy(dr, rows.data(), n * 4, cudaMemcpyHostToDevice)); CK(cudaMemcpy(dc, cols.data(), n * 4, cudaMemcpyHostToDevice));
  naive<<<(n + 127) / 128, 128>>>(A, B, ref, M, N, K, dr, dc, n);
  std::vector<float> href(n); std::vector<bf16> hc((size_t)M * N);
  CK(cudaMemcpy(href.data(), ref, n * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(hc.data(), C, (size_t)M * N * 2, cudaMemcpyDeviceToHost));
  double maxerr = 0; int bad = 0;
  for (int i = 0; i < n; ++i) {
    float got = __bfloat162float(hc[(size_t)rows[i] * N + cols[i]]);
    double err = fabs(got - href[i]) / (fabs(href[i]) + 1.0);
    maxerr = std::max(maxerr, err); if (!(err < 2e-2)) ++bad;
  }
  size_t nan = 0; for (size_t i = 0; i < (size_t)M * N; i += 97) if (!(__bfloat162float(hc[i]) == __bfloat162float(hc[i]))) ++nan;
  cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
  for (int i = 0; i < 3; ++i) kern<<<grid, block, smem>>>(A, B, C, M, N, K);
  std::vector<float> ts;
  for (int r = 0; r < 7; ++r) {
    cudaEventRecord(e0);
    for (int i = 0; i < 10; ++i) kern<<<grid, block, smem>>>(A, B, C, M, N, K);
    cudaEventRecord(e1); cudaEventSynchronize(e1);
    float ms; cudaEventElapsedTime(&ms, e0, e1); ts.push_back(ms / 10);
  }
  std::sort(ts.begin(), ts.end());
  double tf = 2.0 * M * N * K / (ts[3] * 1e-3) / 1e12;
  printf("%-28s %5dx%5dx%5d  %.3f ms  %6.1f TFLOP/s  maxrelerr %.2e bad %d nan-sampled %zu\n", name, M, N, K, ts[3], tf, maxerr, bad, nan);
  cudaFree(A); cudaFree(B); cudaFree(C); cudaFree(dr); cudaFree(dc); cudaFree(ref);
}

int main() {
  run<128, 256, 64, 4, false>(8192, 8192, 8192, "128x256x64 s4");
  run<128, 256, 64, 4, true>(8192, 8192, 8192, "128x256x64 s4 grouped");
  run<128, 256, 64, 4, true>(8192, 28672, 8192, "128x256x64 s4 grouped");
  run<128, 256, 64, 4, true>(8192, 8192, 28672, "128x256x64 s4 grouped");
  run<128, 128, 64, 6, true>(8192, 8192, 8192, "128x128x64 s6 grouped");
  run<128, 256, 64, 3, true>(8192, 8192, 8192, "128x256x64 s3 grouped");
  return 0;
}
