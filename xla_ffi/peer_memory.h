// Zero-copy (docs/calling_convention.md, "Zero-copy"): which of this process's allocations every peer
// has mapped, and where this process has mapped each peer's. The runtime
// (jax_tilescale/runtime/peer_memory.py) exports XLA's memory pool once, hands the exported handle to the
// other processes of the machine, maps theirs, and, when every PE succeeded, calls Set. Launches then read
// it: a TS_STAGE_P2P buffer inside an allocation of Holds() is handed to the kernel as XLA's buffer, and
// the table goes to the device with the launch-control words (SymmetricWorkspace::Control).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "launch_abi.h"

namespace jax_tilescale {

class PeerMemory {
 public:
  static PeerMemory& Get();

  // Replaces the registry: `own` as (base, size) pairs, at most TS_PEER_ALLOCS, and `table`, n_pes *
  // TS_PEER_ALLOCS entries (NVSHMEM PE major; size 0: unused). Before the first communicating launch
  // (the table reaches the device with the launch-control words). "" or an error.
  std::string Set(const std::vector<uint64_t>& own, const std::vector<uint64_t>& table, int n_pes);
  void Clear();

  // Whether [p, p + bytes) lies inside one allocation that every peer has mapped. Lock-free: the
  // registry changes only between runs (Set, Clear).
  bool Holds(const void* p, size_t bytes) const;
  bool on() const { return n_own_.load(std::memory_order_acquire) > 0; }
  // The table for n_pes PEs (empty when off or when n_pes differs from Set's).
  std::vector<TsPeerAlloc> Table(int n_pes) const;

 private:
  PeerMemory() = default;
  mutable std::mutex mutex_;  // Set, Clear and Table
  uint64_t own_base_[TS_PEER_ALLOCS] = {};
  uint64_t own_size_[TS_PEER_ALLOCS] = {};
  std::atomic<int> n_own_{0};
  std::vector<TsPeerAlloc> table_;
  int n_pes_ = 0;
};

}  // namespace jax_tilescale
