// Host emulation of the CUDA that the mma.sync GEMM lowering emits (tests only).
//
// A block runs as one std::thread per CUDA thread, the blocks of a thread-block cluster at once (main.inc), each
// with shared memory of its own; __syncthreads is a block barrier. ldmatrix and
// mma.sync are warp-collective: each lane publishes its operands, the warp meets, every lane
// computes its own result from all lanes' operands as the PTX ISA defines the fragments. cp.async
// copies are queued per thread and performed only when cp.async.wait_group retires their commit
// group, so reading a stage before waiting for it reads stale bytes (shared memory starts as NaN
// patterns). Addresses are checked: 16-byte alignment, inside the block's
// dynamic shared memory.
#include <barrier>
#include <condition_variable>
#include <mutex>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <thread>
#include <vector>

#include <cuda_fp16.h>
#include <cuda_bf16.h>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __shared__
#define __align__(n)
#define __launch_bounds__(...)
#define __cluster_dims__(...)  // emulator.build reads the dimensions from the kernel's text

struct TsDim3 { unsigned x, y, z; };
thread_local TsDim3 threadIdx;
thread_local TsDim3 blockIdx;

// TsLaunchArgs comes from jax_tilescale/abi/ts_abi.h, which build() puts before this file.
// A plain kernel's launch: number 0, its scratch the call site's own (main: zero at the start; a kernel that
// promises to leave it zero, left_zero, is checked at the end). Any arch's kernel may read them (a tile queue's
// counter is left_zero scratch in the generic code too).
inline uint64_t ts_launch_seq(const TsLaunchArgs&) { return 0; }
inline unsigned char* ts_launch_scratch(const TsLaunchArgs& args, uint64_t) { return args.scratch; }

static size_t ts_emu_smem_bytes;
constexpr size_t TS_EMU_SMEM_MAX = 256 * 1024;
// This thread's block's dynamic shared memory, 1024-byte aligned (the kernel's `ts_smem_raw`: emulator.build
// rewrites its extern declaration to this pointer).
thread_local unsigned char* ts_emu_smem_base;

[[noreturn]] static void ts_emu_die(const char* what, long long v) {
  std::fprintf(stderr, "emulator: %s (%lld), thread %u block %u,%u\n", what, v, threadIdx.x, blockIdx.x, blockIdx.y);
  std::abort();
}
[[noreturn]] void ts_fail(const char* where, const char* what, long long value, long long) {
  std::fprintf(stderr, "%s: ", where);
  ts_emu_die(what, value);
}
// ts_floordiv, ts_mod, ts_min, ts_max: tilescale_device.cuh's own (emulator.build puts them after this file)

// ---- the block: barriers and per-warp exchange areas ----
// A warp-collective operation publishes into one of two areas, alternately, and meets the warp
// once: a lane rewrites an area only after the next operation's meeting, by which time every lane
// has read what the area held.
struct TsWarpArea {
  uint32_t addr[32];
  uint32_t a[32][4], b[32][2];
  uint64_t value[32];  // shuffles
};
thread_local std::barrier<>* ts_emu_block_bar;  // this thread's block's (main.inc)
thread_local std::barrier<>* const* ts_emu_warp_bar;
thread_local TsWarpArea* ts_emu_warp;  // two per warp
thread_local unsigned ts_emu_turn;
static TsWarpArea& ts_emu_area() { return ts_emu_warp[2 * (threadIdx.x / 32) + (ts_emu_turn++ & 1)]; }
inline void __syncthreads() { ts_emu_block_bar->arrive_and_wait(); }
static inline unsigned ts_emu_lane() { return threadIdx.x % 32; }
static inline void ts_emu_warp_sync() { ts_emu_warp_bar[threadIdx.x / 32]->arrive_and_wait(); }

// ---- the cluster this thread's block runs in (main.inc: a cluster of one block where the kernel has none) ----
struct TsEmuCluster {
  unsigned dims[3];
  std::vector<unsigned char*> smem;  // each block's shared memory, by rank
  std::vector<void*> state;          // each block's barriers (shim_sm90.h), by rank
  unsigned threads = 0;              // of all its blocks: a cluster barrier's count
  unsigned arrived = 0;
  uint64_t generation = 0;
};
thread_local TsEmuCluster* ts_emu_cluster;
thread_local unsigned ts_emu_rank;

// ---- warp shuffles (every lane of the warp takes part, as the generated code's full masks say) ----
template <typename T>
static T ts_emu_shuffle(unsigned mask, T v, unsigned from) {
  static_assert(sizeof(T) <= 8, "a shuffled value fits 8 bytes");
  if (mask != 0xffffffffu) ts_emu_die("a shuffle without every lane of the warp", mask);
  TsWarpArea& w = ts_emu_area();
  std::memcpy(&w.value[ts_emu_lane()], &v, sizeof v);
  ts_emu_warp_sync();
  T out;
  std::memcpy(&out, &w.value[from % 32], sizeof out);
  return out;
}
template <typename T>
inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask) { return ts_emu_shuffle(mask, v, ts_emu_lane() ^ lane_mask); }
template <typename T>
inline T __shfl_sync(unsigned mask, T v, int lane) { return ts_emu_shuffle(mask, v, static_cast<unsigned>(lane)); }
inline void __syncwarp(unsigned = 0xffffffffu) { ts_emu_warp_sync(); }

inline uint32_t ts_smem_u32(const void* p) {
  const unsigned char* c = static_cast<const unsigned char*>(p);
  if (c < ts_emu_smem_base || c > ts_emu_smem_base + ts_emu_smem_bytes) ts_emu_die("not a shared-memory pointer", 0);
  return static_cast<uint32_t>(c - ts_emu_smem_base);
}
// What the kernels' prologue aligns the dynamic shared memory by (codegen/cuda.py): the shared-space address.
inline size_t __cvta_generic_to_shared(const void* p) { return ts_smem_u32(p); }
inline void __nanosleep(unsigned) {}  // the stage trace's turn (gemm_sm90_trace.timed_turn): no time to sleep here
static unsigned char* ts_emu_smem(uint32_t addr, uint32_t bytes) {
  if (addr + bytes > ts_emu_smem_bytes) ts_emu_die("shared-memory access past the dynamic shared memory", addr);
  return ts_emu_smem_base + addr;
}

// ---- cp.async: queued, performed when their group is retired ----
struct TsEmuCopy { uint32_t smem; const void* gmem; };
thread_local std::vector<TsEmuCopy> ts_emu_open;
thread_local std::deque<std::vector<TsEmuCopy>> ts_emu_groups;
inline void ts_cp_async_cg16(uint32_t smem, const void* gmem) {
  if (smem % 16) ts_emu_die("cp.async shared address not 16-byte aligned", smem);
  if (reinterpret_cast<uintptr_t>(gmem) % 16) ts_emu_die("cp.async global address not 16-byte aligned", 0);
  ts_emu_smem(smem, 16);
  ts_emu_open.push_back({smem, gmem});
}
inline void ts_cp_async_cg16_zfill(uint32_t smem, const void* gmem, bool inside, const void* safe) {
  if (inside) {
    ts_cp_async_cg16(smem, gmem);
  } else {  // nothing read; the 16 bytes become zero when the group completes
    ts_cp_async_cg16(smem, safe);
    ts_emu_open.back().gmem = nullptr;
  }
}
// plain loads and one shared store, at once (tilescale_sm80.cuh): elements from `valid` on are zero
inline void ts_copy16_u16(uint32_t smem, const void* gmem, int valid) {
  if (smem % 16) ts_emu_die("16-byte shared store not 16-byte aligned", smem);
  if (valid < 0 || valid > 8) ts_emu_die("ts_copy16_u16: valid elements outside 0..8", smem);
  unsigned char* dst = ts_emu_smem(smem, 16);
  std::memset(dst, 0, 16);
  if (valid) std::memcpy(dst, gmem, 2 * static_cast<size_t>(valid));
}
inline void ts_cp_async_commit() {
  ts_emu_groups.push_back(ts_emu_open);
  ts_emu_open.clear();
}
template <int N>
inline void ts_cp_async_wait() {
  while (ts_emu_groups.size() > static_cast<size_t>(N)) {
    for (const TsEmuCopy& c : ts_emu_groups.front()) {
      if (c.gmem) std::memcpy(ts_emu_smem(c.smem, 16), c.gmem, 16);
      else std::memset(ts_emu_smem(c.smem, 16), 0, 16);
    }
    ts_emu_groups.pop_front();
  }
}

// ---- ldmatrix: lanes 8i..8i+7 address the rows of matrix i ----
static void ts_emu_ldsm(uint32_t* r, uint32_t addr, bool trans) {
  if (addr % 16) ts_emu_die("ldmatrix row address not 16-byte aligned", addr);
  TsWarpArea& w = ts_emu_area();
  const unsigned lane = ts_emu_lane();
  w.addr[lane] = addr;
  ts_emu_warp_sync();
  for (int i = 0; i < 4; ++i) {
    uint16_t lo, hi;
    if (!trans) {  // row lane/4, columns 2 (lane%4), +1
      const unsigned char* row = ts_emu_smem(w.addr[8 * i + lane / 4], 16);
      std::memcpy(&lo, row + 4 * (lane % 4), 2);
      std::memcpy(&hi, row + 4 * (lane % 4) + 2, 2);
    } else {  // rows 2 (lane%4), +1, column lane/4
      std::memcpy(&lo, ts_emu_smem(w.addr[8 * i + 2 * (lane % 4)], 16) + 2 * (lane / 4), 2);
      std::memcpy(&hi, ts_emu_smem(w.addr[8 * i + 2 * (lane % 4) + 1], 16) + 2 * (lane / 4), 2);
    }
    r[i] = static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
  }
}
inline void ts_ldsm_x4(uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3, uint32_t addr) {
  uint32_t r[4];
  ts_emu_ldsm(r, addr, false);
  r0 = r[0], r1 = r[1], r2 = r[2], r3 = r[3];
}
inline void ts_ldsm_x4_trans(uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3, uint32_t addr) {
  uint32_t r[4];
  ts_emu_ldsm(r, addr, true);
  r0 = r[0], r1 = r[1], r2 = r[2], r3 = r[3];
}

// ---- mma.sync m16n8k16 row.col, fragments as the PTX ISA lays them out ----
template <typename T>
static float ts_emu_half(uint32_t reg, int k) {
  const uint16_t bits = static_cast<uint16_t>(k % 2 ? reg >> 16 : reg);
  T v;
  std::memcpy(&v, &bits, 2);
  return static_cast<float>(v);
}
template <typename T>
static void ts_emu_mma(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  TsWarpArea& w = ts_emu_area();
  const unsigned lane = ts_emu_lane();
  std::memcpy(w.a[lane], a, sizeof a);
  std::memcpy(w.b[lane], b, sizeof b);
  ts_emu_warp_sync();
  for (int e = 0; e < 4; ++e) {
    const int row = lane / 4 + 8 * (e / 2), col = 2 * (lane % 4) + e % 2;
    float sum = 0.0f;
    for (int k = 0; k < 16; ++k) {
      const float av = ts_emu_half<T>(w.a[(row % 8) * 4 + (k % 8) / 2][row / 8 + 2 * (k / 8)], k);
      const float bv = ts_emu_half<T>(w.b[col * 4 + (k % 8) / 2][k / 8], k);
      sum += av * bv;
    }
    d[e] += sum;
  }
}
inline void ts_mma_16816_bf16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  ts_emu_mma<__nv_bfloat16>(d, a, b);
}
inline void ts_mma_16816_f16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  ts_emu_mma<__half>(d, a, b);
}
