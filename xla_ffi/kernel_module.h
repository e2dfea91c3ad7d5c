// Loading a generated kernel: cubin -> CUmodule (cached per process) -> CUfunction, with the checks and
// attributes its launch configuration needs; and launching it the way that configuration asks.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <string>

#include "driver_api.h"

namespace jax_tilescale {

struct KernelConfig {
  std::string cubin;
  std::string entry;
  int64_t grid[3] = {1, 1, 1};
  int64_t threads = 1;
  int64_t smem_bytes = 0;
  bool uses_nvshmem = false;
  bool grid_barrier = false;
  // The kernel waits for the grid before it in the stream (griddepcontrol.wait) before it touches memory, so
  // it may be launched as a programmatic dependent: its launch overlaps the end of that grid.
  bool dependent_launch = false;
};

// How a kernel is launched, decided from its configuration in one place (LaunchKindOf): the launch (LaunchGrid)
// and the handler's counters (launch_counters.h) both read it.
enum class LaunchKind : int {
  kPlain = 0,        // cuLaunchKernel
  kDependent = 1,    // cuLaunchKernelEx with programmatic stream serialisation
  kCooperative = 2,  // cuLaunchCooperativeKernel: a grid barrier needs every block resident
};
inline constexpr int kLaunchKindCount = 3;

inline LaunchKind LaunchKindOf(const KernelConfig& config) {
  if (config.grid_barrier) return LaunchKind::kCooperative;
  return config.dependent_launch ? LaunchKind::kDependent : LaunchKind::kPlain;
}

// Loads `config.cubin` into the current context (once per process and context; the module stays loaded
// for the life of the process), runs nvshmemx_cumodule_init on it when the kernel uses NVSHMEM, finds
// `config.entry`, raises its dynamic shared memory limit when needed and, for a grid barrier, checks that
// all blocks can be resident at once. Returns "" and sets *fn, or an error message (without prefix).
std::string LoadKernel(const DriverApi& cu, const KernelConfig& config, CUfunction* fn);

// Launches `fn` with the grid, block and shared memory of `config` on `stream`, as LaunchKindOf(config) says:
// cooperatively for a grid barrier (every block resident, or an error rather than a deadlock), as a programmatic
// dependent of the grid before it, or plainly. *api names the driver call made, for the caller's error message.
CUresult LaunchGrid(const DriverApi& cu, const KernelConfig& config, CUfunction fn, CUstream stream, void** params,
                    const char** api);

int64_t LoadedModuleCount();

}  // namespace jax_tilescale
