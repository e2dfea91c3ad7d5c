// Host emulation of what Hopper (sm_90/sm_90a) kernels execute (tests only), on top of shim.h.
//
// The helpers of jax_tilescale/codegen/tilescale_sm90.cuh that are plain arithmetic (the wgmma
// descriptor, the swizzled chunk offset, the producer's thread copy) are the header's own text,
// placed after this file by emulator.build(); everything that is an instruction is emulated here as
// the PTX ISA defines it, independently of how the code generator computes its operands:
// - mbarriers: an arrival count and a transaction count per phase; a wait for a parity blocks until
//   that phase has completed (a wait that lasts TS_EMU_WAIT_S seconds is a deadlock: reported, not hung).
//   The barrier's 8 bytes of shared memory hold a tag, so kernel data written over a barrier is reported.
// - named barriers (bar.sync / bar.arrive id, count): thread counts, multiples of a warp.
// - TMA (cp.async.bulk.tensor.2d): boxes copied through the tensor map the handler would encode,
//   elements outside the tensor zero on load and not written on store, shared memory laid out with the
//   map's swizzle applied to the shared-memory address bits (bits 4.. XOR bits 7..); a load completes
//   its box's bytes on the barrier; a store is performed only when its bulk group is waited for (or at
//   the thread's exit), so a staging slot rewritten before that wait shows in the result.
// - clusters (__cluster_dims__): the cluster's blocks run at once (main.inc); %cluster_ctarank, the cluster
//   barrier, a peer's shared memory through mapa, TMA multicast into every masked block (each block's barrier
//   at the same offset completing the bytes that land in it) and arrivals on a peer's mbarrier.
// - wgmma.mma_async: each thread computes its own accumulator fragment (PTX's m64nNk16 f32 layout)
//   from shared memory read through the descriptors (start, leading and stride byte offsets, swizzle),
//   when wgmma.wait_group retires the instruction's group: a stage released before its products are
//   retired, or an accumulator read before its wait, shows in the result. The lanes of a warp run as
//   threads of their own; they meet where an instruction is .sync.aligned and the kernel relies on it.
#include <chrono>
#include <cmath>
#include <functional>
#include <string>
#include <condition_variable>
#include <map>
#include <mutex>

#ifndef TS_EMU_WAIT_S
#define TS_EMU_WAIT_S 30
#endif

template <typename T>
inline T __ldg(const T* p) { return *p; }
inline uint32_t ts_smem_addr(const void* p) { return ts_smem_u32(p); }
inline void ts_wait_for_prior_grid() {}
// %globaltimer: the host's steady clock in nanoseconds; clock64: in microseconds (an emulated loop takes
// milliseconds, and the stage trace keeps 24 bits of a loop's cycles)
inline uint64_t ts_emu_globaltimer() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::steady_clock::now().time_since_epoch()).count());
}
inline long long clock64() { return static_cast<long long>(ts_emu_globaltimer() / 1000); }
// ts_launch_seq, ts_launch_scratch: shim.h's (every arch's kernel may have left_zero scratch)
inline void ts_launch_dependents() {}
template <int R> inline void ts_setmaxnreg_inc() {}
template <int R> inline void ts_setmaxnreg_dec() {}
inline void ts_tma_prefetch_desc(const void*) {}
inline void ts_fence_proxy_async() {}
inline void ts_fence_proxy_async_global() {}
inline void ts_mbar_init_fence() {}
inline void ts_wgmma_fence() {}
template <int N> inline void ts_fence_regs(float (&)[N]) {}

// ---- one lock for every barrier of the cluster running now; waits sleep on it ----
static std::mutex ts_emu_mu;
static std::condition_variable ts_emu_cv;

// Every thread blocked in a wait, and on what (a line computed when a deadlock is reported, under the lock).
struct TsEmuWaiter {
  unsigned rank, thread;
  std::function<std::string()> what;
};
static std::map<const void*, TsEmuWaiter> ts_emu_waiters;  // by the waiting thread's own marker
thread_local char ts_emu_waiter_marker;

// Sleeps until `done`; a wait of TS_EMU_WAIT_S seconds is a deadlock: every blocked thread's wait is printed
// (each block's barriers as they stand), then the run stops.
template <typename Done>
static void ts_emu_block_until(std::unique_lock<std::mutex>& lock, Done done, std::function<std::string()> what) {
  ts_emu_waiters[&ts_emu_waiter_marker] = TsEmuWaiter{ts_emu_rank, threadIdx.x, std::move(what)};
  const bool ok = ts_emu_cv.wait_for(lock, std::chrono::seconds(TS_EMU_WAIT_S), done);
  if (!ok) {
    std::fprintf(stderr, "emulator: deadlock in the cluster of block (%u,%u,%u): %zu threads have waited %d s:\n",
                 blockIdx.x, blockIdx.y, blockIdx.z, ts_emu_waiters.size(), TS_EMU_WAIT_S);
    std::map<std::string, int> lines;  // the same wait by many threads: said once, counted
    for (const auto& [_, w] : ts_emu_waiters) ++lines["block rank " + std::to_string(w.rank) + ": " + w.what()];
    for (const auto& [line, n] : lines) std::fprintf(stderr, "emulator:   %s (%d threads)\n", line.c_str(), n);
    lock.unlock();
    ts_emu_die("a wait never completed (deadlock)", 0);
  }
  ts_emu_waiters.erase(&ts_emu_waiter_marker);
}

// ---- a block's barriers (main.inc keeps one per block, by cluster rank) ----
struct TsEmuMbar {
  uint32_t count = 0, pending = 0, phase = 0;
  int64_t tx = 0;
};
struct TsEmuNamed {
  uint32_t arrived = 0, expected = 0;
  uint64_t generation = 0;
};
struct TsEmuBarriers {
  std::map<uint32_t, TsEmuMbar> mbars;  // by shared-memory address
  TsEmuNamed named[16];
};
#define TS_EMU_STATE_NEW() static_cast<void*>(new TsEmuBarriers())
#define TS_EMU_STATE_DELETE(state) delete static_cast<TsEmuBarriers*>(state)
static TsEmuBarriers& ts_emu_barriers(unsigned rank) { return *static_cast<TsEmuBarriers*>(ts_emu_cluster->state[rank]); }
static constexpr uint64_t TS_EMU_MBAR_TAG = 0x6d62617254534d55ull;

// The mbarrier at shared-memory address `addr` of the cluster's block `rank`.
static TsEmuMbar& ts_emu_mbar_at(unsigned rank, uint32_t addr, const char* op) {
  auto& mbars = ts_emu_barriers(rank).mbars;
  auto it = mbars.find(addr);
  if (it == mbars.end()) ts_emu_die(op, addr);
  uint64_t tag;
  std::memcpy(&tag, ts_emu_cluster->smem[rank] + addr, 8);
  if (tag != (TS_EMU_MBAR_TAG ^ addr)) ts_emu_die("an mbarrier's shared memory was overwritten", addr);
  return it->second;
}
static TsEmuMbar& ts_emu_mbar(uint64_t* bar, const char* op) { return ts_emu_mbar_at(ts_emu_rank, ts_smem_u32(bar), op); }
static void ts_emu_mbar_settle(TsEmuMbar& b) {  // the phase completes: the next one expects `count` arrivals
  if (b.pending == 0 && b.tx == 0) {
    b.phase ^= 1;
    b.pending = b.count;
    ts_emu_cv.notify_all();
  }
}
inline void ts_mbar_init(uint64_t* bar, uint32_t count) {
  std::lock_guard<std::mutex> g(ts_emu_mu);
  const uint32_t addr = ts_smem_u32(bar);
  if (addr % 8) ts_emu_die("mbarrier not 8-byte aligned", addr);
  if (count == 0) ts_emu_die("mbarrier initialised with count 0", addr);
  const uint64_t tag = TS_EMU_MBAR_TAG ^ addr;
  std::memcpy(ts_emu_smem(addr, 8), &tag, 8);
  ts_emu_barriers(ts_emu_rank).mbars[addr] = TsEmuMbar{count, count, 0, 0};
}
static void ts_emu_arrive_locked(unsigned rank, uint32_t addr, uint32_t n) {
  TsEmuMbar& b = ts_emu_mbar_at(rank, addr, "arrive on an mbarrier never initialised");
  if (n > b.pending) ts_emu_die("more arrivals on an mbarrier than its phase expects", addr);
  b.pending -= n;
  ts_emu_mbar_settle(b);
}
inline void ts_mbar_arrive(uint64_t* bar) {
  std::lock_guard<std::mutex> g(ts_emu_mu);
  ts_emu_arrive_locked(ts_emu_rank, ts_smem_u32(bar), 1);
}
inline void ts_mbar_arrive_count(uint64_t* bar, uint32_t count) {
  std::lock_guard<std::mutex> g(ts_emu_mu);
  ts_emu_arrive_locked(ts_emu_rank, ts_smem_u32(bar), count);
}
// One arrival on the barrier at `bar`'s offset in block `rank` of the cluster (mapa + mbarrier.arrive.shared::cluster).
inline void ts_mbar_arrive_cluster(uint64_t* bar, uint32_t rank) {
  if (rank >= ts_emu_cluster->smem.size()) ts_emu_die("arrival on a block outside the cluster", rank);
  std::lock_guard<std::mutex> g(ts_emu_mu);
  ts_emu_arrive_locked(rank, ts_smem_u32(bar), 1);
}
inline void ts_mbar_expect_tx(uint64_t* bar, uint32_t bytes) {
  std::lock_guard<std::mutex> g(ts_emu_mu);
  ts_emu_mbar(bar, "expect_tx on an mbarrier never initialised").tx += bytes;
}
inline void ts_mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  std::lock_guard<std::mutex> g(ts_emu_mu);
  ts_emu_mbar(bar, "expect_tx on an mbarrier never initialised").tx += bytes;
  ts_emu_arrive_locked(ts_emu_rank, ts_smem_u32(bar), 1);
}
static void ts_emu_complete_tx(unsigned rank, uint32_t addr, uint32_t bytes) {
  std::lock_guard<std::mutex> g(ts_emu_mu);
  TsEmuMbar& b = ts_emu_mbar_at(rank, addr, "a copy completes on an mbarrier never initialised");
  b.tx -= bytes;
  ts_emu_mbar_settle(b);
}
// try_wait.parity: true once the phase of that parity has completed (the barrier is in the other one).
inline void ts_mbar_wait(uint64_t* bar, uint32_t parity) {
  std::unique_lock<std::mutex> lock(ts_emu_mu);
  TsEmuMbar& b = ts_emu_mbar(bar, "wait on an mbarrier never initialised");
  const uint32_t addr = ts_smem_u32(bar);
  ts_emu_block_until(lock, [&] { return b.phase != (parity & 1); }, [&b, addr, parity] {
    return "mbarrier at " + std::to_string(addr) + " waited for parity " + std::to_string(parity & 1) + ": phase " +
           std::to_string(b.phase) + ", " + std::to_string(b.pending) + " of " + std::to_string(b.count) +
           " arrivals pending, " + std::to_string(b.tx) + " transaction bytes";
  });
}

// ---- cp.async into shared memory, arriving on an mbarrier (performed at once: they complete before the arrival) ----
inline void ts_cp_async16(void* smem_dst, const void* gmem_src) {
  std::memcpy(ts_emu_smem(ts_smem_u32(smem_dst), 16), gmem_src, 16);
}
inline void ts_cp_async_arrive(uint64_t* bar) { ts_mbar_arrive(bar); }
inline void ts_cp_async_wait_all() {}

// ---- named barriers ----
static void ts_emu_named_arrive(uint32_t id, uint32_t threads, bool wait) {
  if (id == 0 || id >= 16) ts_emu_die("named barrier id outside 1..15 (0 is __syncthreads)", id);
  if (threads == 0 || threads % 32) ts_emu_die("named barrier thread count not a multiple of 32", threads);
  std::unique_lock<std::mutex> lock(ts_emu_mu);
  TsEmuNamed& b = ts_emu_barriers(ts_emu_rank).named[id];
  if (b.arrived == 0) b.expected = threads;
  if (b.expected != threads) ts_emu_die("named barrier used with two thread counts at once", id);
  const uint64_t gen = b.generation;
  if (++b.arrived == threads) {
    b.arrived = 0;
    ++b.generation;
    ts_emu_cv.notify_all();
  } else if (wait) {
    ts_emu_block_until(lock, [&] { return b.generation != gen; }, [&b, id] {
      return "named barrier " + std::to_string(id) + ": " + std::to_string(b.arrived) + " of " +
             std::to_string(b.expected) + " threads arrived";
    });
  }
}
inline void ts_named_sync(uint32_t id, uint32_t threads) { ts_emu_named_arrive(id, threads, true); }
inline void ts_named_arrive(uint32_t id, uint32_t threads) { ts_emu_named_arrive(id, threads, false); }

// ---- tensor maps: what the handler's cuTensorMapEncodeTiled would hold (main fills them from the module) ----
struct TsEmuMap {
  unsigned char* base;
  int64_t esize, dims[2], row_stride, box[2], swizzle;  // swizzle: bytes (0 for none)
};
static const TsEmuMap& ts_emu_map(const void* tmap) { return *static_cast<const TsEmuMap*>(tmap); }
// The shared-memory address of byte `offset` of a box whose rows are laid out one after another.
static uint32_t ts_emu_swizzled(uint32_t base, uint32_t offset, int64_t swizzle) {
  const uint32_t a = base + offset;
  if (swizzle == 0) return a;
  const uint32_t mask = static_cast<uint32_t>(swizzle / 16 - 1);
  return a ^ (((a >> 7) & mask) << 4);
}
// Box (x, y) between the tensor and shared-memory address `smem` of the block whose shared memory is `base`.
static void ts_emu_box(const TsEmuMap& m, unsigned char* base, uint32_t smem, int32_t x, int32_t y, bool load) {
  if (smem % 128) ts_emu_die("TMA box not 128-byte aligned in shared memory", smem);
  const int64_t row_bytes = m.box[0] * m.esize;
  if (m.swizzle && row_bytes > m.swizzle) ts_emu_die("TMA box row wider than its swizzle", row_bytes);
  if (smem + row_bytes * m.box[1] > ts_emu_smem_bytes) ts_emu_die("TMA box past the dynamic shared memory", smem);
  for (int64_t j = 0; j < m.box[1]; ++j) {
    for (int64_t i = 0; i < m.box[0]; ++i) {
      const int64_t gx = x + i, gy = y + j;
      const bool inside = gx >= 0 && gy >= 0 && gx < m.dims[0] && gy < m.dims[1];
      unsigned char* s = base + ts_emu_swizzled(smem, static_cast<uint32_t>(j * row_bytes + i * m.esize), m.swizzle);
      unsigned char* g = m.base + gy * m.row_stride + gx * m.esize;
      if (load) {
        if (inside) std::memcpy(s, g, m.esize);
        else std::memset(s, 0, m.esize);
      } else if (inside) {
        std::memcpy(g, s, m.esize);
      }
    }
  }
}
inline void ts_tma_load_2d(void* smem_dst, const void* tmap, uint64_t* bar, int32_t x, int32_t y) {
  const TsEmuMap& m = ts_emu_map(tmap);
  ts_emu_box(m, ts_emu_smem_base, ts_smem_u32(smem_dst), x, y, true);
  ts_emu_complete_tx(ts_emu_rank, ts_smem_u32(bar), static_cast<uint32_t>(m.box[0] * m.box[1] * m.esize));
}
// The same box into every block of `mask`, at the same offsets; each block's barrier completes its own bytes.
inline void ts_tma_load_2d_multicast(void* smem_dst, const void* tmap, uint64_t* bar, int32_t x, int32_t y,
                                     uint16_t mask) {
  const TsEmuMap& m = ts_emu_map(tmap);
  if (mask >> ts_emu_cluster->smem.size()) ts_emu_die("multicast to a block outside the cluster", mask);
  for (unsigned r = 0; r < ts_emu_cluster->smem.size(); ++r) {
    if (!(mask >> r & 1)) continue;
    ts_emu_box(m, ts_emu_cluster->smem[r], ts_smem_u32(smem_dst), x, y, true);
    ts_emu_complete_tx(r, ts_smem_u32(bar), static_cast<uint32_t>(m.box[0] * m.box[1] * m.esize));
  }
}
struct TsEmuStore { const TsEmuMap* map; uint32_t smem; int32_t x, y; };
thread_local std::vector<TsEmuStore> ts_emu_bulk_open;
thread_local std::deque<std::vector<TsEmuStore>> ts_emu_bulk_groups;
inline void ts_tma_store_2d(const void* tmap, const void* smem_src, int32_t x, int32_t y) {
  ts_emu_bulk_open.push_back({&ts_emu_map(tmap), ts_smem_u32(smem_src), x, y});
}
// L2 eviction priorities: nothing to emulate (the copies are the same)
inline uint64_t ts_l2_evict_first() { return 1; }
inline uint64_t ts_l2_evict_last() { return 2; }
inline void ts_tma_load_2d_hint(void* smem_dst, const void* tmap, uint64_t* bar, int32_t x, int32_t y, uint64_t) {
  ts_tma_load_2d(smem_dst, tmap, bar, x, y);
}
inline void ts_tma_store_2d_hint(const void* tmap, const void* smem_src, int32_t x, int32_t y, uint64_t) {
  ts_tma_store_2d(tmap, smem_src, x, y);
}
// An L2 prefetch of a box: nothing lands in shared memory; the map must be one of the kernel's
inline void ts_tma_prefetch_2d(const void* tmap, int32_t, int32_t) { (void)ts_emu_map(tmap); }
inline void ts_bulk_commit() {
  ts_emu_bulk_groups.push_back(ts_emu_bulk_open);
  ts_emu_bulk_open.clear();
}
static void ts_emu_bulk_retire(size_t keep) {
  while (ts_emu_bulk_groups.size() > keep) {
    for (const TsEmuStore& s : ts_emu_bulk_groups.front()) ts_emu_box(*s.map, ts_emu_smem_base, s.smem, s.x, s.y, false);
    ts_emu_bulk_groups.pop_front();
  }
}
inline void ts_bulk_wait_read() { ts_emu_bulk_retire(0); }
inline void ts_bulk_wait() { ts_emu_bulk_retire(0); }
template <int N> inline void ts_bulk_wait_read_all_but() { ts_emu_bulk_retire(N); }

// ---- clusters (tilescale_compute.cuh's versions are renamed away by emulator.build) ----
inline uint32_t ts_cluster_rank() { return ts_emu_rank; }
// Every thread of every block of the cluster meets (barrier.cluster.arrive.release + wait.acquire).
inline void ts_cluster_sync() {
  std::unique_lock<std::mutex> lock(ts_emu_mu);
  TsEmuCluster& c = *ts_emu_cluster;
  const uint64_t gen = c.generation;
  if (++c.arrived == c.threads) {
    c.arrived = 0;
    ++c.generation;
    ts_emu_cv.notify_all();
  } else {
    ts_emu_block_until(lock, [&] { return c.generation != gen; }, [&c] {
      return "the cluster barrier: " + std::to_string(c.arrived) + " of " + std::to_string(c.threads) + " threads arrived";
    });
  }
}
// The generic address of the byte at `p` (this block's shared memory) in block `rank` of the cluster.
inline unsigned char* ts_cluster_map(unsigned char* p, uint32_t rank) {
  if (rank >= ts_emu_cluster->smem.size()) ts_emu_die("mapa to a block outside the cluster", rank);
  return ts_emu_cluster->smem[rank] + ts_smem_u32(p);
}

// ---- wgmma.mma_async ----
enum TsEmuType { TS_EMU_BF16, TS_EMU_F16, TS_EMU_E4M3, TS_EMU_E5M2 };
static float ts_emu_value(const unsigned char* p, TsEmuType t) {
  uint16_t h;
  switch (t) {
    case TS_EMU_BF16: {
      std::memcpy(&h, p, 2);
      const uint32_t bits = static_cast<uint32_t>(h) << 16;
      float f;
      std::memcpy(&f, &bits, 4);
      return f;
    }
    case TS_EMU_F16: {
      __half v;
      std::memcpy(&v, p, 2);
      return static_cast<float>(v);
    }
    case TS_EMU_E5M2: {  // the high byte of a binary16
      h = static_cast<uint16_t>(*p) << 8;
      __half v;
      std::memcpy(&v, &h, 2);
      return static_cast<float>(v);
    }
    case TS_EMU_E4M3: {  // 1-4-3, bias 7, no infinities, S.1111.111 is NaN
      const int s = *p >> 7, e = (*p >> 3) & 15, f = *p & 7;
      if (e == 15 && f == 7) return NAN;
      const float mag = e == 0 ? std::ldexp(static_cast<float>(f), -9) : std::ldexp(1.0f + f / 8.0f, e - 7);
      return s ? -mag : mag;
    }
  }
  return NAN;
}
// Byte address of element (mn, k) of one instruction's operand (mn the row of A's M or B's N).
static uint32_t ts_emu_operand_addr(uint64_t desc, bool mn_major, int mn, int k, int esize) {
  const uint32_t start = static_cast<uint32_t>(desc & 0x3FFF) << 4;
  const uint32_t lbo = static_cast<uint32_t>((desc >> 16) & 0x3FFF) << 4;
  const uint32_t sbo = static_cast<uint32_t>((desc >> 32) & 0x3FFF) << 4;
  if ((desc >> 49) & 7) ts_emu_die("wgmma descriptor with a base offset", static_cast<long long>(desc >> 49) & 7);
  static const int widths[4] = {0, 128, 64, 32};
  const int w = widths[desc >> 62];
  if (w == 0) ts_emu_die("wgmma descriptor without a swizzle (interleaved layout is not emulated)", 0);
  uint32_t off;
  if (!mn_major) {  // rows of K: 8-row atoms `sbo` apart, one row `w` bytes; K inside the atom's row
    off = (mn / 8) * sbo + (mn % 8) * w + k * esize;
  } else {  // rows of MN: atoms of w bytes of MN x 8 rows of K; along MN `lbo` apart, along K `sbo`
    const int per = w / esize;
    off = (mn / per) * lbo + (k / 8) * sbo + (k % 8) * w + (mn % per) * esize;
  }
  return ts_emu_swizzled(start, off, w);
}
struct TsEmuWgmma {
  float* acc;
  int n, k;
  TsEmuType type;
  bool a_mn, b_mn;
  uint64_t da, db;
  int scale_d;
};
thread_local std::vector<TsEmuWgmma> ts_emu_mma_open;
thread_local std::deque<std::vector<TsEmuWgmma>> ts_emu_mma_groups;
static void ts_emu_wgmma_run(const TsEmuWgmma& op) {
  const int esize = op.type == TS_EMU_BF16 || op.type == TS_EMU_F16 ? 2 : 1;
  const unsigned t = threadIdx.x % 128, warp = t / 32, lane = t % 32;
  for (int i = 0; i < op.n / 2; ++i) {  // D fragment: n8 column blocks, 4 values a thread each
    const int j = i / 4, e = i % 4;
    const int row = 16 * warp + lane / 4 + 8 * (e / 2), col = 8 * j + 2 * (lane % 4) + e % 2;
    float sum = 0.0f;
    for (int kk = 0; kk < op.k; ++kk) {
      const float a = ts_emu_value(ts_emu_smem(ts_emu_operand_addr(op.da, op.a_mn, row, kk, esize), esize), op.type);
      const float b = ts_emu_value(ts_emu_smem(ts_emu_operand_addr(op.db, op.b_mn, col, kk, esize), esize), op.type);
      sum += a * b;
    }
    op.acc[i] = (op.scale_d ? op.acc[i] : 0.0f) + sum;
  }
}
static void ts_emu_wgmma_issue(float* acc, int n, int k, TsEmuType type, bool a_mn, bool b_mn, uint64_t da,
                               uint64_t db, int scale_d) {
  ts_emu_mma_open.push_back({acc, n, k, type, a_mn, b_mn, da, db, scale_d});
}
inline void ts_wgmma_commit() {
  ts_emu_mma_groups.push_back(ts_emu_mma_open);
  ts_emu_mma_open.clear();
}
// wait_group is .sync.aligned: the warp's lanes leave it together, so none of them (lane 0 releasing the stage
// for its warp) goes on while another still computes from the stage.
template <int N>
inline void ts_wgmma_wait() {
  while (ts_emu_mma_groups.size() > static_cast<size_t>(N)) {
    for (const TsEmuWgmma& op : ts_emu_mma_groups.front()) ts_emu_wgmma_run(op);
    ts_emu_mma_groups.pop_front();
  }
  ts_emu_warp_sync();
}

// ---- per thread (main.inc) ----
#define TS_EMU_THREAD_EXIT() ts_emu_sm90_thread_exit()
static void ts_emu_sm90_thread_exit() {
  if (!ts_emu_mma_open.empty() || !ts_emu_mma_groups.empty()) ts_emu_die("wgmma left in flight at exit", 0);
  if (!ts_emu_bulk_open.empty()) ts_emu_die("a TMA store never committed", 0);
  ts_emu_bulk_retire(0);  // the grid's end completes committed bulk stores
}
