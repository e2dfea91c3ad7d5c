#include "launch_counters.h"

namespace jax_tilescale {

LaunchCounters& Counters() {
  static LaunchCounters counters;
  return counters;
}

HandlerTimes TakeHandlerTimes() {
  LaunchCounters& c = Counters();
  return HandlerTimes{c.handler_calls.exchange(0), c.execute_ns.exchange(0), c.launch_ns.exchange(0)};
}

ZeroCopyCounts TakeZeroCopyCounts() {
  LaunchCounters& c = Counters();
  return ZeroCopyCounts{c.direct_buffers.exchange(0), c.staged_p2p_buffers.exchange(0)};
}

CopyOutCounts TakeCopyOutCounts() {
  LaunchCounters& c = Counters();
  return CopyOutCounts{c.copied_out_by_handler.exchange(0), c.copied_out_by_kernel.exchange(0)};
}

LaunchKinds TakeLaunchKinds() {
  LaunchCounters& c = Counters();
  auto take = [&c](LaunchKind kind) { return c.launches[static_cast<int>(kind)].exchange(0); };
  return LaunchKinds{take(LaunchKind::kPlain), take(LaunchKind::kDependent), take(LaunchKind::kCooperative)};
}

}  // namespace jax_tilescale
