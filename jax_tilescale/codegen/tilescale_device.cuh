// tilescale_device.cuh: the fixed part of every kernel that jax_tilescale generates.
//
// The code generator inlines this file into the generated source (after defining
// TS_USES_NVSHMEM), so that compiling a kernel needs nothing but the CUDA toolkit and, for
// kernels that communicate, NVSHMEM's headers. It holds the calling convention of
// docs/calling_convention.md and the small device helpers the generated statements call.

#include <stdint.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#if TS_USES_NVSHMEM
#include <nvshmem.h>
#include <nvshmemx.h>
#endif

// ---- calling convention (docs/calling_convention.md): TsLaunchArgs, TsWaitFault, TS_CMP_* ----
// Written once in jax_tilescale/abi/ts_abi.h; codegen/cuda.py inlines it in place of this line.
#include "ts_abi.h"

// ---- index arithmetic with Python semantics (the CPU interpreter is the reference) ----

// TS_CALL_FREE: the code generator defines it to 1 for a kernel that communicates and takes the Hopper
// plan (codegen/call_free.py). Such a kernel is compiled relocatable (-rdc, to reach NVSHMEM's device
// state), and there ptxas serialises every wgmma if any call instruction is left in the kernel, even a
// never-taken one (benchmarks/NOTES.md, issue 15). So in that mode every helper is inlined, transfers and
// signals are plain loads, stores and release atomics through nvshmem_ptr (P2P: NVLink or the same GPU),
// quiet is a system-scope fence, and a failed check cannot printf: it fills the call site's host-mapped
// record (TsWaitFault with cmp TS_FAULT_CHECK), which the runtime's watcher reports, and traps.
#ifndef TS_CALL_FREE
#define TS_CALL_FREE 0
#endif
#if TS_CALL_FREE
#define TS_HELPER __forceinline__
#else
#define TS_HELPER __noinline__
#endif

// The launch whose record is taken: one reporter per launch (launch ids are unique per process).
__device__ unsigned long long ts_wait_claim;

// `dst` gets `src`, or its last cap - 1 characters when longer (a path's tail holds the line).
__device__ __forceinline__ void ts_copy_tail(volatile char* dst, int cap, const char* src) {
  int n = 0;
  while (src != nullptr && src[n] != '\0') ++n;
  const int from = n > cap - 1 ? n - (cap - 1) : 0;
  int i = 0;
  for (; from + i < n; ++i) dst[i] = src[from + i];
  dst[i] = '\0';
}

__device__ __forceinline__ uint64_t ts_globaltimer() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// ---- the launch's number and scratch (ts_abi.h, TS_CTL_ENDED / TS_CTL_SCRATCH) ----
// A kernel that communicates reads both from its launch-control words, not from the launch arguments, so
// that a launch XLA replays from a command buffer (the same arguments every time) is still a new launch:
// `seq` = launches of this process that have ended + 1, the same on every PE for the same call. The word
// only changes at the very end of a launch (ts_call_end, after every block has counted itself done), so
// every read during the launch sees the same value.
__device__ __forceinline__ uint64_t ts_launch_seq(const TsLaunchArgs& args) {
#if TS_USES_NVSHMEM
  uint64_t ended;
  asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(ended) : "l"(args.ctl + TS_CTL_ENDED) : "memory");
  return ended + 1;
#else
  return 0;
#endif
}

// ---- a zero-copy buffer's published address (ts_abi.h, TS_CTL_PUB; tilescale_call.cuh publishes and waits) ----
// Host and device (tests/codegen/test_publish_words.py runs the encoding on the host). A published address is
// two words (TS_CTL_PUB(w, b), 16-byte aligned): the address's low 32 bits, then its high 32 bits, each under a
// 32-bit tag of the publishing launch's number (ts_pub_tag), never 0. The publisher writes
// both words with one 16-byte store; each 8-byte word is single-copy atomic, so a reader that sees the tag in
// both has the whole address of that launch, from one load. (Before: the address, then the launch number in a
// second word with a release store that waited for the first store's acknowledgement, and the reader loaded
// the address after its wait, two dependent trips: the two-PE 4 KiB shift ~1 us slower per call;
// benchmarks/NOTES.md, fifteenth session.) A tag is compared for equality: a word of a later launch is never
// accepted, one of 2^32 - 1 launches earlier would need the slot unwritten for exactly that many launches, and
// no tag is 0, the words' value before any publish.
__host__ __device__ __forceinline__ uint32_t ts_pub_tag(uint64_t seq) {
  return static_cast<uint32_t>(seq % 0xffffffffull) + 1u;
}

__host__ __device__ __forceinline__ void ts_pub_words(uint64_t at, uint64_t seq, uint64_t& w0, uint64_t& w1) {
  const uint64_t tag = static_cast<uint64_t>(ts_pub_tag(seq)) << 32;
  w0 = tag | (at & 0xffffffffull);
  w1 = tag | (at >> 32);
}

__host__ __device__ __forceinline__ bool ts_pub_read(uint64_t w0, uint64_t w1, uint64_t seq, uint64_t& at) {
  at = (w1 << 32) | (w0 & 0xffffffffull);
  const uint32_t tag = ts_pub_tag(seq);
  return static_cast<uint32_t>(w0 >> 32) == tag && static_cast<uint32_t>(w1 >> 32) == tag;
}

// Unique per launch of a call site and never 0 (wait and check records): the handler's number for a plain
// launch, the launch number for one that communicates.
__device__ __forceinline__ uint64_t ts_launch_id(const TsLaunchArgs& args) {
#if TS_USES_NVSHMEM
  return ts_launch_seq(args);
#else
  return args.launch_id;
#endif
}

// This launch's scratch: the call site's own for a plain kernel; for one that communicates, the half of the
// symmetric workspace that `seq`'s parity picks (the handler keeps both addresses in the control words).
__device__ __forceinline__ unsigned char* ts_launch_scratch(const TsLaunchArgs& args, uint64_t seq) {
#if TS_USES_NVSHMEM
  uint64_t at;
  asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(at) : "l"(args.ctl + TS_CTL_SCRATCH(seq & 1ull))
               : "memory");
  return reinterpret_cast<unsigned char*>(at);
#else
  (void)seq;
  return args.scratch;
#endif
}

#define TS_WAIT_ACK_NS 2000000000ull          // how long a reporting thread waits for the host

#if TS_CALL_FREE
// Where a failed check reports: set from the launch arguments by every thread when the kernel starts
// (ts_fault_sink_set), read on the failure path by helpers that do not see `args`.
// Only the arguments' own fields, no load: the launch number is read on the failure path (it does not
// change before this launch ends, and a failing block has not ended). Every thread's store waited for that
// load when the sink held the number, before the kernel's first statement (benchmarks/NOTES.md, issue 14,
// fourteenth session: the start and end of a one-PE call cost 2.0 us over a plain copy kernel, 0.4 without
// their loads).
struct TsFaultSink {
  TsWaitFault* record;
  const uint64_t* ctl;
  int32_t pe;
  int32_t npes;
};
__device__ TsFaultSink ts_fault_sink;

__device__ __forceinline__ void ts_fault_sink_set(const TsLaunchArgs& a) {
  ts_fault_sink.record = a.wait_fault;
  ts_fault_sink.ctl = a.ctl;
  ts_fault_sink.pe = a.pe;
  ts_fault_sink.npes = a.npes;
}

// The first failing thread of the launch fills the record ("<where>\n<what>" in `where`) and waits, at
// most TS_WAIT_ACK_NS, for the watcher to read it; every failing thread waits for that too, since a
// trap anywhere ends the whole grid; then they trap.
__device__ __forceinline__ void ts_fail_record(const char* where, const char* what, long long value, long long limit) {
  volatile TsWaitFault* f = ts_fault_sink.record;
  const unsigned long long id = *reinterpret_cast<const volatile uint64_t*>(ts_fault_sink.ctl + TS_CTL_ENDED) + 1;
  if (f != nullptr) {
    if (atomicExch(&ts_wait_claim, id) != id) {
      f->seen = (uint64_t)value;
      f->expected = (uint64_t)limit;
      f->waited_ns = 0;
      f->pe = ts_fault_sink.pe;
      f->npes = ts_fault_sink.npes;
      f->peer = -1;
      f->cmp = TS_FAULT_CHECK;
      f->bits = 64;
      f->is_signed = 1;
      f->block[0] = blockIdx.x;
      f->block[1] = blockIdx.y;
      f->block[2] = blockIdx.z;
      f->thread = threadIdx.x;
      ts_copy_tail(f->op, TS_WAIT_OP_BYTES, "kernel check");
      // the source line's tail, a newline, then as much of `what` as fits
      int n = 0, w = 0;
      while (where != nullptr && where[n] != '\0') ++n;
      while (what != nullptr && what[w] != '\0') ++w;
      const int room = TS_WAIT_WHERE_BYTES - 1;
      const int keep_what = w < room - 1 ? w : room - 1;
      const int keep_where = n < room - 1 - keep_what ? n : room - 1 - keep_what;
      int o = 0;
      for (int i = n - keep_where; i < n; ++i) f->where[o++] = where[i];
      f->where[o++] = '\n';
      for (int i = 0; i < keep_what; ++i) f->where[o++] = what[i];
      f->where[o] = '\0';
      __threadfence_system();
      f->launch_id = id;  // the record is complete
      __threadfence_system();
    }
    const uint64_t t0 = ts_globaltimer();
    while (f->acked != id && ts_globaltimer() - t0 < TS_WAIT_ACK_NS) __nanosleep(1000);
  }
  __trap();
}
#endif

// The barrier ts_fail waits at: the whole block, unless the kernel has a producer warpgroup
// that never reaches it (then the generated source defines it as a named barrier of the rest).
#ifndef TS_FAIL_SYNC
#define TS_FAIL_SYNC() __syncthreads()
#endif

// Stops the kernel with a message. Every caller is block-uniform (index expressions depend
// only on the block index and the PE), so thread 0 can print while the others wait for it.
#if TS_CALL_FREE
__device__ __forceinline__ void ts_fail(const char* where, const char* what, long long value, long long limit) {
  ts_fail_record(where, what, value, limit);
}
#else
__device__ __noinline__ void ts_fail(const char* where, const char* what, long long value, long long limit) {
  if (threadIdx.x == 0) {
    printf("jax_tilescale: kernel error at %s (block %u,%u,%u): %s (value %lld, limit %lld)\n", where, blockIdx.x,
           blockIdx.y, blockIdx.z, what, value, limit);
  }
  TS_FAIL_SYNC();
  __trap();
}
#endif

// The first statement of a kernel launched as a programmatic dependent (CudaModule.dependent_launch): its blocks
// may start while the grid before it in the stream is still finishing, and wait here until that grid has ended and
// its writes are visible, before they read or write any memory. So a launch behaves as a plain one, but its
// launch latency overlaps the end of the grid before it (docs/calling_convention.md, "Dependent launches").
__device__ __forceinline__ void ts_wait_for_prior_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// Lets the kernel after this one in the stream launch, if it is a dependent launch, once every block of this one has
// passed here (or ended): its blocks then wait in ts_wait_for_prior_grid until this grid has ended.
__device__ __forceinline__ void ts_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
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
#if TS_CALL_FREE
__device__ __forceinline__ unsigned char* ts_peer_ptr(const void* local, int nvshmem_pe, int64_t kernel_pe,
                                                      const char* where, const char* op) {
  void* p = nvshmem_ptr(local, nvshmem_pe);
  if (p == nullptr) {
    (void)op;
    ts_fail(where, "peer PE (value; limit: its NVSHMEM PE) not load/store reachable (nvshmem_ptr gave null): a "
            "kernel that communicates without NVSHMEM calls needs P2P peers", kernel_pe, nvshmem_pe);
  }
  return static_cast<unsigned char*>(p);
}
#else
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
#endif

// A signal word on a peer, written the way nvshmemx_signal_op does over P2P: one atomic at system scope
// with release semantics, so every store this thread made (and, after a block barrier, its block's)
// is visible to the peer before the word changes.
__device__ __forceinline__ void ts_p2p_signal_set(uint64_t* peer_word, uint64_t value) {
  asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(peer_word), "l"(value) : "memory");
}

__device__ __forceinline__ void ts_p2p_signal_add(uint64_t* peer_word, uint64_t value) {
  asm volatile("red.release.sys.global.add.u64 [%0], %1;" ::"l"(peer_word), "l"(value) : "memory");
}

// The peer's copy of a symmetric signal word (checked reachable).
__device__ __forceinline__ uint64_t* ts_peer_word(uint64_t* local, int nvshmem_pe, int64_t kernel_pe, const char* where,
                                                  const char* op) {
  return reinterpret_cast<uint64_t*>(ts_peer_ptr(local, nvshmem_pe, kernel_pe, where, op));
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

// ---- waits that give up (issue 5) ----
//
// Every wait the generated code makes (signal_wait_until, wait_*, the grid and team barriers)
// goes through ts_wait. The first poll is the fast path and costs nothing extra; a wait that is
// not satisfied at once polls in ts_wait_slow, which every TS_WAIT_CHECK_EVERY polls reads
// %globaltimer (when args.wait_timeout_ns != 0) and whether another wait of this launch already
// gave up. Past the timeout the first waiter of the launch fills the call site's TsWaitFault
// (host-mapped), waits up to TS_WAIT_ACK_NS for the host to read it, and returns as if the wait
// were satisfied; every other wait of that launch then returns at its next check, so the kernel
// runs to its end (its outputs are garbage) and the GPU context stays usable: the handler's
// end-of-call barrier still completes once every PE's kernel ends, so no late write reaches a
// later call. The runtime's watcher raises WaitTimeoutError in the main thread.
//
// No function call on the way (everything forceinline, no printf: the record is the report). A
// wait may stand where a GEMM's accumulators are live (the owner's wait in a GEMM-ReduceScatter,
// after its main loop); a call there makes ptxas keep the whole accumulator array in local memory
// across the main loop (benchmarks/NOTES.md, issue 15: 1 KiB spilled, 5x slower).

#define TS_WAIT_CHECK_EVERY 256u              // polls between two looks at the clock

// What a wait needs of the launch arguments (forceinline: read from parameter space, no copy).
struct TsWaitCtx {
  uint64_t timeout_ns;
  uint64_t launch_id;
  TsWaitFault* fault;
  int32_t pe;
  int32_t npes;
};

__device__ __forceinline__ TsWaitCtx ts_wait_ctx(const TsLaunchArgs& args) {
  return TsWaitCtx{args.wait_timeout_ns, ts_launch_id(args), args.wait_fault, args.pe, args.npes};
}

// Loads of the polled word: system scope for words peers (or NVSHMEM's proxy) update, GPU scope
// for words only this GPU's blocks update (the grid barrier, a team barrier's `passed`). The first
// poll is an acquire load; the slow loop polls with relaxed loads (as NVSHMEM's own waits do) and
// fences once, on success, which gives the same ordering.
template <typename T, bool SYS, bool ACQUIRE>
__device__ __forceinline__ T ts_poll_word(const T* p) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8, "waits are on 32- or 64-bit words");
  T out;
  if (sizeof(T) == 4) {
    uint32_t v;
    if (SYS && ACQUIRE) asm volatile("ld.acquire.sys.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    else if (SYS) asm volatile("ld.relaxed.sys.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    else if (ACQUIRE) asm volatile("ld.acquire.gpu.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    else asm volatile("ld.relaxed.gpu.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    memcpy(&out, &v, 4);
  } else {
    uint64_t v;
    if (SYS && ACQUIRE) asm volatile("ld.acquire.sys.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    else if (SYS) asm volatile("ld.relaxed.sys.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    else if (ACQUIRE) asm volatile("ld.acquire.gpu.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    else asm volatile("ld.relaxed.gpu.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    memcpy(&out, &v, 8);
  }
  return out;
}

template <bool SYS>
__device__ __forceinline__ void ts_acquire_fence() {
  if (SYS) asm volatile("fence.acq_rel.sys;" ::: "memory");
  else asm volatile("fence.acq_rel.gpu;" ::: "memory");
}

template <int CMP, typename T>
__device__ __forceinline__ bool ts_holds(T a, T b) {
  return CMP == TS_CMP_EQ ? a == b : CMP == TS_CMP_NE ? a != b : CMP == TS_CMP_GT ? a > b
       : CMP == TS_CMP_GE ? a >= b : CMP == TS_CMP_LT ? a < b : a <= b;
}

// Whether another wait of this launch gave up (then this one gives up too, silently).
__device__ __forceinline__ bool ts_wait_aborted(const TsWaitCtx& c) {
  return c.fault != nullptr && *reinterpret_cast<volatile uint64_t*>(&c.fault->launch_id) == c.launch_id;
}

__device__ __forceinline__ void ts_wait_gave_up(TsWaitCtx c, const char* where, const char* op, int cmp, uint64_t seen,
                                                uint64_t expected, int bits, int is_signed, int64_t peer,
                                                uint64_t waited_ns) {
  if (c.fault == nullptr) __trap();  // no record to report through (the handler always passes one)
  if (atomicExch(&ts_wait_claim, (unsigned long long)c.launch_id) == c.launch_id) return;  // reported already
  volatile TsWaitFault* f = c.fault;
  f->seen = seen;
  f->expected = expected;
  f->waited_ns = waited_ns;
  f->pe = c.pe;
  f->npes = c.npes;
  f->peer = (int32_t)peer;
  f->cmp = cmp;
  f->bits = bits;
  f->is_signed = is_signed;
  f->block[0] = blockIdx.x;
  f->block[1] = blockIdx.y;
  f->block[2] = blockIdx.z;
  f->thread = threadIdx.x;
  ts_copy_tail(f->op, TS_WAIT_OP_BYTES, op);
  ts_copy_tail(f->where, TS_WAIT_WHERE_BYTES, where);
  __threadfence_system();
  f->launch_id = c.launch_id;  // the record is complete
  __threadfence_system();
  // The watcher acknowledges within its poll interval; waiting for it means the exception is
  // pending before the kernel (and the call) ends. Bounded: without a watcher the kernel ends anyway.
  const uint64_t t0 = ts_globaltimer();
  while (f->acked != c.launch_id && ts_globaltimer() - t0 < TS_WAIT_ACK_NS) __nanosleep(1000);
}

template <int CMP, bool SLEEP, bool SYS, typename T>
__device__ __forceinline__ void ts_wait_slow(TsWaitCtx c, const T* word, T value, int64_t peer, const char* where,
                                             const char* op) {
  uint64_t start = 0;
  for (uint32_t n = 1;; ++n) {
    if (SLEEP) __nanosleep(64);
    const T v = ts_poll_word<T, SYS, false>(word);
    if (ts_holds<CMP>(v, value)) break;
    if (c.timeout_ns == 0 || n % TS_WAIT_CHECK_EVERY != 0) continue;
    const uint64_t now = ts_globaltimer();
    if (start == 0) {  // the clock starts at the first check, a few microseconds into the wait
      start = now;
      continue;
    }
    if (ts_wait_aborted(c)) break;
    if (now - start >= c.timeout_ns) {
      uint64_t seen = 0, expected = 0;
      memcpy(&seen, &v, sizeof(T));
      memcpy(&expected, &value, sizeof(T));
      ts_wait_gave_up(c, where, op, CMP, seen, expected, 8 * (int)sizeof(T), (T)-1 < (T)0 ? 1 : 0, peer,
                      now - start);
      break;
    }
  }
  ts_acquire_fence<SYS>();
}

// Waits until `*word CMP value` (one thread calls it), then acquires: what was written before the
// word changed is visible. SLEEP: back off between polls; SYS: peers update the word (system
// scope), else only this GPU's blocks do. `peer` (-1: this PE), `where` and `op` are for the record.
template <int CMP, bool SLEEP, bool SYS, typename T>
__device__ __forceinline__ void ts_wait(const TsWaitCtx& c, const T* word, T value, int64_t peer, const char* where,
                                        const char* op) {
  if (ts_holds<CMP>(ts_poll_word<T, SYS, true>(word), value)) return;
  ts_wait_slow<CMP, SLEEP, SYS, T>(c, word, value, peer, where, op);
}

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
// `where` and `op` name the statement for a wait that gives up.
__device__ TS_HELPER void ts_grid_barrier(unsigned int* count, unsigned int* gen, unsigned int nblocks,
                                             TsWaitCtx wait, const char* where, const char* op) {
  __syncthreads();
  if (threadIdx.x == 0) {
    const unsigned int my_gen = ts_ld_acquire_u32(gen);  // read before arriving: cannot miss the bump
    __threadfence();
    if (atomicAdd(count, 1u) == nblocks - 1u) {
      atomicExch(count, 0u);
      __threadfence();
      atomicAdd(gen, 1u);
    } else {
      ts_wait<TS_CMP_NE, true, false, unsigned int>(wait, gen, my_gen, -1, where, op);
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
// `where` and `op` name the statement for a wait that gives up.
__device__ TS_HELPER void ts_team_barrier(TsTeamBarrier* b, const int32_t* pe_map, int32_t npes, TsWaitCtx wait,
                                           const char* where, const char* op) {
  const unsigned int k = atomicAdd(&b->ticket, 1u);
  ts_wait<TS_CMP_EQ, true, false, unsigned int>(wait, &b->passed, k, -1, where, op);
  __threadfence_system();
#if TS_CALL_FREE
  for (int32_t q = 0; q < npes; ++q) ts_p2p_signal_add(ts_peer_word(&b->arrive, pe_map[q], q, where, op), 1);
#else
  for (int32_t q = 0; q < npes; ++q) nvshmemx_signal_op(&b->arrive, 1, NVSHMEM_SIGNAL_ADD, pe_map[q]);
#endif
  ts_wait<TS_CMP_GE, false, true, uint64_t>(wait, &b->arrive, (uint64_t)(k + 1u) * (uint64_t)npes, -1, where, op);
  __threadfence_system();
  atomicExch(&b->passed, k + 1u);
}
#endif
