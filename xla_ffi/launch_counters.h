// What the launch handler counts for tests and benchmarks, always on (relaxed atomic adds): host time per
// call, zero-copy hand-overs, who copied the staged outputs, launches by kind. The Take* functions read and reset
// them; module.cc gives them to Python (`_ffi.take_handler_times`, `take_zero_copy_counts`, `take_copy_out_counts`,
// `take_launch_kinds`).
#pragma once

#include <atomic>
#include <cstdint>

#include "kernel_module.h"

namespace jax_tilescale {

struct LaunchCounters {
  // Host time in the execute handler (whole, and in cuLaunchKernel): two clock reads per call.
  std::atomic<uint64_t> handler_calls{0}, execute_ns{0}, launch_ns{0};
  // Params handed over zero-copy, and staged although marked TS_STAGE_P2P (outside every mapped pool).
  std::atomic<uint64_t> direct_buffers{0}, staged_p2p_buffers{0};
  // Staged outputs copied out by the handler, and by the kernel itself (TS_STAGE_KERNEL_OUT).
  std::atomic<uint64_t> copied_out_by_handler{0}, copied_out_by_kernel{0};
  // Launches by kind, indexed by LaunchKind (kernel_module.h).
  std::atomic<uint64_t> launches[kLaunchKindCount] = {};
};

// The process's counters.
LaunchCounters& Counters();

// Host time spent in the execute handler (whole, and in cuLaunchKernel), summed over calls since the
// last take: what a call costs on the host before XLA's own work (benchmarks/bench_call_overhead.py).
struct HandlerTimes {
  uint64_t calls;
  uint64_t execute_ns;
  uint64_t launch_ns;
};
HandlerTimes TakeHandlerTimes();

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

// Kernel launches by the handler since the last take, by kind (launches XLA replays from a graph are not counted).
struct LaunchKinds {
  uint64_t plain;
  uint64_t dependent;
  uint64_t cooperative;
};
LaunchKinds TakeLaunchKinds();

}  // namespace jax_tilescale
