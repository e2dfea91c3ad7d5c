// The kernel-side ABI of docs/calling_convention.md, as the handler sees it.
// codegen/ emits the same struct into every kernel; TS_ABI_VERSION changes whenever either side does.
#pragma once

#include <cstddef>
#include <cstdint>

#define TS_ABI_VERSION 1
#define TS_MAX_BUFFERS 32

namespace jax_tilescale {

// The kernel's only parameter, passed by value.
struct TsLaunchArgs {
  int32_t pe;              // this device's kernel PE, 0 .. npes-1
  int32_t npes;            // size of the kernel's PE space
  const int32_t* pe_map;   // device array [npes]: kernel PE -> NVSHMEM PE
  unsigned char* scratch;  // symmetric, 256-byte aligned, zeroed before each launch
  void* buffers[TS_MAX_BUFFERS];  // kernel inputs then outputs, in IR order
};

// The kernel's parameter block is copied by size from the cubin's metadata, so the layout must match
// the device compiler's exactly (x86-64 host and sm_XX device agree on these natural alignments).
static_assert(offsetof(TsLaunchArgs, pe) == 0, "TsLaunchArgs layout");
static_assert(offsetof(TsLaunchArgs, npes) == 4, "TsLaunchArgs layout");
static_assert(offsetof(TsLaunchArgs, pe_map) == 8, "TsLaunchArgs layout");
static_assert(offsetof(TsLaunchArgs, scratch) == 16, "TsLaunchArgs layout");
static_assert(offsetof(TsLaunchArgs, buffers) == 24, "TsLaunchArgs layout");
static_assert(sizeof(TsLaunchArgs) == 24 + 8 * TS_MAX_BUFFERS, "TsLaunchArgs layout");

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
