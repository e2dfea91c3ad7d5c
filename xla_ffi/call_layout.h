// How a communicating call's buffers reach its kernel (docs/calling_convention.md, "End of a call" and
// "Zero-copy"): which go over as XLA's own (zero-copy), where the staged ones sit in the symmetric
// workspace, the reservation of that workspace, and what a command-buffer capture cannot hold.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "driver_api.h"
#include "launch_abi.h"
#include "nvshmem_api.h"
#include "peer_memory.h"

namespace jax_tilescale {

// One buffer of the call: the kernel's inputs, then its outputs.
struct Param {
  void* data;
  size_t bytes;
  int64_t staged;       // the `staged` attribute's flags (kDirect for a plain launch)
  size_t offset;        // in the workspace, when staged
  bool direct = false;  // zero-copy: XLA's buffer although staged (kP2P)
};

// The staged room of a call: each staged buffer's offset after the scratch arena (256-byte aligned, set in
// `params`), and their total. Room stays reserved for a buffer that goes over zero-copy, so that the layout,
// which must be the same on every PE, does not depend on this PE's decision.
size_t StagedRoom(std::vector<Param>& params);

// Zero-copy: marks direct every kP2P param that lies in an allocation every peer has mapped (or every one,
// when the kernel's PE space is this PE alone, `npes` 1, which reaches only its own buffers) and returns
// their bit mask (TsLaunchArgs.direct_mask); *direct and *staged count the kP2P params either way.
uint32_t HandOverDirect(std::vector<Param>& params, int32_t npes, const PeerMemory& peer_memory, uint64_t* direct,
                        uint64_t* staged);

// Whether XLA is capturing `stream` into a command buffer (CUDA graph): then the launch is recorded, not run,
// and replayed later with the same arguments.
bool Capturing(const DriverApi& cu, CUstream stream);

// "" or why a call of kernel `entry` cannot be recorded into a command buffer: a replay reuses the launch
// arguments, which is fine for the launch number and scratch (the device's), not for a staging copy (made
// once, in whichever half this call picked).
std::string CaptureRefusal(const std::vector<Param>& params, const std::string& entry, bool peer_memory_on);

// Reserves the workspace a communicating call of kernel `entry` needs (`scratch` and `staged` bytes, both
// 256-byte aligned) and makes the launch-control words, both collective on first use or growth. Called from
// the initialize stage too, which XLA runs before executing and outside any command-buffer capture: a
// captured execute must find everything in place (growing synchronises the stream and agrees with the peers
// on the host, which a capture cannot hold). Caller holds the workspace's mutex. "" or an error.
std::string ReserveWorkspace(const DriverApi& cu, const NvshmemApi& shm, const std::string& entry, size_t scratch,
                             size_t staged, CUstream stream, unsigned char** base, size_t* arena, uint64_t** ctl,
                             const TsPeerAlloc** peer_allocs);

}  // namespace jax_tilescale
