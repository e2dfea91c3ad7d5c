// ---- element types and conversions of the tile compute statements (copies that cast, fill, gemm) ----
#include <cuda_fp16.h>
#include <cuda_bf16.h>

template <typename T> __device__ __forceinline__ float ts_to_float(T x) { return static_cast<float>(x); }
template <> __device__ __forceinline__ float ts_to_float<__half>(__half x) { return __half2float(x); }
template <> __device__ __forceinline__ float ts_to_float<__nv_bfloat16>(__nv_bfloat16 x) { return __bfloat162float(x); }

// Conversions round to nearest even, like numpy's astype (the interpreter's reference).
template <typename D> __device__ __forceinline__ D ts_from_float(float x) { return static_cast<D>(x); }
template <> __device__ __forceinline__ __half ts_from_float<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 ts_from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

template <typename D, typename S> __device__ __forceinline__ D ts_convert(S x) { return ts_from_float<D>(ts_to_float<S>(x)); }
template <> __device__ __forceinline__ double ts_convert<double, float>(float x) { return static_cast<double>(x); }
template <> __device__ __forceinline__ float ts_convert<float, double>(double x) { return static_cast<float>(x); }

// ---- thread-block clusters (sm_90): a kernel's own (ts.kernel(cluster=), ir/cluster.py) or a multicast pair ----
// On older targets these are never called (the code generator refuses clusters there); they compile to nothing.
__device__ __forceinline__ uint32_t ts_cluster_rank() {
  uint32_t r = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
#endif
  return r;
}
// Every thread of every block of the cluster; shared-memory accesses before it (a peer's tiles
// included) happen before those after (also orders mbarrier initialisations before a peer uses them).
__device__ __forceinline__ void ts_cluster_sync() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
#endif
}
// The generic address of the byte at `p` (this block's shared memory) in block `rank` of the cluster.
__device__ __forceinline__ unsigned char* ts_cluster_map(unsigned char* p, uint32_t rank) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  uint64_t out;
  asm volatile("mapa.u64 %0, %1, %2;\n" : "=l"(out) : "l"(p), "r"(rank));
  return reinterpret_cast<unsigned char*>(out);
#else
  return p;
#endif
}
