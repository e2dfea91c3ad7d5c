// Prototype: TMA producer + wgmma consumers (see gemm_ws_proto.py). Development aid only.
#include <cuda.h>
#include <cuda_bf16.h>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>
//@SM90@
//@WGMMA@
typedef __nv_bfloat16 bf16;

template <int N> struct Wg;
template <> struct Wg<256> { static __device__ __forceinline__ void mma(float* a, uint64_t da, uint64_t db) { ts_wgmma_m64n256k16_bf16_km(*reinterpret_cast<float(*)[128]>(a), da, db, 1); } };
template <> struct Wg<128> { static __device__ __forceinline__ void mma(float* a, uint64_t da, uint64_t db) { ts_wgmma_m64n128k16_bf16_km(*reinterpret_cast<float(*)[64]>(a), da, db, 1); } };

struct Maps { CUtensorMap a, b; };

// BM rows per CTA split over CONS consumer warpgroups, each MI = BM/64/CONS m64 slabs.
template <int BM, int BN, int BK, int STAGES, int CONS>
__global__ void __launch_bounds__(CONS * 128 + 128, 1)
gemm_tma(const __grid_constant__ Maps maps, bf16* __restrict__ C, int M, int N, int K) {
  constexpr int USER = CONS * 128, MI = BM / 64 / CONS;
  constexpr int A_BYTES = BM * BK * 2, B_BYTES = BK * BN * 2;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* smem = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  unsigned char* sA = smem;
  unsigned char* sB = smem + STAGES * A_BYTES;
  uint64_t* full = reinterpret_cast<uint64_t*>(sB + STAGES * B_BYTES);
  uint64_t* empty = full + STAGES;
  int bn, bm;
  {
    const int pid = blockIdx.y * gridDim.x + blockIdx.x, tiles_n = gridDim.x, tiles_m = gridDim.y, G = 8;
    const int group = pid / (G * tiles_n), first_m = group * G, gm = min(tiles_m - first_m, G);
    bm = first_m + (pid % (G * tiles_n)) % gm;
    bn = (pid % (G * tiles_n)) / gm;
  }
  const int KT = K / BK;
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) { ts_mbar_init(&full[s], 1); ts_mbar_init(&empty[s], CONS * 4); }
    ts_mbar_init_fence();
  }
  __syncthreads();
  if (threadIdx.x >= USER) {
    ts_setmaxnreg_dec<40>();
    if (threadIdx.x == USER) {
      ts_tma_prefetch_desc(&maps.a); ts_tma_prefetch_desc(&maps.b);
      for (int k = 0; k < KT; ++k) {
        const int s = k % STAGES;
        if (k >= STAGES) ts_mbar_wait(&empty[s], ((k / STAGES) - 1) & 1);
        ts_mbar_arrive_expect_tx(&full[s], A_BYTES + B_BYTES);
#pragma unroll
        for (int a = 0; a < BK / 64; ++a)
          ts_tma_load_2d(sA + s * A_BYTES + a * BM * 128, &maps.a, &full[s], k * BK + a * 64, bm * BM);
#pragma unroll
        for (int a = 0; a < BN / 64; ++a)
          ts_tma_load_2d(sB + s * B_BYTES + a * BK * 128, &maps.b, &full[s], bn * BN + a * 64, k * BK);
      }
    }
  } else {
    ts_setmaxnreg_inc<232>();
    const int wg = threadIdx.x / 128, lane = threadIdx.x % 32, warp = (threadIdx.x % 128) / 32;
    float acc[MI][BN / 2];
#pragma unroll
    for (int m = 0; m < MI; ++m)
#pragma unroll
      for (int i = 0; i < BN / 2; ++i) acc[m][i] = 0.f;
    for (int k = 0; k < KT; ++k) {
      const int s = k % STAGES;
      ts_mbar_wait(&full[s], (k / STAGES) & 1);
      const uint32_t a_base = ts_smem_addr(sA + s * A_BYTES) + wg * MI * 64 * 128;
      const uint32_t b_base = ts_smem_addr(sB + s * B_BYTES);
#pragma unroll
      for (int m = 0; m < MI; ++m) ts_fence_regs(acc[m]);
      ts_wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < BK / 16; ++kk) {
        const uint64_t db = ts_wgmma_desc(b_base + kk * 16 * 128, BK * 128, 1024);
#pragma unroll
        for (int m = 0; m < MI; ++m) {
          const uint64_t da = ts_wgmma_desc(a_base + m * 64 * 128 + (kk * 16 / 64) * BM * 128 + (kk * 16 % 64) * 2, 16, 1024);
          Wg<BN>::mma(acc[m], da, db);
        }
      }
      ts_wgmma_commit();
#pragma unroll
      for (int m = 0; m < MI; ++m) ts_fence_regs(acc[m]);
      ts_wgmma_wait<1>();
#pragma unroll
      for (int m = 0; m < MI; ++m) ts_fence_regs(acc[m]);
      if (k > 0 && lane == 0) ts_mbar_arrive(&empty[(k - 1) % STAGES]);
    }
    ts_wgmma_wait<0>();
#pragma unroll
    for (int m = 0; m < MI; ++m) {
      ts_fence_regs(acc[m]);
      const int row0 = bm * BM + (wg * MI + m) * 64 + warp * 16 + lane / 4;
#pragma unroll
      for (int j = 0; j < BN / 8; ++j) {
        const int col = bn * BN + j * 8 + (lane % 4) * 2;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          __nv_bfloat162 v = __floats2bfloat162_rn(acc[m][j * 4 + h * 2], acc[m][j * 4 + h * 2 + 1]);
          *reinterpret_cast<__nv_bfloat162*>(C + (size_t)(row0 + 8 * h) * N + col) = v;
        }
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

static CUtensorMap make_map(const void* ptr, uint64_t inner, uint64_t outer, uint32_t box_inner, uint32_t box_outer) {
  CUtensorMap m;
  cuuint64_t dims[2] = {inner, outer};
  cuuint64_t strides[1] = {inner * 2};
  cuuint32_t box[2] = {box_inner, box_outer};
  cuuint32_t es[2] = {1, 1};
  CUresult r = cuTensorMapEncodeTiled(&m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void*>(ptr), dims, strides, box, es,
                                      CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) { printf("encode failed %d\n", (int)r); exit(1); }
  return m;
}

template <int BM, int BN, int BK, int STAGES, int CONS>
void run(int M, int N, int K, const char* name) {
  bf16 *A, *B, *C;
  CK(cudaMalloc(&A, (size_t)M * K * 2)); CK(cudaMalloc(&B, (size_t)K * N * 2)); CK(cudaMalloc(&C, (size_t)M * N * 2));
  init<<<1024, 256>>>(A, (size_t)M * K, 1); init<<<1024, 256>>>(B, (size_t)K * N, 2);
  CK(cudaMemset(C, 0xFF, (size_t)M * N * 2));
  Maps maps{make_map(A, K, M, 64, BM), make_map(B, N, K, 64, BK)};
  auto kern = gemm_tma<BM, BN, BK, STAGES, CONS>;
  const int smem = STAGES * (BM * BK + BK * BN) * 2 + 2 * STAGES * 8 + 1024;
  CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  dim3 grid(N / BN, M / BM), block(CONS * 128 + 128);
  kern<<<grid, block, smem>>>(maps, C, M, N, K);
  CK(cudaGetLastError()); CK(cudaDeviceSynchronize());
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
  cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
  for (int i = 0; i < 3; ++i) kern<<<grid, block, smem>>>(maps, C, M, N, K);
  std::vector<float> ts;
  for (int r = 0; r < 7; ++r) {
    cudaEventRecord(e0);
    for (int i = 0; i < 10; ++i) kern<<<grid, block, smem>>>(maps, C, M, N, K);
    cudaEventRecord(e1); cudaEventSynchronize(e1);
    float ms; cudaEventElapsedTime(&ms, e0, e1); ts.push_back(ms / 10);
  }
  std::sort(ts.begin(), ts.end());
  double tf = 2.0 * M * N * K / (ts[3] * 1e-3) / 1e12;
  printf("TMA %-24s %5dx%5dx%5d  %.3f ms  %6.1f TFLOP/s  maxrelerr %.2e bad %d\n", name, M, N, K, ts[3], tf, maxerr, bad);
  cudaFree(A); cudaFree(B); cudaFree(C); cudaFree(dr); cudaFree(dc); cudaFree(ref);
}

int main() {
  run<128, 256, 64, 4, 2>(8192, 8192, 8192, "128x256x64 s4 c2");
  run<256, 128, 64, 4, 2>(8192, 8192, 8192, "256x128x64 s4 c2");
  run<128, 256, 64, 3, 2>(8192, 8192, 8192, "128x256x64 s3 c2");
  run<256, 128, 64, 4, 2>(8192, 28672, 8192, "256x128x64 s4 c2");
  run<256, 128, 64, 4, 2>(8192, 8192, 28672, "256x128x64 s4 c2");
  run<128, 256, 64, 4, 2>(8192, 28672, 8192, "128x256x64 s4 c2");
  run<128, 256, 64, 4, 2>(8192, 8192, 28672, "128x256x64 s4 c2");
  return 0;
}
