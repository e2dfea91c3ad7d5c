// Waits that give up (issue 5): the host side of the generated code's ts_wait (tilescale_device.cuh).
//
// Each call site owns one TsWaitFault in pinned host memory mapped into the device (WaitFaultRecord),
// registered in a process-wide list. Every launch gets a fresh launch id and the record's device address
// in TsLaunchArgs. A wait that gives up fills the record and writes the launch id last; the runtime's
// watcher thread (jax_tilescale/runtime/wait_timeout.py) polls TakeWaitFaults(), which returns each new
// record once and acknowledges it (the kernel waits, bounded, for that before it ends), and raises
// WaitTimeoutError in the main thread. Nothing here needs the record to be cleared between launches: a
// record belongs to the launch whose id it holds.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "driver_api.h"
#include "launch_abi.h"

namespace jax_tilescale {

// A new launch id: unique in the process, never 0.
uint64_t NextLaunchId();

class WaitFaultRecord {
 public:
  // Pinned, device-mapped host memory for `kernel`'s record (the current context must be the kernel's).
  // Returns "" and sets *out, or an error.
  static std::string Create(const DriverApi& cu, const std::string& kernel, std::unique_ptr<WaitFaultRecord>* out);
  // A record in ordinary host memory, for tests without a GPU (device_ptr() is its host address).
  static std::unique_ptr<WaitFaultRecord> CreateForTest(const std::string& kernel);
  ~WaitFaultRecord();  // unregisters and frees

  TsWaitFault* device_ptr() const { return device_; }
  TsWaitFault* host() const { return host_; }
  const std::string& kernel() const { return kernel_; }

  WaitFaultRecord(const WaitFaultRecord&) = delete;
  WaitFaultRecord& operator=(const WaitFaultRecord&) = delete;

 private:
  WaitFaultRecord() = default;
  std::string kernel_;
  TsWaitFault* host_ = nullptr;
  TsWaitFault* device_ = nullptr;
  const DriverApi* cu_ = nullptr;  // null: ordinary memory (tests)
  uint64_t reported_ = 0;          // the launch id TakeWaitFaults last returned (registry mutex)
  friend std::vector<struct WaitFaultReport> TakeWaitFaults();
  friend void AckWaitFaults();
};

// One wait that gave up, as read from its record.
struct WaitFaultReport {
  std::string kernel;  // the entry, e.g. ts_my_kernel
  uint64_t launch_id = 0;
  int32_t pe = 0, npes = 0, peer = -1, cmp = 0, bits = 64;
  bool is_signed = false;
  int64_t seen = 0, expected = 0;  // sign-extended when is_signed; else the raw bits (uint64 in Python)
  uint64_t seen_bits = 0, expected_bits = 0;
  uint64_t waited_ns = 0;
  uint32_t block[3] = {0, 0, 0};
  uint32_t thread = 0;
  std::string op, where;
};

// Records of every call site whose kernel reported a wait that gave up since the last call, each
// returned once.
std::vector<WaitFaultReport> TakeWaitFaults();
// Acknowledges what TakeWaitFaults returned: the reporting kernel stops waiting for the host and ends. The
// watcher calls it after it has queued the exception, so that the exception is pending before the call's
// results are ready.
void AckWaitFaults();

}  // namespace jax_tilescale
