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
