// The check before every growth of the symmetric workspace (issue 5: "a symmetric heap too small").
//
// NVSHMEM 3.4 under CUDA VMM grows its heap on demand past NVSHMEM_SYMMETRIC_SIZE, and when that growth
// needs more GPU memory than is free, nvshmem_malloc ends the process (status 255, no message) instead of
// returning NULL. So before asking, the handler decides whether the request can be met: it fits in what
// the heap already holds (NVSHMEM_SYMMETRIC_SIZE less NVSHMEM's own share, or the largest workspace this
// process already got), or growing it by the request leaves a margin of free GPU memory. nvshmem_malloc is
// collective, so every PE must decide alike: each PE's verdict and free memory are min-reduced over all PEs
// (AgreeOnGrowth), and the request goes ahead only where every PE can meet it. A refusal is an error that
// names the kernel, the bytes, the free memory and how to make room; the old workspace stays in place, so
// later calls that fit run as before.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "driver_api.h"
#include "nvshmem_api.h"

namespace jax_tilescale {

// NVSHMEM's default NVSHMEM_SYMMETRIC_SIZE.
constexpr size_t kNvshmemDefaultHeap = size_t{1} << 30;
// What of the configured heap we leave to NVSHMEM itself (teams, collectives' work arrays) and to others.
constexpr size_t kNvshmemOwnShare = size_t{256} << 20;
// Growth maps physical memory in chunks of NVSHMEM_CUMEM_GRANULARITY (default 512 MiB)...
constexpr size_t kHeapGrowthChunk = size_t{512} << 20;
// ... and must leave this much GPU memory free besides (XLA's own allocations outside its pool, CUDA).
constexpr size_t kFreeMemoryMargin = size_t{1} << 30;

struct HeapFacts {
  size_t needed = 0;          // the call's workspace bytes (scratch plus staged buffers)
  size_t request = 0;         // what nvshmem_malloc would be asked for (needed, rounded up)
  size_t configured = 0;      // NVSHMEM_SYMMETRIC_SIZE as NVSHMEM reads it
  size_t known_capacity = 0;  // the largest workspace nvshmem_malloc has given this process
  size_t free_bytes = 0;      // this PE's free GPU memory (cuMemGetInfo)
  size_t total_bytes = 0;     // this PE's GPU memory
};

// NVSHMEM_SYMMETRIC_SIZE: a number with an optional K/M/G/T suffix (powers of 1024, as NVSHMEM reads it);
// `fallback` when unset or unreadable.
size_t ParseNvshmemSize(const char* text, size_t fallback);
size_t ConfiguredHeapBytes();

// The request fits in what the heap holds without growing it.
bool FitsWithoutGrowth(const HeapFacts& f);
// GPU memory that growing the heap for the request takes, with the margin.
size_t GrowthNeeds(const HeapFacts& f);
// This PE's verdict: without growth, or with growth into free memory.
bool FitsLocally(const HeapFacts& f);

// The error for a refused request. `min_free` is the least free GPU memory over all PEs.
std::string HeapTooSmallMessage(const std::string& entry, const HeapFacts& f, size_t min_free, int npes);

// Every PE's verdict, agreed: min-reduces {local_ok, free_bytes} over NVSHMEM_TEAM_WORLD on `stream` (and
// waits for it), using `agree` (a symmetric buffer of at least 32 bytes). Sets *all_ok and *min_free.
// Collective: every PE must call it at the same point. Returns "" or an error.
std::string AgreeOnGrowth(const DriverApi& cu, const NvshmemApi& shm, CUstream stream, unsigned char* agree,
                          bool local_ok, size_t free_bytes, bool* all_ok, size_t* min_free);

}  // namespace jax_tilescale
