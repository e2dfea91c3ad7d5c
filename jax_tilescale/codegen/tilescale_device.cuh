// tilescale_device.cuh: the fixed part of every kernel that jax_tilescale generates.
//
// The code generator inlines this file into the generated source (after defining
// TS_USES_NVSHMEM), so that compiling a kernel needs nothing but the CUDA toolkit and, for
// kernels that communicate, NVSHMEM's headers. It holds the calling convention of
// docs/calling_convention.md and the small device helpers the generated statements call.

#include <stdint.h>
#include <stddef.h>
#include <stdio.h>
#if TS_USES_NVSHMEM
#include <nvshmem.h>
#include <nvshmemx.h>
#endif

// ---- calling convention (docs/calling_convention.md; bump TS_ABI_VERSION with any change) ----

#define TS_ABI_VERSION 1
#define TS_MAX_BUFFERS 32

struct TsLaunchArgs {              // the kernel's only parameter, passed by value
  int32_t pe;                      // this device's kernel PE, 0 .. npes-1
  int32_t npes;                    // size of the kernel's PE space (product of its mesh axes)
  const int32_t* pe_map;           // device array [npes]: kernel PE -> NVSHMEM PE
  unsigned char* scratch;          // symmetric memory, 256-byte aligned, scratch_bytes long,
                                   // all zero when the kernel starts (signals, counters)
  void* buffers[TS_MAX_BUFFERS];   // kernel inputs then outputs, in IR order (KernelIR.params)
};

// The host side (xla_ffi/) builds the same struct; these pin the layout both sides assume
// (LP64: 4 + 4 + 8 + 8 + 32 * 8 = 280 bytes).
static_assert(sizeof(TsLaunchArgs) == 280, "TsLaunchArgs must be 280 bytes (calling convention v1)");
static_assert(offsetof(TsLaunchArgs, pe) == 0, "TsLaunchArgs.pe at 0");
static_assert(offsetof(TsLaunchArgs, npes) == 4, "TsLaunchArgs.npes at 4");
static_assert(offsetof(TsLaunchArgs, pe_map) == 8, "TsLaunchArgs.pe_map at 8");
static_assert(offsetof(TsLaunchArgs, scratch) == 16, "TsLaunchArgs.scratch at 16");
static_assert(offsetof(TsLaunchArgs, buffers) == 24, "TsLaunchArgs.buffers at 24");

// ---- index arithmetic with Python semantics (the CPU interpreter is the reference) ----

// Stops the kernel with a message. Every caller is block-uniform (index expressions depend
// only on the block index and the PE), so thread 0 can print while the others wait for it.
__device__ __noinline__ void ts_fail(const char* where, const char* what, long long value, long long limit) {
  if (threadIdx.x == 0) {
    printf("jax_tilescale: kernel error at %s (block %u,%u,%u): %s (value %lld, limit %lld)\n", where, blockIdx.x,
           blockIdx.y, blockIdx.z, what, value, limit);
  }
  __syncthreads();
  __trap();
}

// Division by zero and bad indices stop the kernel; host builds of these helpers (tests)
// return 0 instead.
#ifdef __CUDA_ARCH__
#define TS_DIV_BY_ZERO(where, what, a) ts_fail(where, what, a, 0)
#define TS_CHECK_FAILED(where, what, a, limit) ts_fail(where, what, a, limit)
#else
#define TS_DIV_BY_ZERO(where, what, a) return 0
#define TS_CHECK_FAILED(where, what, a, limit) return 0
#endif

// Python's a // b: rounds towards minus infinity.
__host__ __device__ __forceinline__ int64_t ts_floordiv(int64_t a, int64_t b, const char* where) {
  if (b == 0) TS_DIV_BY_ZERO(where, "integer // by zero in an index expression", a);
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

// Python's a % b: the result has the sign of the divisor.
__host__ __device__ __forceinline__ int64_t ts_mod(int64_t a, int64_t b, const char* where) {
  if (b == 0) TS_DIV_BY_ZERO(where, "integer % by zero in an index expression", a);
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

__host__ __device__ __forceinline__ int64_t ts_min(int64_t a, int64_t b) { return a < b ? a : b; }
__host__ __device__ __forceinline__ int64_t ts_max(int64_t a, int64_t b) { return a > b ? a : b; }

// T.load: one integer of a kernel input as an index value. `ts_bound` checks one index against
// its extent (the verifier proves it statically where the index is affine).
__host__ __device__ __forceinline__ int64_t ts_bound(int64_t v, int64_t extent, const char* where) {
  if (v < 0 || v >= extent) TS_CHECK_FAILED(where, "T.load index out of bounds", v, extent);
  return v;
}

template <typename T>
__host__ __device__ __forceinline__ int64_t ts_load(const unsigned char* base, int64_t i) {
  return (int64_t)(reinterpret_cast<const T*>(base)[i]);
}

// A transfer with a run-time byte count: whole rows from a start row in [0, extent] (the end
// when nothing moves), inside both buffers; returns the count to pass to NVSHMEM.
__device__ __forceinline__ size_t ts_row_bytes(int64_t bytes, int64_t row_bytes, int64_t src_start, int64_t src_rows,
                                               int64_t dst_start, int64_t dst_rows, const char* where) {
  if (bytes < 0 || bytes % row_bytes != 0) ts_fail(where, "transfer size is not a whole number of rows", bytes, row_bytes);
  const int64_t rows = bytes / row_bytes;
  if (src_start < 0 || src_start + rows > src_rows) ts_fail(where, "transfer leaves its source (first row)", src_start, src_rows - rows);
  if (dst_start < 0 || dst_start + rows > dst_rows) ts_fail(where, "transfer leaves its destination (first row)", dst_start, dst_rows - rows);
  return (size_t)bytes;
}

#if TS_USES_NVSHMEM
// Kernel PE -> NVSHMEM PE, after checking that the kernel PE exists (the verifier proves this
// statically where it can; this is the run-time check for the rest).
__device__ __forceinline__ int ts_target_pe(const int32_t* pe_map, int32_t npes, int64_t k, const char* where,
                                            const char* what) {
  if (k < 0 || k >= npes) ts_fail(where, what, k, npes);
  return pe_map[k];
}

// The peer's mapping of a symmetric address, for plain loads and stores (put_block, get_block,
// remote waits). Null means the peer is not load/store reachable (another node, no P2P): stop
// with the op, the PE and the line. Block-uniform, like ts_fail.
__device__ __noinline__ unsigned char* ts_peer_ptr(const void* local, int nvshmem_pe, int64_t kernel_pe,
                                                   const char* where, const char* op) {
  void* p = nvshmem_ptr(local, nvshmem_pe);
  if (p == nullptr) {
    if (threadIdx.x == 0) {
      printf("jax_tilescale: kernel error at %s (block %u,%u,%u): %s: PE %lld (NVSHMEM PE %d) is not load/store "
             "reachable from this PE (nvshmem_ptr returned null); use the putmem/getmem forms for such peers\n",
             where, blockIdx.x, blockIdx.y, blockIdx.z, op, (long long)kernel_pe, nvshmem_pe);
    }
    __syncthreads();
    __trap();
  }
  return static_cast<unsigned char*>(p);
}

// Acquire loads at system scope: words that peers update (remote waits, wait_* on local words).
__device__ __forceinline__ uint32_t ts_ld_acquire_sys_u32(const void* p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ uint64_t ts_ld_acquire_sys_u64(const void* p) {
  uint64_t v;
  asm volatile("ld.acquire.sys.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
#endif

// ---- grid-wide barrier among this PE's blocks (all blocks must be co-resident) ----

__device__ __forceinline__ unsigned int ts_ld_acquire_u32(const unsigned int* p) {
  unsigned int v;
  asm volatile("ld.acquire.gpu.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// Generation-based, so it is reusable without re-zeroing: `count` and `gen` are words of the
// zeroed scratch. Thread 0 of each block arrives; the last arrival resets the count and then
// bumps the generation, which releases the others. The fences make every write of every block
// before the barrier visible to every block after it (bar.sync is cumulative with them).
__device__ __noinline__ void ts_grid_barrier(unsigned int* count, unsigned int* gen, unsigned int nblocks) {
  __syncthreads();
  if (threadIdx.x == 0) {
    const unsigned int my_gen = ts_ld_acquire_u32(gen);  // read before arriving: cannot miss the bump
    __threadfence();
    if (atomicAdd(count, 1u) == nblocks - 1u) {
      atomicExch(count, 0u);
      __threadfence();
      atomicAdd(gen, 1u);
    } else {
      while (ts_ld_acquire_u32(gen) == my_gen) __nanosleep(64);
    }
    __threadfence();
  }
  __syncthreads();
}

#if TS_USES_NVSHMEM
// ---- barrier over the kernel's PE space (any PE map: a team of the mesh, or the world) ----

// Words of the zeroed symmetric scratch. `ticket` and `passed` are this PE's own; `arrive` is
// the word every PE of the team adds 1 to, on every PE, per barrier instance.
struct TsTeamBarrier {
  unsigned int ticket;  // calls made by this PE (instance numbers handed out)
  unsigned int passed;  // instances this PE has completed
  uint64_t arrive;      // arrivals at this PE, counted over all instances
};

// One thread calls it. The k-th call of each PE forms instance k (NVSHMEM's team collective
// rule). A PE's calls arrive in instance order (`passed`), so before anyone completes instance k
// every PE has arrived at most k + 1 times, and `arrive >= (k + 1) * npes` on a PE proves that
// every PE made its k-th call. Counting over instances needs no reset within a launch. Every
// memory access of the calling thread before it (and, with the caller's __syncthreads, of its
// block) is visible to every PE after it; NVSHMEM puts need a quiet first (the caller's job).
__device__ __noinline__ void ts_team_barrier(TsTeamBarrier* b, const int32_t* pe_map, int32_t npes) {
  const unsigned int k = atomicAdd(&b->ticket, 1u);
  while (ts_ld_acquire_u32(&b->passed) != k) __nanosleep(64);
  __threadfence_system();
  for (int32_t q = 0; q < npes; ++q) nvshmemx_signal_op(&b->arrive, 1, NVSHMEM_SIGNAL_ADD, pe_map[q]);
  nvshmem_signal_wait_until(&b->arrive, NVSHMEM_CMP_GE, (uint64_t)(k + 1u) * (uint64_t)npes);
  __threadfence_system();
  atomicExch(&b->passed, k + 1u);
}
#endif
