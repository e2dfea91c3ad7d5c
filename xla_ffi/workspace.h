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
  std::mutex mutex_;
  unsigned char* base_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace jax_tilescale
