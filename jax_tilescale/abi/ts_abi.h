// ts_abi.h: the calling convention between generated kernels and the FFI handler, written once
// (docs/calling_convention.md). The code generator inlines this file into every kernel it emits
// (tilescale_device.cuh includes it), the handler (xla_ffi/launch_abi.h) includes it, and
// jax_tilescale/abi reads its #defines for Python. Plain C++ for nvcc and the host compiler alike.
// Bump TS_ABI_VERSION with any change; tests/runtime/test_abi.py checks that every side agrees.
#ifndef TS_ABI_H_
#define TS_ABI_H_

#include <stddef.h>
#include <stdint.h>

#define TS_ABI_VERSION 7
#define TS_MAX_BUFFERS 32
#define TS_LAUNCH_ARGS_BYTES 360  // sizeof(TsLaunchArgs): 4 + 4 + 8 + 8 + 32 * 8 + 8 + 8 + 8 + 8 + 4 + 4 + 8 + 4 * 8 (LP64)
#define TS_WAIT_FAULT_BYTES 384   // sizeof(TsWaitFault)

// The `staged` attribute, one per kernel buffer, read as bit flags (3: an aliased in/out buffer).
#define TS_STAGE_COPY_OUT 1  // peers write or read it: the kernel runs on a symmetric copy, copied out after
#define TS_STAGE_COPY_IN 2   // peers read it: copied into a symmetric copy before the launch
// With COPY_OUT or COPY_IN: peers reach it only by loads and stores through their mapping of this PE's
// memory (a call-free kernel), so the handler may hand the kernel XLA's own buffer instead (zero-copy:
// no copies), when the buffer lies in an allocation every peer has mapped (TsPeerAlloc). Each launch
// then tells its peers where the buffer is (TS_CTL_PUB; docs/calling_convention.md, "Zero-copy").
#define TS_STAGE_P2P 4
// With COPY_OUT, in a kernel with NVSHMEM's calls: the kernel copies the symmetric copy out to XLA's
// buffer itself, one window each time a signal announces that the window landed (codegen/stage_out.py),
// so the handler copies nothing after the launch; it passes XLA's buffer in TsLaunchArgs.home, the k-th
// such param in home[k].
#define TS_STAGE_KERNEL_OUT 8
// With COPY_IN alone, in a kernel with NVSHMEM's calls: the kernel copies XLA's buffer (home[k]) into the
// symmetric copy itself, before its entry barrier (codegen/stage_in.py); the handler copies nothing in.
#define TS_STAGE_KERNEL_IN 16
#define TS_MAX_HOMES 4  // params per kernel with TS_STAGE_KERNEL_IN or TS_STAGE_KERNEL_OUT, at most
// The piece of a staged input one warp copies at a time when the kernel copies it in (codegen/stage_in.py
// sizes the inputs it takes by it; tilescale_call.cuh's ts_copy_in copies by it). Not read by the handler.
#define TS_COPY_IN_CHUNK 4096
// Allocations of one peer that a process maps (XLA's memory pool; more with a growing pool).
#define TS_PEER_ALLOCS 4

// Comparison codes of waits: ts_wait's template argument and TsWaitFault.cmp.
#define TS_CMP_EQ 0
#define TS_CMP_NE 1
#define TS_CMP_GT 2
#define TS_CMP_GE 3
#define TS_CMP_LT 4
#define TS_CMP_LE 5
// TsWaitFault.cmp of a record that reports a failed check instead of a wait: a kernel built without
// calls (TS_CALL_FREE, codegen/call_free.py) cannot printf, so its checks report through the record.
#define TS_FAULT_CHECK 16

// The launch-control words `TsLaunchArgs.ctl` points at (uint64 each; W = ctl_slots). Word 0 counts
// the blocks of the running launch that have finished (the last one resets it). For kernels that
// communicate: word 1 holds how many communicating launches of this process have ended, so a launch's
// number `seq` is that word + 1 (read on the device, so that a launch XLA replays from a command buffer
// gets a fresh one; the launch's last block advances it; the same on every PE for the same call); words
// 2 and 3 the device addresses of the two halves' scratch in the symmetric workspace (the host writes
// them whenever the workspace moves), of which `seq`'s parity picks one; then one word per NVSHMEM PE
// for the entry barrier and one for the end-of-call barrier: the word of PE w holds the `seq` of the
// last launch in which w arrived. Launch numbers only grow, so the words are never cleared
// (docs/calling_convention.md, "End of a call").
// Then, for each NVSHMEM PE w and param b, a 16-byte aligned pair of words that w writes into its
// kernel peers' copies at the start of a launch of a kernel with TS_STAGE_P2P params, with one release
// store: the address of its buffer b (bit 0 set: a staged copy in the symmetric workspace; clear: XLA's
// buffer, in an allocation the reader has mapped), its low 32 bits in the first word and its high 32
// bits in the second, each under a 32-bit tag of `seq` that the reader waits for in both
// (codegen/tilescale_device.cuh, ts_pub_words). Only kernels read and write these words; `ctl` is
// 16-byte aligned (xla_ffi/workspace.cc) so that every pair is.
#define TS_CTL_BLOCKS_DONE 0
#define TS_CTL_ENDED 1
#define TS_CTL_SCRATCH(h) (2 + (h))
#define TS_CTL_ENTRY(w) (4 + (w))
#define TS_CTL_EXIT(w, W) (4 + (W) + (w))
#define TS_CTL_PUB(w, b, W) (4 + 2 * (W) + 2 * ((w) * TS_MAX_BUFFERS + (b)))
#define TS_CTL_WORDS(W) (4 + 2 * (W) + 2 * (W) * TS_MAX_BUFFERS)

// One allocation of a peer that this process has mapped: the peer's address range [base, base + size)
// is this process's [mapped, mapped + size). A table of TS_PEER_ALLOCS per NVSHMEM PE (size 0: unused).
struct TsPeerAlloc {
  uint64_t base;
  uint64_t size;
  uint64_t mapped;
};

struct TsWaitFault;

struct TsLaunchArgs {              // the kernel's only parameter, passed by value
  int32_t pe;                      // this device's kernel PE, 0 .. npes-1
  int32_t npes;                    // size of the kernel's PE space (product of its mesh axes)
  const int32_t* pe_map;           // device array [npes]: kernel PE -> NVSHMEM PE
  unsigned char* scratch;          // a plain kernel's scratch (its call site's own), 256-byte aligned,
                                   // scratch_bytes long, all zero when the kernel starts; null for a kernel
                                   // that communicates, whose scratch is in the symmetric workspace, at the
                                   // address ctl[TS_CTL_SCRATCH(seq & 1)] (zero at the start likewise)
  void* buffers[TS_MAX_BUFFERS];   // kernel inputs then outputs, in IR order (KernelIR.params)
  uint64_t wait_timeout_ns;        // a wait not satisfied after this long gives up (0: never)
  uint64_t launch_id;              // this launch, unique in the process and never 0; 0 for a kernel that
                                   // communicates, which uses its `seq` instead (replayable)
  TsWaitFault* wait_fault;         // host-mapped record of this call site (device address)
  uint64_t* ctl;                   // launch-control words (TS_CTL_*), symmetric for kernels that communicate
  int32_t ctl_slots;               // W: NVSHMEM PEs with a slot in `ctl` (0 for a plain launch)
  uint32_t direct_mask;            // bit b: param b is XLA's buffer although TS_STAGE_P2P (zero-copy)
  const TsPeerAlloc* peer_allocs;  // device table [W][TS_PEER_ALLOCS] of peers' mapped allocations, or null
  void* home[TS_MAX_HOMES];        // XLA's buffers of the TS_STAGE_KERNEL_IN/OUT params, in param order
};

// The handler copies the parameter block by size from the cubin's metadata, so host and device
// must lay it out alike (x86-64 and sm_XX agree on these natural alignments).
static_assert(sizeof(TsLaunchArgs) == TS_LAUNCH_ARGS_BYTES, "TsLaunchArgs size (calling convention)");
static_assert(offsetof(TsLaunchArgs, pe) == 0, "TsLaunchArgs.pe at 0");
static_assert(offsetof(TsLaunchArgs, npes) == 4, "TsLaunchArgs.npes at 4");
static_assert(offsetof(TsLaunchArgs, pe_map) == 8, "TsLaunchArgs.pe_map at 8");
static_assert(offsetof(TsLaunchArgs, scratch) == 16, "TsLaunchArgs.scratch at 16");
static_assert(offsetof(TsLaunchArgs, buffers) == 24, "TsLaunchArgs.buffers at 24");
static_assert(offsetof(TsLaunchArgs, wait_timeout_ns) == 24 + 8 * TS_MAX_BUFFERS, "TsLaunchArgs.wait_timeout_ns");
static_assert(offsetof(TsLaunchArgs, launch_id) == 32 + 8 * TS_MAX_BUFFERS, "TsLaunchArgs.launch_id");
static_assert(offsetof(TsLaunchArgs, wait_fault) == 40 + 8 * TS_MAX_BUFFERS, "TsLaunchArgs.wait_fault");
static_assert(offsetof(TsLaunchArgs, ctl) == 48 + 8 * TS_MAX_BUFFERS, "TsLaunchArgs.ctl");
static_assert(offsetof(TsLaunchArgs, ctl_slots) == 56 + 8 * TS_MAX_BUFFERS, "TsLaunchArgs.ctl_slots");
static_assert(offsetof(TsLaunchArgs, direct_mask) == 60 + 8 * TS_MAX_BUFFERS, "TsLaunchArgs.direct_mask");
static_assert(offsetof(TsLaunchArgs, peer_allocs) == 64 + 8 * TS_MAX_BUFFERS, "TsLaunchArgs.peer_allocs");
static_assert(offsetof(TsLaunchArgs, home) == 72 + 8 * TS_MAX_BUFFERS, "TsLaunchArgs.home");
static_assert(sizeof(TsPeerAlloc) == 24, "TsPeerAlloc size");

// What a wait that gave up tells the host. Pinned host memory mapped into the device, one per call
// site; the first wait of a launch to give up fills it, writes `launch_id` last, and the runtime's
// watcher turns it into a WaitTimeoutError.
#define TS_WAIT_OP_BYTES 48
#define TS_WAIT_WHERE_BYTES 256
struct TsWaitFault {
  uint64_t launch_id;              // the launch whose wait gave up (0: none yet); written last
  uint64_t acked;                  // set to launch_id by the host once it has read the record
  uint64_t seen;                   // the word's value when the wait gave up (bits, see is_signed)
  uint64_t expected;               // the value it was compared with
  uint64_t waited_ns;              // how long the wait had been polling
  int32_t pe;                      // kernel PE of the waiter
  int32_t npes;
  int32_t peer;                    // kernel PE whose word was polled, -1: this PE's
  int32_t cmp;                     // TS_CMP_*, or TS_FAULT_CHECK (then seen/expected: value/limit,
                                   // `where` holds "<source line>\n<what failed>")
  int32_t bits;                    // 32 or 64
  int32_t is_signed;               // the word's type is signed
  uint32_t block[3];               // the waiting block
  uint32_t thread;                 // and thread
  char op[TS_WAIT_OP_BYTES];       // the statement, e.g. "T.signal_wait_until"
  char where[TS_WAIT_WHERE_BYTES]; // the user's source line ("file.py:12"; its tail if longer)
};
static_assert(sizeof(TsWaitFault) == TS_WAIT_FAULT_BYTES, "TsWaitFault size (calling convention)");
static_assert(offsetof(TsWaitFault, pe) == 40, "TsWaitFault.pe at 40");
static_assert(offsetof(TsWaitFault, block) == 64, "TsWaitFault.block at 64");
static_assert(offsetof(TsWaitFault, op) == 80, "TsWaitFault.op at 80");
static_assert(offsetof(TsWaitFault, where) == 128, "TsWaitFault.where at 128");

#endif  // TS_ABI_H_
