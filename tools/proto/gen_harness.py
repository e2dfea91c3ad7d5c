# ruff: noqa: E501  (the generated C++ harness is one long f-string)
"""Times a *generated* GEMM kernel outside XLA (CUDA events, back-to-back launches), beside the
hand-written prototype, to separate kernel speed from launch-path overhead. Development aid.

    python tools/proto/gen_harness.py M N K BM BN BK STAGES THREADS > /tmp/gen_case.cu
    nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -std=c++17 -o /tmp/gen_case /tmp/gen_case.cu -lcuda
"""

import pathlib
import sys

import jax
import jax.numpy as jnp

root = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(root))
sys.path.insert(0, str(root / "examples"))
from gemm import gemm  # noqa: E402

from jax_tilescale.codegen import gemm_sm90, generate_cuda  # noqa: E402

m, n, k, bm, bn, bk, stages, threads = map(int, sys.argv[1:9])
group = int(sys.argv[9]) if len(sys.argv) > 9 else 8
gemm_sm90.MULTICAST = "nomc" not in sys.argv[10:]
sustain_s = next((float(a.split("=")[1]) for a in sys.argv[10:] if a.startswith("sustain=")), 0.0)
with_cublas = "cublas" in sys.argv[10:]
kern = gemm(m, n, k, jnp.bfloat16, block_m=bm, block_n=bn, block_k=bk, num_stages=stages, threads=threads,
            group_m=group)
shapes = (jax.ShapeDtypeStruct((m, k), jnp.bfloat16), jax.ShapeDtypeStruct((k, n), jnp.bfloat16))
mod = generate_cuda(kern.trace(*shapes), "sm_90")
assert mod.arch == "sm_90a", mod.notes
maps = list(mod.tensor_maps)
nmaps = len(maps) // 9
print(mod.source)
print(f"""
#include <cuda.h>
#include <vector>
#include <chrono>
{"#include <cublas_v2.h>" if with_cublas else ""}
#include <algorithm>
#define CK(x) do {{ cudaError_t e = (x); if (e != cudaSuccess) {{ printf("CUDA error %s at %d\\n", cudaGetErrorString(e), __LINE__); exit(1); }} }} while (0)
__global__ void ts_init(__nv_bfloat16* p, size_t n, uint32_t seed) {{
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {{
    uint32_t x = (uint32_t)i * 2654435761u ^ seed; x ^= x >> 13; x *= 0x5bd1e995; x ^= x >> 15;
    p[i] = __float2bfloat16(((x & 0xFFFF) / 65536.0f) - 0.5f);
  }}
}}
int main() {{
  const int M = {m}, N = {n}, K = {k};
  __nv_bfloat16 *A, *B, *C;
  CK(cudaMalloc(&A, (size_t)M * K * 2)); CK(cudaMalloc(&B, (size_t)K * N * 2)); CK(cudaMalloc(&C, (size_t)M * N * 2));
  ts_init<<<1024, 256>>>(A, (size_t)M * K, 1); ts_init<<<1024, 256>>>(B, (size_t)K * N, 2);
  TsLaunchArgs args{{}};
  args.npes = 1; args.buffers[0] = A; args.buffers[1] = B; args.buffers[2] = C;
  const long long spec[] = {{{", ".join(map(str, maps))}}};
  TsTensorMaps tm;
  for (int i = 0; i < {nmaps}; ++i) {{
    const long long* s = spec + 9 * i;
    cuuint64_t dims[2] = {{(cuuint64_t)s[3], (cuuint64_t)s[4]}}; cuuint64_t strides[1] = {{(cuuint64_t)s[5]}};
    cuuint32_t box[2] = {{(cuuint32_t)s[6], (cuuint32_t)s[7]}}; cuuint32_t es[2] = {{1, 1}};
    CUresult r = cuTensorMapEncodeTiled(reinterpret_cast<CUtensorMap*>(&tm.m[i]), (CUtensorMapDataType)s[1], 2,
        args.buffers[s[0]], dims, strides, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE, (CUtensorMapSwizzle)s[8],
        CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) {{ printf("encode failed\\n"); return 1; }}
  }}
  CK(cudaFuncSetAttribute({mod.entry}, cudaFuncAttributeMaxDynamicSharedMemorySize, {mod.smem_bytes}));
  dim3 grid({mod.grid[0]}, {mod.grid[1]}, {mod.grid[2]});
  for (int i = 0; i < 3; ++i) {mod.entry}<<<grid, {mod.threads}, {mod.smem_bytes}>>>(args, tm);
  CK(cudaDeviceSynchronize());
  cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
  std::vector<float> ts;
  for (int r = 0; r < 7; ++r) {{
    cudaEventRecord(e0);
    for (int i = 0; i < 10; ++i) {mod.entry}<<<grid, {mod.threads}, {mod.smem_bytes}>>>(args, tm);
    cudaEventRecord(e1); cudaEventSynchronize(e1);
    float ms; cudaEventElapsedTime(&ms, e0, e1); ts.push_back(ms / 10);
  }}
  std::sort(ts.begin(), ts.end());
  const double flop = 2.0 * M * N * K;
  auto sustained = [&](const char* what, auto&& launch) {{
    // back-to-back launches for {sustain_s} s: TFLOP/s per 10-launch round at a few points in time
    std::vector<std::pair<double, float>> rs;
    auto t_start = std::chrono::steady_clock::now();
    double el = 0;
    while (el < {sustain_s}) {{
      cudaEventRecord(e0); for (int i = 0; i < 10; ++i) launch(); cudaEventRecord(e1); cudaEventSynchronize(e1);
      float ms; cudaEventElapsedTime(&ms, e0, e1);
      el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
      rs.push_back({{el, ms / 10}});
    }}
    printf("%s sustained:", what);
    for (double mark : {{0.05, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0}}) {{
      for (auto& r : rs) if (r.first >= mark) {{ printf(" t=%.2fs %.0f", r.first, flop / (r.second * 1e-3) / 1e12); break; }}
    }}
    printf(" TF/s\\n");
  }};
  auto ours = [&]() {{ {mod.entry}<<<grid, {mod.threads}, {mod.smem_bytes}>>>(args, tm); }};
  if ({sustain_s} > 0) {{ sustained("generated", ours); }}
#if {1 if with_cublas else 0}
  {{
    cublasHandle_t h; cublasCreate(&h);
    float alpha = 1.f, beta = 0.f;
    // row-major C = A B  <=>  column-major C^T = B^T A^T
    auto cub = [&]() {{ cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, &alpha, B, CUDA_R_16BF, N, A, CUDA_R_16BF, K,
                                    &beta, C, CUDA_R_16BF, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT); }};
    for (int i = 0; i < 3; ++i) cub();
    CK(cudaDeviceSynchronize());
    std::vector<float> cs;
    for (int r = 0; r < 7; ++r) {{
      cudaEventRecord(e0); for (int i = 0; i < 10; ++i) cub(); cudaEventRecord(e1); cudaEventSynchronize(e1);
      float ms; cudaEventElapsedTime(&ms, e0, e1); cs.push_back(ms / 10);
    }}
    std::sort(cs.begin(), cs.end());
    printf("cublas burst: %.3f ms %.1f TFLOP/s\\n", cs[3], flop / (cs[3] * 1e-3) / 1e12);
    if ({sustain_s} > 0) {{ sustained("cublas", cub); sustained("generated", ours); sustained("cublas", cub); }}
  }}
#endif
  printf("generated %dx%dx%d tiles {bm}x{bn}x{bk} s{stages} t{threads} g{group} multicast={gemm_sm90.MULTICAST}: %.3f ms %.1f TFLOP/s\\n", M, N, K, ts[3],
         2.0 * M * N * K / (ts[3] * 1e-3) / 1e12);
  return 0;
}}
""")
