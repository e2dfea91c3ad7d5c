// The kernel-side ABI of docs/calling_convention.md, as the handler sees it.
// codegen/ emits the same struct into every kernel; TS_ABI_VERSION changes whenever either side does.
#pragma once

#include <cstddef>
#include <cstdint>

#define TS_ABI_VERSION 2
#define TS_MAX_BUFFERS 32

namespace jax_tilescale {

struct TsWaitFault;

// The kernel's only parameter, passed by value.
struct TsLaunchArgs {
  int32_t pe;              // this device's kernel PE, 0 .. npes-1
  int32_t npes;            // size of the kernel's PE space
  const int32_t* pe_map;   // device array [npes]: kernel PE -> NVSHMEM PE
  unsigned char* scratch;  // symmetric, 256-byte aligned, zeroed before each launch
  void* buffers[TS_MAX_BUFFERS];  // kernel inputs then outputs, in IR order
  uint64_t wait_timeout_ns;       // a wait not satisfied after this long gives up (0: never)
  uint64_t launch_id;             // this launch, unique in the process, never 0
  TsWaitFault* wait_fault;        // the call site's record, host-mapped (its device address)
};

// What a wait that gave up reports (wait_timeout.h): pinned host memory the kernel writes through its
// mapping; `launch_id` is written last.
constexpr int kWaitOpBytes = 48;
constexpr int kWaitWhereBytes = 256;
struct TsWaitFault {
  uint64_t launch_id;  // the launch whose wait gave up (0: none yet)
  uint64_t acked;      // the host sets it to launch_id once it has read the record
  uint64_t seen;       // the word's value (bits; sign-extend from `bits` when is_signed)
  uint64_t expected;   // the value it was compared with
  uint64_t waited_ns;
  int32_t pe, npes;
  int32_t peer;        // kernel PE whose word was polled, -1: the waiter's own
  int32_t cmp;         // 0 EQ, 1 NE, 2 GT, 3 GE, 4 LT, 5 LE
  int32_t bits, is_signed;
  uint32_t block[3];
  uint32_t thread;
  char op[kWaitOpBytes];
  char where[kWaitWhereBytes];
};
static_assert(sizeof(TsWaitFault) == 384 && offsetof(TsWaitFault, pe) == 40 && offsetof(TsWaitFault, block) == 64 &&
                  offsetof(TsWaitFault, op) == 80 && offsetof(TsWaitFault, where) == 128,
              "TsWaitFault layout");

// The kernel's parameter block is copied by size from the cubin's metadata, so the layout must match
// the device compiler's exactly (x86-64 host and sm_XX device agree on these natural alignments).
static_assert(offsetof(TsLaunchArgs, pe) == 0, "TsLaunchArgs layout");
static_assert(offsetof(TsLaunchArgs, npes) == 4, "TsLaunchArgs layout");
static_assert(offsetof(TsLaunchArgs, pe_map) == 8, "TsLaunchArgs layout");
static_assert(offsetof(TsLaunchArgs, scratch) == 16, "TsLaunchArgs layout");
static_assert(offsetof(TsLaunchArgs, buffers) == 24, "TsLaunchArgs layout");
static_assert(offsetof(TsLaunchArgs, wait_timeout_ns) == 24 + 8 * TS_MAX_BUFFERS, "TsLaunchArgs layout");
static_assert(offsetof(TsLaunchArgs, launch_id) == 32 + 8 * TS_MAX_BUFFERS, "TsLaunchArgs layout");
static_assert(offsetof(TsLaunchArgs, wait_fault) == 40 + 8 * TS_MAX_BUFFERS, "TsLaunchArgs layout");
static_assert(sizeof(TsLaunchArgs) == 48 + 8 * TS_MAX_BUFFERS, "TsLaunchArgs layout");

// Meaning of the `staged` attribute, read as bit flags so that an aliased in/out buffer (3) also works.
enum StagedFlags : int64_t {
  kDirect = 0,
  kCopyOut = 1,  // peers write it: launch on a symmetric copy, copy it out afterwards
  kCopyIn = 2,   // peers read it: copy it into a symmetric copy before the launch
};

// Alignment of the scratch and of every staged buffer inside the symmetric workspace.
constexpr size_t kWorkspaceAlign = 256;

inline size_t AlignUp(size_t n, size_t a) { return (n + a - 1) / a * a; }

}  // namespace jax_tilescale
