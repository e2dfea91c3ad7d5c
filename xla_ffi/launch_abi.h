// The calling convention (docs/calling_convention.md) as the handler uses it. TsLaunchArgs,
// TsWaitFault and every constant are defined once, in jax_tilescale/abi/ts_abi.h, which the code
// generator also inlines into every kernel; this file adds the handler's C++ names for them.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ts_abi.h"  // jax_tilescale/abi/ (an include directory of the build)

namespace jax_tilescale {

using ::TsLaunchArgs;
using ::TsWaitFault;

// Meaning of the `staged` attribute, read as bit flags so that an aliased in/out buffer (3) also works.
enum StagedFlags : int64_t {
  kDirect = 0,
  kCopyOut = TS_STAGE_COPY_OUT,  // peers write it: launch on a symmetric copy, copy it out afterwards
  kCopyIn = TS_STAGE_COPY_IN,    // peers read it: copy it into a symmetric copy before the launch
  kP2P = TS_STAGE_P2P,           // with a copy flag: peers reach it by P2P loads/stores only (zero-copy allowed)
  kKernelOut = TS_STAGE_KERNEL_OUT,  // with kCopyOut: the kernel copies it out itself (XLA's buffer in `home`)
  kKernelIn = TS_STAGE_KERNEL_IN,    // with kCopyIn alone: the kernel copies it in itself (XLA's buffer in `home`)
};

// Alignment of the scratch and of every staged buffer inside the symmetric workspace.
constexpr size_t kWorkspaceAlign = 256;

inline size_t AlignUp(size_t n, size_t a) { return (n + a - 1) / a * a; }

}  // namespace jax_tilescale
