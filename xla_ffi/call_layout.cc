#include "call_layout.h"

#include "workspace.h"

namespace jax_tilescale {

size_t StagedRoom(std::vector<Param>& params) {
  size_t staged = 0;
  for (Param& p : params) {
    if (p.staged == kDirect) continue;
    p.offset = staged;
    staged += AlignUp(p.bytes, kWorkspaceAlign);
  }
  return staged;
}

uint32_t HandOverDirect(std::vector<Param>& params, int32_t npes, const PeerMemory& peer_memory, uint64_t* direct,
                        uint64_t* staged) {
  uint32_t mask = 0;
  *direct = *staged = 0;
  if (!peer_memory.on() && npes != 1) return mask;
  for (size_t i = 0; i < params.size(); ++i) {
    Param& p = params[i];
    if (!(p.staged & kP2P)) continue;
    if (p.bytes == 0 || npes == 1 || peer_memory.Holds(p.data, p.bytes)) {
      p.direct = true;
      mask |= 1u << i;
      ++*direct;
    } else {
      ++*staged;
    }
  }
  return mask;
}

bool Capturing(const DriverApi& cu, CUstream stream) {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  return cu.cuStreamIsCapturing(stream, &status) == CUDA_SUCCESS && status != CU_STREAM_CAPTURE_STATUS_NONE;
}

std::string CaptureRefusal(const std::vector<Param>& params, const std::string& entry, bool peer_memory_on) {
  for (size_t i = 0; i < params.size(); ++i) {
    const Param& p = params[i];
    if (p.staged == kDirect || p.direct || p.bytes == 0) continue;
    return "jax_tilescale kernel `" + entry + "`: XLA is capturing the call into a command buffer (CUDA graph), "
           "but buffer " + std::to_string(i) + " needs a staging copy (" +
           (peer_memory_on ? std::string("it lies outside the memory the peers have mapped, e.g. in a pool that "
                                         "grew with XLA_PYTHON_CLIENT_PREALLOCATE=false")
                           : std::string("zero-copy is off on this PE")) +
           "), which a replay would not redo: set TILESCALE_COMMAND_BUFFERS=0 so that communicating kernels stay "
           "out of command buffers (docs/environment.md)";
  }
  return "";
}

std::string ReserveWorkspace(const DriverApi& cu, const NvshmemApi& shm, const std::string& entry, size_t scratch,
                             size_t staged, CUstream stream, unsigned char** base, size_t* arena, uint64_t** ctl,
                             const TsPeerAlloc** peer_allocs) {
  SymmetricWorkspace& ws = SymmetricWorkspace::Get();
  *base = nullptr;
  *arena = 0;
  if (scratch + staged > 0) {
    if (std::string err = ws.Reserve(scratch, staged, stream, cu, shm, entry, base, arena); !err.empty()) return err;
  }
  return ws.Control(stream, cu, shm, entry, ctl, peer_allocs);
}

}  // namespace jax_tilescale
