// The process's symmetric workspace: one nvshmem_malloc region shared by every call site.
//
// Calls are serialised on XLA's stream, so one region is enough; it only grows. Growing is collective
// (nvshmem_malloc/free are), which is sound because every process runs the same program and so
// reaches the same growth at the same call.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <mutex>
#include <string>

#include "driver_api.h"
#include "nvshmem_api.h"

namespace jax_tilescale {

class SymmetricWorkspace {
 public:
  static SymmetricWorkspace& Get();

  // Held by a launch from reserving the region to its last enqueued copy, so that a growth on another
  // thread cannot free the region under it.
  std::mutex& mutex() { return mutex_; }

  // Makes the region at least `bytes` long and returns its base in *base. Growing waits for `stream`
  // (earlier calls may still use the old region, and peers' writes into it are complete once our
  // end-of-call barrier has run), then frees and reallocates collectively. Caller holds mutex().
  // Returns "" or an error that names `entry`.
  std::string Reserve(size_t bytes, CUstream stream, const DriverApi& cu, const NvshmemApi& shm,
                      const std::string& entry, unsigned char** base);

  // Frees the region (collective); for shutdown before nvshmem finalize. Returns "" or an error.
  std::string Release(const DriverApi* cu);

  size_t bytes();

 private:
  SymmetricWorkspace() = default;
  // Whether every PE can get `grow_to` bytes from nvshmem_malloc without NVSHMEM ending the process
  // (heap_check.h); collective. Returns "" or the error naming `entry`.
  std::string CheckGrowth(size_t bytes, size_t grow_to, CUstream stream, const DriverApi& cu, const NvshmemApi& shm,
                          const std::string& entry);

  static constexpr size_t kAgreeBytes = 256;
  std::mutex mutex_;
  unsigned char* base_ = nullptr;
  size_t bytes_ = 0;
  size_t capacity_ = 0;             // the largest region nvshmem_malloc has given us
  unsigned char* agree_ = nullptr;  // symmetric words for CheckGrowth's agreement
};

}  // namespace jax_tilescale
