#include "workspace.h"

#include <algorithm>
#include <vector>

#include "heap_check.h"
#include "launch_abi.h"

namespace jax_tilescale {
namespace {

// Growth is rounded up so that a sequence of slightly larger calls does not reallocate every time.
// The rounding is a pure function of the request, so every process still makes the same sizes.
constexpr size_t kGrowthGranularity = size_t{2} << 20;
// The scratch arena grows in steps of this many bytes, for the same reason.
constexpr size_t kArenaGranularity = size_t{64} << 10;

size_t RoundUp(size_t bytes, size_t step) { return (bytes + step - 1) / step * step; }

std::string Human(size_t bytes) {
  const double mib = static_cast<double>(bytes) / (1 << 20);
  char buf[64];
  snprintf(buf, sizeof buf, "%zu bytes (%.1f MiB)", bytes, mib);
  return buf;
}

}  // namespace

SymmetricWorkspace& SymmetricWorkspace::Get() {
  // Leaked on purpose: freeing symmetric memory from a static destructor would run after NVSHMEM
  // and the driver may be gone.
  static SymmetricWorkspace* ws = new SymmetricWorkspace();
  return *ws;
}

size_t SymmetricWorkspace::bytes() {
  std::lock_guard<std::mutex> lock(mutex_);
  return bytes_;
}

std::string SymmetricWorkspace::Reserve(size_t scratch_bytes, size_t staged_bytes, CUstream stream,
                                        const DriverApi& cu, const NvshmemApi& shm, const std::string& entry,
                                        unsigned char** base, size_t* arena) {
  const size_t want_arena = ArenaFor(scratch_bytes);
  const size_t bytes = 2 * (want_arena + staged_bytes);
  if (bytes > bytes_) {
    if (std::string err = Grow(bytes, stream, cu, shm, entry); !err.empty()) return err;
    arena_ = want_arena;  // the whole region is zero
  } else if (want_arena > arena_) {
    // Bytes [arena_, want_arena) of each half held staged buffers of earlier launches.
    for (size_t half = 0; half < 2; ++half) {
      auto from = reinterpret_cast<CUdeviceptr>(base_ + half * (bytes_ / 2) + arena_);
      if (CUresult r = cu.cuMemsetD8Async(from, 0, want_arena - arena_, stream); r != CUDA_SUCCESS) {
        return "kernel `" + entry + "`: zeroing the grown scratch arena failed: " + CuErrorText(r);
      }
    }
    if (std::string err = WaitForAll(stream, cu, shm, entry); !err.empty()) return err;
    arena_ = want_arena;
  }
  *base = base_;
  *arena = arena_;
  return "";
}

size_t SymmetricWorkspace::ArenaFor(size_t scratch_bytes) const {
  return std::max(arena_, RoundUp(scratch_bytes, kArenaGranularity));
}

bool SymmetricWorkspace::Holds(size_t scratch_bytes, size_t staged_bytes) const {
  return control_ != nullptr && ArenaFor(scratch_bytes) == arena_ && 2 * (arena_ + staged_bytes) <= bytes_;
}

std::string SymmetricWorkspace::Grow(size_t bytes, CUstream stream, const DriverApi& cu, const NvshmemApi& shm,
                                     const std::string& entry) {
  const size_t grow_to = RoundUp(bytes, kGrowthGranularity);
  if (base_ != nullptr) {
    if (CUresult r = cu.cuStreamSynchronize(stream); r != CUDA_SUCCESS) {
      return "kernel `" + entry + "`: cuStreamSynchronize before growing the symmetric workspace failed: " +
             CuErrorText(r);
    }
  }
  // Every PE decides, together, whether nvshmem_malloc can meet the request (heap_check.h): past the free GPU
  // memory NVSHMEM would end the process. A refusal keeps the old region, so later calls that fit still run.
  if (std::string err = CheckGrowth(bytes, grow_to, stream, cu, shm, entry); !err.empty()) return err;
  if (base_ != nullptr) {
    shm.nvshmem_free(base_);
    base_ = nullptr;
    bytes_ = 0;
    arena_ = 0;
  }
  void* p = shm.nvshmem_malloc(grow_to);
  if (p == nullptr) {
    return "kernel `" + entry + "` needs a symmetric workspace of " + Human(bytes) + " (scratch plus staged " +
           "buffers, twice) and nvshmem_malloc(" + Human(grow_to) + ") failed: the NVSHMEM symmetric heap is too " +
           "small. Raise NVSHMEM_SYMMETRIC_SIZE (e.g. NVSHMEM_SYMMETRIC_SIZE=8G) in every process before " +
           "NVSHMEM starts, and leave GPU memory outside XLA's pool for it (XLA_PYTHON_CLIENT_MEM_FRACTION)";
  }
  base_ = static_cast<unsigned char*>(p);
  bytes_ = grow_to;
  capacity_ = std::max(capacity_, grow_to);
  if (CUresult r = cu.cuMemsetD8Async(reinterpret_cast<CUdeviceptr>(base_), 0, bytes_, stream); r != CUDA_SUCCESS) {
    return "kernel `" + entry + "`: zeroing the new symmetric workspace failed: " + CuErrorText(r);
  }
  // Where each half's scratch now starts: kernels read it from the control words (ts_launch_scratch), so a
  // launch replayed from a command buffer follows the region when it moves. Pageable source: the copy has
  // taken its bytes when the call returns. CheckGrowth made the control words.
  const uint64_t halves[2] = {reinterpret_cast<uint64_t>(base_), reinterpret_cast<uint64_t>(base_ + bytes_ / 2)};
  if (CUresult r = cu.cuMemcpyHtoDAsync(reinterpret_cast<CUdeviceptr>(control_ + TS_CTL_SCRATCH(0)), halves,
                                        sizeof halves, stream);
      r != CUDA_SUCCESS) {
    return "kernel `" + entry + "`: writing the scratch addresses into the launch-control words failed: " +
           CuErrorText(r);
  }
  return WaitForAll(stream, cu, shm, entry);
}

std::string SymmetricWorkspace::WaitForAll(CUstream stream, const DriverApi& cu, const NvshmemApi& shm,
                                           const std::string& entry) {
  // Every PE has zeroed what it just allocated before any PE goes on: a min-reduction over the world (the
  // agreement of heap_check.h, which ends with the host waiting for it). Not nvshmemx_barrier_all_on_stream:
  // with two PEs on one GPU, an nvshmem_malloc after an on-stream barrier hung (measured 2026-12-01).
  bool all_ok = false;
  size_t min_free = 0;
  if (std::string err = AgreeOnGrowth(cu, shm, stream, agree_, true, 0, &all_ok, &min_free); !err.empty()) {
    return "kernel `" + entry + "`: " + err;
  }
  return "";
}

std::string SymmetricWorkspace::EnsureControl(CUstream stream, const DriverApi& cu, const NvshmemApi& shm,
                                              const std::string& entry) {
  if (agree_ != nullptr) return "";
  // One allocation, the process's first collective one (every PE reaches it at its first communicating
  // launch): the agreement's words, then the launch-control words, which start zero and are never cleared,
  // then this PE's table of the peers' allocations it has mapped (zero-copy; read locally only).
  const int n_pes = shm.nvshmem_n_pes();
  const size_t ctl_bytes = sizeof(uint64_t) * TS_CTL_WORDS(static_cast<size_t>(n_pes));
  // Pageable memory: cuMemcpyHtoDAsync has taken its bytes when it returns, so a local copy will do.
  const std::vector<TsPeerAlloc> table = PeerMemory::Get().Table(n_pes);
  // The size must be the same on every PE (a collective allocation): the table's part is n_pes *
  // TS_PEER_ALLOCS entries whether or not this PE has one.
  const size_t table_room = sizeof(TsPeerAlloc) * static_cast<size_t>(n_pes) * TS_PEER_ALLOCS;
  agree_ = static_cast<unsigned char*>(shm.nvshmem_malloc(kAgreeBytes + ctl_bytes + table_room));
  if (agree_ == nullptr) {
    return "kernel `" + entry + "`: nvshmem_malloc(" + std::to_string(kAgreeBytes + ctl_bytes + table_room) +
           ") failed";
  }
  // nvshmem_malloc's blocks are aligned far beyond 16 bytes; the launch-control words must be 16-byte aligned
  // because kernels write each TS_CTL_PUB pair with one 16-byte store (codegen/tilescale_call.cuh).
  static_assert(kAgreeBytes % 16 == 0, "the launch-control words start 16-byte aligned");
  control_ = reinterpret_cast<uint64_t*>(agree_ + kAgreeBytes);
  if (CUresult r = cu.cuMemsetD8Async(reinterpret_cast<CUdeviceptr>(control_), 0, ctl_bytes + table_room, stream);
      r != CUDA_SUCCESS) {
    return "kernel `" + entry + "`: zeroing the launch-control words failed: " + CuErrorText(r);
  }
  peer_allocs_ = nullptr;
  if (!table.empty()) {
    unsigned char* at = agree_ + kAgreeBytes + ctl_bytes;
    if (CUresult r = cu.cuMemcpyHtoDAsync(reinterpret_cast<CUdeviceptr>(at), table.data(),
                                          sizeof(TsPeerAlloc) * table.size(), stream);
        r != CUDA_SUCCESS) {
      return "kernel `" + entry + "`: uploading the table of peers' allocations failed: " + CuErrorText(r);
    }
    peer_allocs_ = reinterpret_cast<const TsPeerAlloc*>(at);
  }
  return WaitForAll(stream, cu, shm, entry);
}

std::string SymmetricWorkspace::Control(CUstream stream, const DriverApi& cu, const NvshmemApi& shm,
                                        const std::string& entry, uint64_t** ctl, const TsPeerAlloc** peer_allocs) {
  if (std::string err = EnsureControl(stream, cu, shm, entry); !err.empty()) return err;
  *ctl = control_;
  *peer_allocs = peer_allocs_;
  return "";
}

std::string SymmetricWorkspace::CheckGrowth(size_t bytes, size_t grow_to, CUstream stream, const DriverApi& cu,
                                            const NvshmemApi& shm, const std::string& entry) {
  if (std::string err = EnsureControl(stream, cu, shm, entry); !err.empty()) return err;
  HeapFacts f;
  f.needed = bytes;
  f.request = grow_to;
  f.configured = ConfiguredHeapBytes();
  f.known_capacity = capacity_;
  if (CUresult r = cu.cuMemGetInfo(&f.free_bytes, &f.total_bytes); r != CUDA_SUCCESS) {
    // Still take part in the agreement (the peers wait for it), as a PE that cannot grow.
    f.free_bytes = 0;
  }
  bool all_ok = false;
  size_t min_free = 0;
  if (std::string err = AgreeOnGrowth(cu, shm, stream, agree_, FitsLocally(f), f.free_bytes, &all_ok, &min_free);
      !err.empty()) {
    return "kernel `" + entry + "`: " + err;
  }
  if (all_ok) return "";
  return HeapTooSmallMessage(entry, f, min_free, shm.nvshmem_n_pes());
}

std::string SymmetricWorkspace::Release(const DriverApi* cu) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (base_ == nullptr && agree_ == nullptr && control_ == nullptr) return "";
  const NvshmemApi* shm = Nvshmem();
  if (shm == nullptr || !shm->initialized()) {
    // NVSHMEM is already gone and took its heap with it.
    base_ = agree_ = nullptr;
    control_ = nullptr;
    bytes_ = capacity_ = 0;
    return "";
  }
  // Every call that used the region must have finished on the device before it is freed.
  CUcontext ctx = nullptr;
  if (cu != nullptr && cu->cuCtxGetCurrent(&ctx) == CUDA_SUCCESS && ctx != nullptr) {
    if (CUresult r = cu->cuCtxSynchronize(); r != CUDA_SUCCESS) {
      return "cuCtxSynchronize before freeing the symmetric workspace failed: " + CuErrorText(r);
    }
  }
  // Collective, like the allocations: every PE holds the same regions.
  if (base_ != nullptr) shm->nvshmem_free(base_);
  if (agree_ != nullptr) shm->nvshmem_free(agree_);  // the control words with it
  base_ = agree_ = nullptr;
  control_ = nullptr;
  peer_allocs_ = nullptr;
  bytes_ = capacity_ = arena_ = 0;
  return "";
}

}  // namespace jax_tilescale
