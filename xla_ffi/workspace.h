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
  // A new region is zeroed, and every PE waits (a barrier on `stream`) until every PE has zeroed its
  // own: launches leave their scratch zero for later ones (docs/calling_convention.md), and no peer may
  // write into the new region before it is.
  std::string Reserve(size_t bytes, CUstream stream, const DriverApi& cu, const NvshmemApi& shm,
                      const std::string& entry, unsigned char** base);
  // The launch-control words of communicating launches (TS_CTL_WORDS(n_pes) uint64, ts_abi.h):
  // allocated, zeroed and agreed on (a barrier) by the first communicating launch of the process, which
  // is the same call on every PE; never cleared again. Caller holds mutex(). "" or an error.
  std::string Control(CUstream stream, const DriverApi& cu, const NvshmemApi& shm, const std::string& entry,
                      uint64_t** ctl);

  // Frees the region (collective); for shutdown before nvshmem finalize. Returns "" or an error.
  std::string Release(const DriverApi* cu);

  size_t bytes();
  // The same, for a caller that holds mutex() (bytes() takes it: calling it then deadlocked every
  // communicating launch of odd number on the GPU, 2026-12-01).
  size_t bytes_locked() const { return bytes_; }

 private:
  SymmetricWorkspace() = default;
  // Whether every PE can get `grow_to` bytes from nvshmem_malloc without NVSHMEM ending the process
  // (heap_check.h); collective. Returns "" or the error naming `entry`.
  std::string CheckGrowth(size_t bytes, size_t grow_to, CUstream stream, const DriverApi& cu, const NvshmemApi& shm,
                          const std::string& entry);

  // The agreement's and the launch-control words (one allocation, zeroed, agreed on). "" or an error.
  std::string EnsureControl(CUstream stream, const DriverApi& cu, const NvshmemApi& shm, const std::string& entry);
  // After zeroing fresh symmetric memory: every PE has, waited for on the host. "" or an error.
  std::string WaitForAll(CUstream stream, const DriverApi& cu, const NvshmemApi& shm, const std::string& entry);
  static constexpr size_t kAgreeBytes = 256;
  std::mutex mutex_;
  unsigned char* base_ = nullptr;
  size_t bytes_ = 0;
  size_t capacity_ = 0;             // the largest region nvshmem_malloc has given us
  unsigned char* agree_ = nullptr;  // symmetric words for CheckGrowth's agreement
  uint64_t* control_ = nullptr;     // Control()'s words, in agree_'s allocation
};

}  // namespace jax_tilescale
