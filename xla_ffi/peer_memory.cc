#include "peer_memory.h"

namespace jax_tilescale {

PeerMemory& PeerMemory::Get() {
  static PeerMemory instance;
  return instance;
}

std::string PeerMemory::Set(const std::vector<uint64_t>& own, const std::vector<uint64_t>& table, int n_pes) {
  if (own.size() % 2 != 0 || own.size() / 2 > TS_PEER_ALLOCS || own.empty()) {
    return "peer memory: `own` must hold 1 to " + std::to_string(TS_PEER_ALLOCS) + " (base, size) pairs";
  }
  if (n_pes <= 0 || table.size() != 3 * static_cast<size_t>(n_pes) * TS_PEER_ALLOCS) {
    return "peer memory: the table must hold 3 words for each of n_pes * TS_PEER_ALLOCS entries";
  }
  std::lock_guard<std::mutex> lock(mutex_);
  n_own_.store(0, std::memory_order_release);
  const size_t n = own.size() / 2;
  for (size_t i = 0; i < n; ++i) {
    own_base_[i] = own[2 * i];
    own_size_[i] = own[2 * i + 1];
  }
  table_.assign(static_cast<size_t>(n_pes) * TS_PEER_ALLOCS, TsPeerAlloc{});
  for (size_t i = 0; i < table_.size(); ++i) table_[i] = TsPeerAlloc{table[3 * i], table[3 * i + 1], table[3 * i + 2]};
  n_pes_ = n_pes;
  n_own_.store(static_cast<int>(n), std::memory_order_release);
  return "";
}

void PeerMemory::Clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  n_own_.store(0, std::memory_order_release);
  table_.clear();
  n_pes_ = 0;
}

bool PeerMemory::Holds(const void* p, size_t bytes) const {
  const int n = n_own_.load(std::memory_order_acquire);
  const auto a = reinterpret_cast<uint64_t>(p);
  for (int i = 0; i < n; ++i) {
    if (a >= own_base_[i] && a - own_base_[i] + bytes <= own_size_[i]) return true;
  }
  return false;
}

std::vector<TsPeerAlloc> PeerMemory::Table(int n_pes) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (n_pes != n_pes_) return {};
  return table_;
}

}  // namespace jax_tilescale
