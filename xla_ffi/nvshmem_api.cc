#include "nvshmem_api.h"

#include <dlfcn.h>

#include <atomic>
#include <mutex>

namespace jax_tilescale {
namespace {

constexpr const char* kSoname = "libnvshmem_host.so.3";

std::mutex& ResolveMutex() {
  static std::mutex* m = new std::mutex();
  return *m;
}

std::atomic<const NvshmemApi*> g_api{nullptr};

}  // namespace

const NvshmemApi* Nvshmem(std::string* error) {
  if (const NvshmemApi* api = g_api.load(std::memory_order_acquire)) return api;
  std::lock_guard<std::mutex> lock(ResolveMutex());
  if (const NvshmemApi* api = g_api.load(std::memory_order_acquire)) return api;
  // Absence is not cached: nvshmem4py may load the library after our first look.
  void* lib = dlopen(kSoname, RTLD_NOW | RTLD_NOLOAD);
  if (lib == nullptr) {
    if (error != nullptr) *error = std::string(kSoname) + " is not loaded in this process (nvshmem4py loads it)";
    return nullptr;
  }
  auto* api = new NvshmemApi();  // kept for the life of the process, like the library
#define TS_RESOLVE_NVSHMEM_FN(name)                                                                  \
  api->name = reinterpret_cast<decltype(api->name)>(dlsym(lib, #name));                             \
  if (api->name == nullptr) {                                                                        \
    if (error != nullptr) *error = std::string(kSoname) + " has no symbol " #name ": NVSHMEM too old"; \
    delete api;                                                                                      \
    return nullptr;                                                                                  \
  }
  TS_NVSHMEM_FUNCTIONS(TS_RESOLVE_NVSHMEM_FN)
#undef TS_RESOLVE_NVSHMEM_FN
  g_api.store(api, std::memory_order_release);
  return api;
}

bool NvshmemInitialized() {
  const NvshmemApi* api = Nvshmem();
  return api != nullptr && api->initialized();
}

}  // namespace jax_tilescale
