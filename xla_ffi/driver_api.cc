#include "driver_api.h"

#include <dlfcn.h>

#include <mutex>

namespace jax_tilescale {
namespace {

// The ABI every function is requested at: CUDA 12.0 semantics (the typedefs in driver_api.h match it).
constexpr int kRequestedCudaVersion = 12000;

using GetProcAddressV2 = CUresult(CUDAAPI*)(const char*, void**, int, cuuint64_t,
                                             CUdriverProcAddressQueryResult*);
using GetProcAddressV1 = CUresult(CUDAAPI*)(const char*, void**, int, cuuint64_t);

struct Resolved {
  DriverApi api;
  std::string error;
};

Resolved Resolve() {
  Resolved out;
  // RTLD_NOLOAD first: inside a JAX GPU process XLA has already loaded the driver, and we want that copy.
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (lib == nullptr) lib = dlopen("libcuda.so.1", RTLD_NOW);
  if (lib == nullptr) {
    const char* why = dlerror();
    out.error = std::string("cannot load the CUDA driver (libcuda.so.1): ") + (why ? why : "unknown error") +
                "; jax_tilescale GPU kernels need an NVIDIA driver";
    return out;
  }
  auto get_v2 = reinterpret_cast<GetProcAddressV2>(dlsym(lib, "cuGetProcAddress_v2"));
  auto get_v1 = reinterpret_cast<GetProcAddressV1>(dlsym(lib, "cuGetProcAddress"));
  if (get_v2 == nullptr && get_v1 == nullptr) {
    out.error = "the CUDA driver has no cuGetProcAddress: it is older than CUDA 11.3; update the driver";
    return out;
  }
  auto lookup = [&](const char* name, void** fn) -> bool {
    CUresult r;
    if (get_v2 != nullptr) {
      CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
      r = get_v2(name, fn, kRequestedCudaVersion, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &status);
      if (r == CUDA_SUCCESS && status != CU_GET_PROC_ADDRESS_SUCCESS) r = CUDA_ERROR_NOT_FOUND;
    } else {
      r = get_v1(name, fn, kRequestedCudaVersion, CU_GET_PROC_ADDRESS_LEGACY_STREAM);
    }
    if (r != CUDA_SUCCESS || *fn == nullptr) {
      out.error = std::string("the CUDA driver does not provide ") + name +
                  " at the CUDA 12.0 ABI (error " + std::to_string(static_cast<int>(r)) +
                  "); jax_tilescale needs a driver for CUDA 12.0 or newer";
      return false;
    }
    return true;
  };
#define TS_RESOLVE_DRIVER_FN(name, type)                                   \
  if (!lookup(#name, reinterpret_cast<void**>(&out.api.name))) return out;
  TS_DRIVER_FUNCTIONS(TS_RESOLVE_DRIVER_FN)
#undef TS_RESOLVE_DRIVER_FN
  int version = 0;
  if (out.api.cuDriverGetVersion(&version) != CUDA_SUCCESS || version < kRequestedCudaVersion) {
    out.error = "the CUDA driver supports CUDA " + std::to_string(version / 1000) + "." +
                std::to_string(version % 1000 / 10) + "; jax_tilescale needs 12.0 or newer";
  }
  return out;
}

const Resolved& Table() {
  // A function-local static: resolved on first use, thread-safe, and never at import time.
  static const Resolved resolved = Resolve();
  return resolved;
}

}  // namespace

const DriverApi* Driver(std::string* error) {
  const Resolved& r = Table();
  if (!r.error.empty()) {
    if (error != nullptr) *error = r.error;
    return nullptr;
  }
  return &r.api;
}

std::string CuErrorText(CUresult result) {
  const Resolved& r = Table();
  const char* name = nullptr;
  const char* text = nullptr;
  if (r.api.cuGetErrorName != nullptr) r.api.cuGetErrorName(result, &name);
  if (r.api.cuGetErrorString != nullptr) r.api.cuGetErrorString(result, &text);
  std::string out = name ? name : "CUDA error " + std::to_string(static_cast<int>(result));
  if (text != nullptr) out += std::string(": ") + text;
  return out;
}

}  // namespace jax_tilescale
