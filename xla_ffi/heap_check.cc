#include "heap_check.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace jax_tilescale {
namespace {

std::string Bytes(size_t bytes) {
  char buf[80];
  snprintf(buf, sizeof buf, "%zu bytes (%.2f GiB)", bytes, static_cast<double>(bytes) / (size_t{1} << 30));
  return buf;
}

size_t AlignUpTo(size_t n, size_t a) { return (n + a - 1) / a * a; }

}  // namespace

size_t ParseNvshmemSize(const char* text, size_t fallback) {
  if (text == nullptr) return fallback;
  char* end = nullptr;
  const double value = strtod(text, &end);
  if (end == text || value < 0) return fallback;
  while (*end == ' ') ++end;
  double scale = 1;
  switch (*end) {
    case 'k': case 'K': scale = 1024.0; ++end; break;
    case 'm': case 'M': scale = 1024.0 * 1024; ++end; break;
    case 'g': case 'G': scale = 1024.0 * 1024 * 1024; ++end; break;
    case 't': case 'T': scale = 1024.0 * 1024 * 1024 * 1024; ++end; break;
    default: break;
  }
  if (*end == 'b' || *end == 'B') ++end;
  if (*end != '\0') return fallback;
  return static_cast<size_t>(value * scale);
}

size_t ConfiguredHeapBytes() { return ParseNvshmemSize(getenv("NVSHMEM_SYMMETRIC_SIZE"), kNvshmemDefaultHeap); }

bool FitsWithoutGrowth(const HeapFacts& f) {
  const size_t configured_room = f.configured > kNvshmemOwnShare ? f.configured - kNvshmemOwnShare : 0;
  return f.request <= configured_room || f.request <= f.known_capacity;
}

size_t GrowthNeeds(const HeapFacts& f) { return AlignUpTo(f.request, kHeapGrowthChunk) + kFreeMemoryMargin; }

bool FitsLocally(const HeapFacts& f) { return FitsWithoutGrowth(f) || GrowthNeeds(f) <= f.free_bytes; }

std::string HeapTooSmallMessage(const std::string& entry, const HeapFacts& f, size_t min_free, int npes) {
  std::string m = "kernel `" + entry + "` needs a symmetric workspace of " + Bytes(f.needed) +
                  " (scratch plus staged buffers) and the NVSHMEM symmetric heap is too small for it: " +
                  "NVSHMEM_SYMMETRIC_SIZE is " + Bytes(f.configured);
  if (f.known_capacity > 0) m += " (this process's workspace so far: " + Bytes(f.known_capacity) + ")";
  m += ", and growing the heap by " + Bytes(AlignUpTo(f.request, kHeapGrowthChunk)) + " needs " +
       Bytes(GrowthNeeds(f)) + " of free GPU memory, but this PE has " + Bytes(f.free_bytes) + " free of " +
       Bytes(f.total_bytes);
  if (npes > 1) m += " (the least on any of the " + std::to_string(npes) + " PEs: " + Bytes(min_free) + ")";
  m += ". Nothing was allocated and no PE ran the kernel; later calls that fit run as before. Raise "
       "NVSHMEM_SYMMETRIC_SIZE (e.g. NVSHMEM_SYMMETRIC_SIZE=" +
       std::to_string(AlignUpTo(f.needed + kNvshmemOwnShare, size_t{1} << 30) >> 30) +
       "G) in every process before NVSHMEM starts, and leave that much GPU memory outside XLA's pool: XLA "
       "preallocates 75% of GPU memory, so lower XLA_PYTHON_CLIENT_MEM_FRACTION (e.g. 0.5) or set "
       "XLA_PYTHON_CLIENT_PREALLOCATE=false";
  return m;
}

std::string AgreeOnGrowth(const DriverApi& cu, const NvshmemApi& shm, CUstream stream, unsigned char* agree,
                          bool local_ok, size_t free_bytes, bool* all_ok, size_t* min_free) {
  // Both arrays outlive the asynchronous copies: the stream is synchronised before returning.
  uint64_t mine[2] = {local_ok ? 1u : 0u, static_cast<uint64_t>(free_bytes)};
  uint64_t all[2] = {0, 0};
  auto* src = reinterpret_cast<uint64_t*>(agree);
  auto* dst = reinterpret_cast<uint64_t*>(agree + 16);
  if (CUresult r = cu.cuMemcpyHtoDAsync(reinterpret_cast<CUdeviceptr>(src), mine, sizeof mine, stream);
      r != CUDA_SUCCESS) {
    return "copying this PE's heap verdict to the device failed: " + CuErrorText(r);
  }
  if (int rc = shm.nvshmemx_uint64_min_reduce_on_stream(NVSHMEM_TEAM_WORLD, dst, src, 2,
                                                        reinterpret_cast<cudaStream_t>(stream));
      rc != 0) {
    return "nvshmemx_uint64_min_reduce_on_stream (agreeing on the heap growth) failed with status " +
           std::to_string(rc);
  }
  if (CUresult r = cu.cuMemcpyDtoHAsync(all, reinterpret_cast<CUdeviceptr>(dst), sizeof all, stream);
      r != CUDA_SUCCESS) {
    return "copying the PEs' heap verdict to the host failed: " + CuErrorText(r);
  }
  if (CUresult r = cu.cuStreamSynchronize(stream); r != CUDA_SUCCESS) {
    return "cuStreamSynchronize after agreeing on the heap growth failed: " + CuErrorText(r);
  }
  *all_ok = all[0] == 1;
  *min_free = static_cast<size_t>(all[1]);
  return "";
}

}  // namespace jax_tilescale
