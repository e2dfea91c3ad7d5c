#include "kernel_module.h"

#include <map>
#include <mutex>
#include <utility>

#include "nvshmem_api.h"

namespace jax_tilescale {
namespace {

constexpr int64_t kDefaultSmemLimit = 48 * 1024;

struct CachedModule {
  CUmodule module = nullptr;
  bool nvshmem_ready = false;  // nvshmemx_cumodule_init has run on it
};

// Kernels are cached on disk by content, so a path names one binary for the life of the process; call
// sites that share a cubin share its module (and NVSHMEM initialises each module once).
std::mutex& CacheMutex() {
  static std::mutex* m = new std::mutex();
  return *m;
}
std::map<std::pair<CUcontext, std::string>, CachedModule>& Cache() {
  static auto* cache = new std::map<std::pair<CUcontext, std::string>, CachedModule>();
  return *cache;
}

std::string Failed(const std::string& what, CUresult r) { return what + " failed: " + CuErrorText(r); }

std::string LoadModule(const DriverApi& cu, const KernelConfig& config, CUmodule* out) {
  CUcontext ctx = nullptr;
  if (CUresult r = cu.cuCtxGetCurrent(&ctx); r != CUDA_SUCCESS) return Failed("cuCtxGetCurrent", r);
  std::lock_guard<std::mutex> lock(CacheMutex());
  CachedModule& cached = Cache()[{ctx, config.cubin}];
  if (cached.module == nullptr) {
    if (CUresult r = cu.cuModuleLoad(&cached.module, config.cubin.c_str()); r != CUDA_SUCCESS) {
      cached.module = nullptr;
      return Failed("cuModuleLoad(\"" + config.cubin + "\")", r) +
             (r == CUDA_ERROR_FILE_NOT_FOUND ? " (the kernel cache entry is gone: clear the cache and re-run)" : "");
    }
  }
  if (config.uses_nvshmem && !cached.nvshmem_ready) {
    // Binds the module's NVSHMEM device state to this process's (already initialised) NVSHMEM.
    std::string why;
    const NvshmemApi* shm = Nvshmem(&why);
    if (shm == nullptr) return "NVSHMEM is not available: " + why;
    if (int status = shm->nvshmemx_cumodule_init(cached.module); status != 0) {
      return "nvshmemx_cumodule_init on \"" + config.cubin + "\" failed with status " + std::to_string(status) +
             " (was the cubin device-linked with libnvshmem_device, by the same NVSHMEM version?)";
    }
    cached.nvshmem_ready = true;
  }
  *out = cached.module;
  return "";
}

std::string CheckLaunchConfig(const DriverApi& cu, const KernelConfig& config, CUfunction fn) {
  CUdevice device = 0;
  if (CUresult r = cu.cuCtxGetDevice(&device); r != CUDA_SUCCESS) return Failed("cuCtxGetDevice", r);
  auto device_attr = [&](CUdevice_attribute a, int* v) { return cu.cuDeviceGetAttribute(v, a, device); };
  auto func_attr = [&](CUfunction_attribute a, int* v) { return cu.cuFuncGetAttribute(v, a, fn); };

  int max_threads = 0;
  if (CUresult r = func_attr(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, &max_threads); r != CUDA_SUCCESS) {
    return Failed("cuFuncGetAttribute(MAX_THREADS_PER_BLOCK)", r);
  }
  if (config.threads > max_threads) {
    return "it is launched with " + std::to_string(config.threads) + " threads per block but the compiled " +
           "kernel allows at most " + std::to_string(max_threads) + " (its __launch_bounds__ or registers)";
  }

  if (config.smem_bytes > kDefaultSmemLimit) {
    int optin = 0, static_smem = 0;
    if (CUresult r = device_attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, &optin); r != CUDA_SUCCESS) {
      return Failed("cuDeviceGetAttribute(MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)", r);
    }
    if (CUresult r = func_attr(CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, &static_smem); r != CUDA_SUCCESS) {
      return Failed("cuFuncGetAttribute(SHARED_SIZE_BYTES)", r);
    }
    if (config.smem_bytes + static_smem > optin) {
      return "it needs " + std::to_string(config.smem_bytes) + " bytes of dynamic shared memory (plus " +
             std::to_string(static_smem) + " static) per block; this GPU allows " + std::to_string(optin);
    }
    if (CUresult r = cu.cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                           static_cast<int>(config.smem_bytes));
        r != CUDA_SUCCESS) {
      return Failed("cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES, " + std::to_string(config.smem_bytes) + ")",
                    r);
    }
  }

  if (config.grid_barrier) {
    int per_sm = 0, sms = 0;
    if (CUresult r = cu.cuOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fn, static_cast<int>(config.threads),
                                                                   static_cast<size_t>(config.smem_bytes));
        r != CUDA_SUCCESS) {
      return Failed("cuOccupancyMaxActiveBlocksPerMultiprocessor", r);
    }
    if (CUresult r = device_attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, &sms); r != CUDA_SUCCESS) {
      return Failed("cuDeviceGetAttribute(MULTIPROCESSOR_COUNT)", r);
    }
    const int64_t blocks = config.grid[0] * config.grid[1] * config.grid[2];
    const int64_t resident = static_cast<int64_t>(per_sm) * sms;
    if (blocks > resident) {
      return "it has a grid-wide barrier, so all " + std::to_string(blocks) + " blocks must be resident at once, " +
             "but at most " + std::to_string(resident) + " fit (" + std::to_string(per_sm) + " per SM x " +
             std::to_string(sms) + " SMs with " + std::to_string(config.threads) + " threads and " +
             std::to_string(config.smem_bytes) + " bytes of shared memory per block): use a smaller grid";
    }
  }
  return "";
}

}  // namespace

std::string LoadKernel(const DriverApi& cu, const KernelConfig& config, CUfunction* fn) {
  CUmodule module = nullptr;
  if (std::string err = LoadModule(cu, config, &module); !err.empty()) return err;
  if (CUresult r = cu.cuModuleGetFunction(fn, module, config.entry.c_str()); r != CUDA_SUCCESS) {
    return Failed("cuModuleGetFunction(\"" + config.entry + "\") in \"" + config.cubin + "\"", r) +
           (r == CUDA_ERROR_NOT_FOUND ? " (the entry must be extern \"C\" __global__)" : "");
  }
  return CheckLaunchConfig(cu, config, *fn);
}

int64_t LoadedModuleCount() {
  std::lock_guard<std::mutex> lock(CacheMutex());
  int64_t n = 0;
  for (const auto& [key, cached] : Cache()) n += cached.module != nullptr;
  return n;
}

CUresult LaunchGrid(const DriverApi& cu, const KernelConfig& c, CUfunction fn, CUstream stream, void** params,
                    const char** api) {
  const auto gx = static_cast<unsigned>(c.grid[0]), gy = static_cast<unsigned>(c.grid[1]),
             gz = static_cast<unsigned>(c.grid[2]), tx = static_cast<unsigned>(c.threads),
             smem = static_cast<unsigned>(c.smem_bytes);
  switch (LaunchKindOf(c)) {
    case LaunchKind::kCooperative:
      *api = "cuLaunchCooperativeKernel";
      return cu.cuLaunchCooperativeKernel(fn, gx, gy, gz, tx, 1, 1, smem, stream, params);
    case LaunchKind::kPlain:
      *api = "cuLaunchKernel";
      return cu.cuLaunchKernel(fn, gx, gy, gz, tx, 1, 1, smem, stream, params, nullptr);
    case LaunchKind::kDependent:
      break;
  }
  // A programmatic dependent launch: the kernel may start before the grid ahead of it in the stream has finished
  // and flushed; its first statement (griddepcontrol.wait) waits for exactly that, so only the launch's latency
  // overlaps (docs/calling_convention.md, "Dependent launches").
  *api = "cuLaunchKernelEx";
  CUlaunchAttribute attr{};
  attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
  attr.value.programmaticStreamSerializationAllowed = 1;
  CUlaunchConfig config{};
  config.gridDimX = gx;
  config.gridDimY = gy;
  config.gridDimZ = gz;
  config.blockDimX = tx;
  config.blockDimY = 1;
  config.blockDimZ = 1;
  config.sharedMemBytes = smem;
  config.hStream = stream;
  config.attrs = &attr;
  config.numAttrs = 1;
  return cu.cuLaunchKernelEx(&config, fn, params, nullptr);
}

}  // namespace jax_tilescale
