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

}  // namespace jax_tilescale
