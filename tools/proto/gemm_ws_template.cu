// Prototype of the generated warp-specialised GEMM (see gemm_ws_proto.py). Development aid only.
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
