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
#include "peer_memory.h"

namespace jax_tilescale {

class SymmetricWorkspace {
 public:
  static SymmetricWorkspace& Get();

  // Held by a launch from reserving the region to its last enqueued copy, so that a growth on another
  // thread cannot free the region under it.
  std::mutex& mutex() { return mutex_; }

  // Lays out one launch's half of the region, growing it when needed, and returns the region's base in
  // *base and the scratch arena's size in *arena. Each half is [scratch arena | staged buffers]: the arena
  // only ever holds scratch, which every launch zeroes before it ends (ts_call_end), so any launch finds
  // the first `scratch_bytes` of its half zero. Were scratch and staged buffers to share bytes, a launch
  // with more scratch than an earlier one would find that launch's staged data in its signal words
  // (2-PE GPU suite, 2026-12-01: ADD signals over stale bytes never reached the value waited for).
  // The region's size and the arena only grow; both decisions are pure functions of the sequence of
  // calls, so every PE makes them at the same call. Growing the region waits for `stream` (earlier calls
  // may still use the old region, and peers' writes into it are complete once our end-of-call barrier
  // has run), then frees and reallocates collectively and zeroes it; growing only the arena zeroes the
  // bytes that join it, in both halves. Either way every PE then waits on the host until every PE has
  // zeroed, so no peer writes into them before. Caller holds mutex(). "" or an error naming `entry`.
  std::string Reserve(size_t scratch_bytes, size_t staged_bytes, CUstream stream, const DriverApi& cu,
                      const NvshmemApi& shm, const std::string& entry, unsigned char** base, size_t* arena);
  // The launch-control words of communicating launches (TS_CTL_WORDS(n_pes) uint64, ts_abi.h):
  // allocated, zeroed and agreed on (a barrier) by the first communicating launch of the process, which
  // is the same call on every PE; never cleared again. With them, in *peer_allocs, the device copy of
  // PeerMemory's table as it was then (null when zero-copy is off). Caller holds mutex(). "" or an error.
  std::string Control(CUstream stream, const DriverApi& cu, const NvshmemApi& shm, const std::string& entry,
                      uint64_t** ctl, const TsPeerAlloc** peer_allocs);

  // Whether the control words exist and a call of `scratch_bytes` (256-byte aligned) and `staged_bytes`
  // fits without growing the region or its arena, i.e. Reserve would change nothing. Caller holds mutex().
  bool Holds(size_t scratch_bytes, size_t staged_bytes) const;

  // Frees the region (collective); for shutdown before nvshmem finalize. Returns "" or an error.
  std::string Release(const DriverApi* cu);

  size_t bytes();
  bool has_control() {
    std::lock_guard<std::mutex> lock(mutex_);
    return control_ != nullptr;
  }
  // The same, for a caller that holds mutex() (bytes() takes it: calling it then deadlocked every
  // communicating launch of odd number on the GPU, 2026-12-01).
  size_t bytes_locked() const { return bytes_; }

 private:
  SymmetricWorkspace() = default;
  // The scratch arena a call of `scratch_bytes` needs: the present one, or larger in 64 KiB steps.
  size_t ArenaFor(size_t scratch_bytes) const;
  // Whether every PE can get `grow_to` bytes from nvshmem_malloc without NVSHMEM ending the process
  // (heap_check.h); collective. Returns "" or the error naming `entry`.
  std::string CheckGrowth(size_t bytes, size_t grow_to, CUstream stream, const DriverApi& cu, const NvshmemApi& shm,
                          const std::string& entry);

  // Replaces the region by a zeroed one of at least `bytes` (see Reserve), and writes both halves' scratch
  // addresses into the control words (TS_CTL_SCRATCH), where kernels read them. "" or an error.
  std::string Grow(size_t bytes, CUstream stream, const DriverApi& cu, const NvshmemApi& shm, const std::string& entry);
  // The agreement's and the launch-control words (one allocation, zeroed, agreed on). "" or an error.
  std::string EnsureControl(CUstream stream, const DriverApi& cu, const NvshmemApi& shm, const std::string& entry);
  // After zeroing fresh symmetric memory: every PE has, waited for on the host. "" or an error.
  std::string WaitForAll(CUstream stream, const DriverApi& cu, const NvshmemApi& shm, const std::string& entry);
  static constexpr size_t kAgreeBytes = 256;
  std::mutex mutex_;
  unsigned char* base_ = nullptr;
  size_t bytes_ = 0;
  size_t capacity_ = 0;             // the largest region nvshmem_malloc has given us
  size_t arena_ = 0;                // bytes at the start of each half that only scratch uses
  unsigned char* agree_ = nullptr;  // symmetric words for CheckGrowth's agreement
  uint64_t* control_ = nullptr;     // Control()'s words, in agree_'s allocation
  const TsPeerAlloc* peer_allocs_ = nullptr;  // the device table after them (zero-copy), or null
};

}  // namespace jax_tilescale
