// The XLA FFI handler `jax_tilescale_launch` (docs/calling_convention.md).
#pragma once

#include <cstdint>

#include "xla/ffi/api/c_api.h"
#include "xla/ffi/api/api.h"

// Stage handlers, exported as C symbols so that both nanobind capsules and ctypes can reach them.
XLA_FFI_DECLARE_HANDLER_SYMBOL(TsLaunchInstantiate);
XLA_FFI_DECLARE_HANDLER_SYMBOL(TsLaunchInitialize);
XLA_FFI_DECLARE_HANDLER_SYMBOL(TsLaunchExecute);
XLA_FFI_DECLARE_HANDLER_SYMBOL(TsLaunchExecuteGraph);  // TsLaunchExecute, command-buffer compatible

namespace jax_tilescale {

// The per-call-site state type, for jax.ffi.register_ffi_type.
XLA_FFI_TypeId* LaunchStateTypeId();
const XLA_FFI_TypeInfo* LaunchStateTypeInfo();
inline constexpr const char* kLaunchStateTypeName = "jax_tilescale_launch_state";

// The process's PE when NVSHMEM is not initialised (plain launches): Python sets jax.process_index(),
// which is also the NVSHMEM PE the bootstrap gives this process.
void SetDefaultPe(int64_t pe);

// Host time spent in the execute handler (whole, and in cuLaunchKernel), summed over calls since the
// last take: what a call costs on the host before XLA's own work (benchmarks/bench_call_overhead.py).
// Zero-copy params since the last take: handed over as XLA's buffers, and staged because they lay outside
// every pool the peers mapped.
struct ZeroCopyCounts {
  uint64_t direct;
  uint64_t staged;
};
ZeroCopyCounts TakeZeroCopyCounts();

// Staged outputs since the last take: copied out by the handler after the kernel, and left to the kernel
// (TS_STAGE_KERNEL_OUT, codegen/stage_out.py), one count per param and launch.
struct CopyOutCounts {
  uint64_t by_handler;
  uint64_t by_kernel;
};
CopyOutCounts TakeCopyOutCounts();

struct HandlerTimes {
  uint64_t calls;
  uint64_t execute_ns;
  uint64_t launch_ns;
};
HandlerTimes TakeHandlerTimes();

}  // namespace jax_tilescale
