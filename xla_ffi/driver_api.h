// CUDA driver API functions resolved at run time.
//
// The extension is built on machines without libcuda.so (CI, this repo's build hosts), and must import
// on them, so it never links the driver: the first call dlopen()s libcuda.so.1 (already loaded by XLA
// when it matters) and asks cuGetProcAddress for each function at a fixed ABI version.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>

#include <string>

namespace jax_tilescale {

// Every driver function the handler uses, with the typedef of the ABI version it is resolved at.
// The names are the unversioned ones cuGetProcAddress expects.
#define TS_DRIVER_FUNCTIONS(X)                                                     \
  X(cuGetErrorName, PFN_cuGetErrorName_v6000)                                      \
  X(cuGetErrorString, PFN_cuGetErrorString_v6000)                                  \
  X(cuDriverGetVersion, PFN_cuDriverGetVersion_v2020)                              \
  X(cuDeviceGetAttribute, PFN_cuDeviceGetAttribute_v2000)                          \
  X(cuCtxGetCurrent, PFN_cuCtxGetCurrent_v4000)                                    \
  X(cuCtxPushCurrent, PFN_cuCtxPushCurrent_v4000)                                  \
  X(cuCtxPopCurrent, PFN_cuCtxPopCurrent_v4000)                                    \
  X(cuCtxGetDevice, PFN_cuCtxGetDevice_v2000)                                      \
  X(cuStreamGetCtx, PFN_cuStreamGetCtx_v9020)                                      \
  X(cuStreamSynchronize, PFN_cuStreamSynchronize_v2000)                            \
  X(cuStreamIsCapturing, PFN_cuStreamIsCapturing_v10000)                           \
  X(cuCtxSynchronize, PFN_cuCtxSynchronize_v2000)                                  \
  X(cuModuleLoad, PFN_cuModuleLoad_v2000)                                          \
  X(cuModuleGetFunction, PFN_cuModuleGetFunction_v2000)                            \
  X(cuFuncGetAttribute, PFN_cuFuncGetAttribute_v2020)                              \
  X(cuFuncSetAttribute, PFN_cuFuncSetAttribute_v9000)                              \
  X(cuOccupancyMaxActiveBlocksPerMultiprocessor,                                   \
    PFN_cuOccupancyMaxActiveBlocksPerMultiprocessor_v6050)                         \
  X(cuMemAlloc, PFN_cuMemAlloc_v3020)                                              \
  X(cuMemFree, PFN_cuMemFree_v3020)                                                \
  X(cuMemsetD8Async, PFN_cuMemsetD8Async_v3020)                                    \
  X(cuMemcpyHtoDAsync, PFN_cuMemcpyHtoDAsync_v3020)                                \
  X(cuMemcpyDtoDAsync, PFN_cuMemcpyDtoDAsync_v3020)                                \
  X(cuLaunchKernel, PFN_cuLaunchKernel_v4000)                                      \
  X(cuLaunchCooperativeKernel, PFN_cuLaunchCooperativeKernel_v9000)              \
  X(cuLaunchKernelEx, PFN_cuLaunchKernelEx_v11060)                                 \
  X(cuMemGetInfo, PFN_cuMemGetInfo_v3020)                                          \
  X(cuMemcpyDtoHAsync, PFN_cuMemcpyDtoHAsync_v3020)                                \
  X(cuMemHostAlloc, PFN_cuMemHostAlloc_v2020)                                      \
  X(cuMemHostGetDevicePointer, PFN_cuMemHostGetDevicePointer_v3020)                \
  X(cuMemFreeHost, PFN_cuMemFreeHost_v2000)                                        \
  X(cuTensorMapEncodeTiled, PFN_cuTensorMapEncodeTiled_v12000)

struct DriverApi {
#define TS_DECLARE_DRIVER_FN(name, type) type name = nullptr;
  TS_DRIVER_FUNCTIONS(TS_DECLARE_DRIVER_FN)
#undef TS_DECLARE_DRIVER_FN
};

// The resolved driver table, or nullptr with *error set (no libcuda.so.1, driver older than CUDA 12).
// Resolution happens once per process; later calls are a load of a pointer.
const DriverApi* Driver(std::string* error);

// "CUDA_ERROR_X: description" for a driver result (works before the table is resolved too).
std::string CuErrorText(CUresult result);

}  // namespace jax_tilescale
