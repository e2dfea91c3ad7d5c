// `jax_tilescale_launch`: instantiate validates the attributes into a per-call-site state; execute loads
// the kernel once, then enqueues the calling convention's steps on XLA's stream.
#include "launch_handler.h"

#include <cuda.h>
#include <cuda_runtime_api.h>  // cudaStream_t, for PlatformStream (types only; nothing is linked)

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "call_layout.h"
#include "driver_api.h"
#include "kernel_module.h"
#include "launch_counters.h"
#include "nvshmem_api.h"
#include "pe_map.h"
#include "peer_memory.h"
#include "tensor_maps.h"
#include "launch_abi.h"
#include "wait_timeout.h"
#include "workspace.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace jax_tilescale {
namespace {

std::atomic<int64_t> g_default_pe{0};

// Communicating launches that went through this handler (not replays from a command buffer): their parity
// picks the half of the workspace that staged buffers use, so that two consecutive staging launches use
// different halves (a peer that has passed a launch's end-of-call barrier may write into the next one's
// staged buffers while this PE still copies the last one's out). Every process runs the same program, so
// the count is the same on every PE. The launch number itself (scratch half, barriers) is the device's
// (ts_abi.h, TS_CTL_ENDED), which counts replayed launches too.
uint64_t g_staging_launches = 0;  // guarded by the workspace's mutex

// TILESCALE_TRACE_LAUNCH=1: one line on stderr per step of a communicating launch (diagnosing hangs).
bool TraceLaunch() {
  static const bool on = [] {
    const char* v = std::getenv("TILESCALE_TRACE_LAUNCH");
    return v != nullptr && v[0] != '\0' && v[0] != '0';
  }();
  return on;
}
#define TS_TRACE(...)                                \
  do {                                               \
    if (TraceLaunch()) {                             \
      fprintf(stderr, "[tilescale launch] " __VA_ARGS__); \
      fflush(stderr);                                \
    }                                                \
  } while (0)

constexpr const char* kNotInitialised =
    "NVSHMEM is not initialised: run under `python -m jax_tilescale.launch` or call "
    "jax_tilescale.runtime.init()";

uint64_t NowNs() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

// Adds the time from its construction to its destruction to `total` (every return path of Execute).
class ScopedNs {
 public:
  explicit ScopedNs(std::atomic<uint64_t>& total) : total_(total), t0_(NowNs()) {}
  ~ScopedNs() { total_.fetch_add(NowNs() - t0_, std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t>& total_;
  uint64_t t0_;
};

struct LaunchState {
  static ffi::TypeId id;

  KernelConfig config;
  int64_t scratch_bytes = 0;
  std::vector<int64_t> staged;
  std::vector<int64_t> pe_table, mesh_shape, kernel_axes;
  std::vector<int64_t> tensor_maps;  // kTensorMapFields per map (tensor_maps.h); empty: one parameter

  // Filled by the first execute (under `mutex`), kept for the life of the call site.
  std::mutex mutex;
  bool loaded = false;
  std::string load_error;
  CUcontext ctx = nullptr;
  CUfunction fn = nullptr;
  int32_t my_kernel_pe = 0;
  int32_t npes = 1;
  std::vector<int32_t> host_pe_map;
  CUdeviceptr pe_map = 0;
  CUdeviceptr plain_scratch = 0;  // scratch of a launch without NVSHMEM (not symmetric), zeroed once
  CUdeviceptr plain_ctl = 0;      // its launch-control word (TS_CTL_BLOCKS_DONE), zeroed once
  // Tensor maps encoded for the buffer addresses of the last launch: re-encoded only when they change.
  std::mutex maps_mutex;
  std::vector<void*> map_buffers;
  std::vector<CUtensorMap> maps;
  uint64_t wait_timeout_ns = 0;   // waits give up after this long (0: never); wait_timeout.h
  std::unique_ptr<WaitFaultRecord> wait_record;  // where a wait that gives up reports

  ~LaunchState() {
    std::string ignored;
    const DriverApi* cu = Driver(&ignored);
    if (cu == nullptr || ctx == nullptr || (pe_map == 0 && plain_scratch == 0)) return;
    // Errors are ignored: at process exit the driver may already be shutting down.
    if (cu->cuCtxPushCurrent(ctx) != CUDA_SUCCESS) return;
    if (pe_map != 0) cu->cuMemFree(pe_map);
    if (plain_scratch != 0) cu->cuMemFree(plain_scratch);
    if (plain_ctl != 0) cu->cuMemFree(plain_ctl);
    wait_record.reset();
    CUcontext popped;
    cu->cuCtxPopCurrent(&popped);
  }
};
ffi::TypeId LaunchState::id = {};

// How XLA destroys a call site's state when its executable goes away (jaxlib >= 0.10 has MakeTypeInfo).
const XLA_FFI_TypeInfo kLaunchStateTypeInfo = ffi::MakeTypeInfo<LaunchState>();

std::vector<int64_t> ToVector(ffi::Span<const int64_t> s) { return std::vector<int64_t>(s.begin(), s.end()); }

// An instantiate-stage failure (ErrorOr is built from Unexpected, not from Error).
ffi::Unexpected<ffi::Error> Invalid(std::string_view entry, const std::string& msg) {
  return ffi::Unexpected<ffi::Error>(
      ffi::Error(ffi::ErrorCode::kInvalidArgument, "jax_tilescale kernel `" + std::string(entry) + "`: " + msg));
}

ffi::Error Internal(const LaunchState& s, const std::string& msg) {
  return ffi::Error(ffi::ErrorCode::kInternal, "jax_tilescale kernel `" + s.config.entry + "`: " + msg);
}

ffi::Error CuFailed(const LaunchState& s, const std::string& what, CUresult r) {
  return Internal(s, what + " failed: " + CuErrorText(r));
}

// ---------------------------------------------------------------------------------------------------------
// Instantiate: everything that can be checked without a GPU, once per call site at executable load.

ffi::ErrorOr<std::unique_ptr<LaunchState>> Instantiate(
    int64_t abi_version, std::string_view cubin, std::string_view entry, ffi::Span<const int64_t> grid,
    int64_t threads, int64_t smem_bytes, int64_t scratch_bytes, int64_t wait_timeout_ns, ffi::Span<const int64_t> staged,
    ffi::Span<const int64_t> pe_table, ffi::Span<const int64_t> mesh_shape, ffi::Span<const int64_t> kernel_axes,
    bool uses_nvshmem, bool grid_barrier, bool dependent_launch, ffi::Span<const int64_t> tensor_maps) {
  if (abi_version != TS_ABI_VERSION) {
    return Invalid(entry, "it was generated for calling-convention ABI " + std::to_string(abi_version) +
                              " but this jax_tilescale._ffi implements ABI " + std::to_string(TS_ABI_VERSION) +
                              ": rebuild the extension (pip install -e .) from the same checkout");
  }
  if (cubin.empty() || entry.empty()) return Invalid(entry, "empty `cubin` or `entry` attribute");
  if (grid.size() != 3) return Invalid(entry, "`grid` must have 3 entries, got " + std::to_string(grid.size()));
  const int64_t grid_max[3] = {2147483647, 65535, 65535};
  for (int i = 0; i < 3; ++i) {
    if (grid[i] < 1 || grid[i] > grid_max[i]) {
      return Invalid(entry, "grid dimension " + std::to_string(i) + " = " + std::to_string(grid[i]) +
                                " is outside 1.." + std::to_string(grid_max[i]));
    }
  }
  if (threads < 1 || threads > 1024) return Invalid(entry, "threads = " + std::to_string(threads) + " not in 1..1024");
  if (smem_bytes < 0 || smem_bytes > (int64_t{1} << 30)) return Invalid(entry, "bad smem_bytes");
  if (scratch_bytes < 0) return Invalid(entry, "negative scratch_bytes");
  if (wait_timeout_ns < 0) return Invalid(entry, "negative wait_timeout_ns");
  if (staged.size() > TS_MAX_BUFFERS) {
    return Invalid(entry, std::to_string(staged.size()) + " buffers, more than TS_MAX_BUFFERS = " +
                              std::to_string(TS_MAX_BUFFERS));
  }
  int homes = 0;
  for (int64_t flag : staged) {
    const bool kernel_out = (flag & kKernelOut) != 0, kernel_in = (flag & kKernelIn) != 0;
    if (flag < 0 || flag > (kCopyIn | kCopyOut | kP2P | kKernelOut | kKernelIn) || flag == kP2P ||
        (kernel_out && (!(flag & kCopyOut) || (flag & (kP2P | kKernelIn)))) ||
        (kernel_in && flag != (kCopyIn | kKernelIn))) {
      return Invalid(entry, "bad `staged` value " + std::to_string(flag));
    }
    if ((kernel_out || kernel_in) && ++homes > TS_MAX_HOMES) {
      return Invalid(entry, "more than TS_MAX_HOMES = " + std::to_string(TS_MAX_HOMES) +
                                " buffers that the kernel copies in or out itself");
    }
  }
  auto state = std::make_unique<LaunchState>();
  state->pe_table = ToVector(pe_table);
  state->mesh_shape = ToVector(mesh_shape);
  state->kernel_axes = ToVector(kernel_axes);
  if (std::string err = ValidateMesh(state->pe_table, state->mesh_shape, state->kernel_axes); !err.empty()) {
    return Invalid(entry, err);
  }
  KernelConfig& c = state->config;
  c.cubin = std::string(cubin);
  c.entry = std::string(entry);
  for (int i = 0; i < 3; ++i) c.grid[i] = grid[i];
  c.threads = threads;
  c.smem_bytes = smem_bytes;
  c.uses_nvshmem = uses_nvshmem;
  c.grid_barrier = grid_barrier;
  if (dependent_launch && (grid_barrier || uses_nvshmem)) {
    // Both launch kinds start only when everything before them in the stream is done (a cooperative launch takes
    // no launch attributes here; a communicating kernel's peers are ordered by its entry barrier and staging).
    return Invalid(entry, "`dependent_launch` is for plain kernels only (no grid barrier, no NVSHMEM)");
  }
  c.dependent_launch = dependent_launch;
  state->scratch_bytes = scratch_bytes;
  state->wait_timeout_ns = static_cast<uint64_t>(wait_timeout_ns);
  state->staged = ToVector(staged);
  state->tensor_maps = ToVector(tensor_maps);
  if (std::string err = ValidateTensorMaps(state->tensor_maps, state->staged.size()); !err.empty()) {
    return Invalid(entry, err);
  }
  return state;
}

// ---------------------------------------------------------------------------------------------------------
// Execute.

// Makes the context of XLA's stream current for the handler's driver calls: the calling thread may have
// none, or another device's, and cuModuleLoad/cuMemAlloc act on the current context.
class StreamContext {
 public:
  StreamContext(const DriverApi& cu, CUstream stream) : cu_(cu) {
    if ((result_ = cu.cuStreamGetCtx(stream, &ctx_)) != CUDA_SUCCESS) return;
    CUcontext current = nullptr;
    if ((result_ = cu.cuCtxGetCurrent(&current)) != CUDA_SUCCESS) return;
    if (current != ctx_) {
      if ((result_ = cu.cuCtxPushCurrent(ctx_)) != CUDA_SUCCESS) return;
      pushed_ = true;
    }
  }
  ~StreamContext() {
    CUcontext popped;
    if (pushed_) cu_.cuCtxPopCurrent(&popped);
  }
  CUresult result() const { return result_; }
  CUcontext ctx() const { return ctx_; }

 private:
  const DriverApi& cu_;
  CUcontext ctx_ = nullptr;
  CUresult result_ = CUDA_SUCCESS;
  bool pushed_ = false;
};

// First execute of a call site: kernel, PE map on the device, plain scratch. Caller holds s.mutex.
ffi::Error Load(const DriverApi& cu, LaunchState& s, CUstream stream, CUcontext ctx) {
  s.ctx = ctx;
  if (std::string err = LoadKernel(cu, s.config, &s.fn); !err.empty()) return Internal(s, err);
  if (std::string err = WaitFaultRecord::Create(cu, s.config.entry, &s.wait_record); !err.empty()) {
    return Internal(s, err);
  }

  int64_t my_pe = g_default_pe.load();
  if (const NvshmemApi* shm = Nvshmem(); shm != nullptr && shm->initialized()) {
    my_pe = shm->nvshmem_my_pe();
    const int64_t n_pes = shm->nvshmem_n_pes();
    for (int64_t pe : s.pe_table) {
      if (pe >= n_pes) {
        return Internal(s, "the mesh names NVSHMEM PE " + std::to_string(pe) + " but NVSHMEM has " +
                               std::to_string(n_pes) + " PEs: NVSHMEM must span every process of the mesh");
      }
    }
  }
  PeMap map;
  if (std::string err = ComputePeMap(s.pe_table, s.mesh_shape, s.kernel_axes, my_pe, &map); !err.empty()) {
    return Internal(s, err);
  }
  s.my_kernel_pe = map.my_kernel_pe;
  s.npes = static_cast<int32_t>(map.pe_map.size());
  s.host_pe_map = std::move(map.pe_map);
  const size_t map_bytes = s.host_pe_map.size() * sizeof(int32_t);
  if (CUresult r = cu.cuMemAlloc(&s.pe_map, map_bytes); r != CUDA_SUCCESS) return CuFailed(s, "cuMemAlloc(pe_map)", r);
  // host_pe_map lives as long as the state, so the asynchronous copy may read it at any time.
  if (CUresult r = cu.cuMemcpyHtoDAsync(s.pe_map, s.host_pe_map.data(), map_bytes, stream); r != CUDA_SUCCESS) {
    return CuFailed(s, "cuMemcpyHtoDAsync(pe_map)", r);
  }
  if (!s.config.uses_nvshmem && s.scratch_bytes > 0) {
    // Zeroed once: each launch leaves it zero for the next (ts_call_end in the device header).
    const size_t ctl_bytes = sizeof(uint64_t) * TS_CTL_WORDS(0);
    if (CUresult r = cu.cuMemAlloc(&s.plain_scratch, static_cast<size_t>(s.scratch_bytes)); r != CUDA_SUCCESS) {
      return CuFailed(s, "cuMemAlloc(scratch)", r);
    }
    if (CUresult r = cu.cuMemAlloc(&s.plain_ctl, ctl_bytes); r != CUDA_SUCCESS) return CuFailed(s, "cuMemAlloc(ctl)", r);
    if (CUresult r = cu.cuMemsetD8Async(s.plain_scratch, 0, s.scratch_bytes, stream); r != CUDA_SUCCESS) {
      return CuFailed(s, "cuMemsetD8Async(scratch)", r);
    }
    if (CUresult r = cu.cuMemsetD8Async(s.plain_ctl, 0, ctl_bytes, stream); r != CUDA_SUCCESS) {
      return CuFailed(s, "cuMemsetD8Async(ctl)", r);
    }
  }
  return ffi::Error::Success();
}

ffi::Error LaunchKernel(const DriverApi& cu, LaunchState& s, CUstream stream, TsLaunchArgs& args) {
  // Kernels with bulk tensor copies take their tensor maps, encoded for this launch's buffers, second.
  // Encoding costs host time, so the maps of the last buffer addresses are kept (XLA usually reuses them).
  std::unique_lock<std::mutex> maps_lock(s.maps_mutex, std::defer_lock);
  CUtensorMap* maps = nullptr;
  if (!s.tensor_maps.empty()) {
    maps_lock.lock();
    std::vector<void*> buffers(args.buffers, args.buffers + s.staged.size());
    if (s.maps.empty() || buffers != s.map_buffers) {
      std::vector<CUtensorMap> encoded;
      if (std::string err = EncodeTensorMaps(cu, s.tensor_maps, args.buffers, &encoded); !err.empty()) {
        return Internal(s, err);
      }
      s.maps = std::move(encoded);
      s.map_buffers = std::move(buffers);
    }
    maps = s.maps.data();  // cuLaunchKernel copies the parameters before it returns
  }
  void* params[] = {&args, maps};
  const char* api = nullptr;
  CUresult r;
  {
    ScopedNs timed(Counters().launch_ns);
    r = LaunchGrid(cu, s.config, s.fn, stream, params, &api);
  }
  if (r != CUDA_SUCCESS) return CuFailed(s, api, r);
  Counters().launches[static_cast<int>(LaunchKindOf(s.config))].fetch_add(1, std::memory_order_relaxed);
  return ffi::Error::Success();
}

// The call's buffers: the kernel's inputs, then the results its outputs (ABI 4: no pe_info operand).
ffi::Error CollectParams(const LaunchState& s, ffi::RemainingArgs& args, ffi::RemainingRets& rets,
                         std::vector<Param>* out) {
  const size_t n_in = args.size(), n_params = n_in + rets.size();
  if (n_params != s.staged.size()) {
    return Internal(s, "the call has " + std::to_string(n_params) + " buffers but `staged` describes " +
                           std::to_string(s.staged.size()));
  }
  std::vector<Param>& params = *out;
  params.assign(n_params, Param{});
  for (size_t i = 0; i < n_params; ++i) {
    void* data = nullptr;
    size_t bytes = 0;
    if (i < n_in) {
      auto arg = args.get<ffi::AnyBuffer>(i);
      if (arg.has_error()) return Internal(s, "operand " + std::to_string(i) + " is not a buffer");
      data = arg->untyped_data();
      bytes = arg->size_bytes();
    } else {
      auto ret = rets.get<ffi::AnyBuffer>(i - n_in);
      if (ret.has_error()) return Internal(s, "result " + std::to_string(i - n_in) + " is not a buffer");
      data = (*ret)->untyped_data();
      bytes = (*ret)->size_bytes();
    }
    params[i] = Param{data, bytes, s.config.uses_nvshmem ? s.staged[i] : kDirect, 0, false};
  }
  return ffi::Error::Success();
}

// A communicating call's scratch in each half of the workspace (256-byte aligned).
size_t ScratchRoom(const LaunchState& s) { return AlignUp(static_cast<size_t>(s.scratch_bytes), kWorkspaceAlign); }

// Loads the call site once (module, PE map, plain scratch): from the initialize stage, which XLA runs
// outside any command-buffer capture, or from the first execute if that stage did not run.
ffi::Error EnsureLoaded(const DriverApi& cu, LaunchState& s, CUstream stream, CUcontext ctx) {
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    if (!s.loaded) {
      ffi::Error err = Load(cu, s, stream, ctx);
      s.loaded = true;
      if (err.failure()) s.load_error = err.message();
    }
  }
  if (!s.load_error.empty()) return ffi::Error(ffi::ErrorCode::kInternal, s.load_error);
  return ffi::Error::Success();
}

ffi::Error Initialize(cudaStream_t cuda_stream, LaunchState* state, ffi::RemainingArgs args,
                      ffi::RemainingRets rets) {
  LaunchState& s = *state;
  auto stream = reinterpret_cast<CUstream>(cuda_stream);
  std::string driver_error;
  const DriverApi* cu = Driver(&driver_error);
  if (cu == nullptr) return Internal(s, driver_error);
  StreamContext scope(*cu, stream);
  if (scope.result() != CUDA_SUCCESS) return CuFailed(s, "making XLA's stream context current", scope.result());
  if (ffi::Error err = EnsureLoaded(*cu, s, stream, scope.ctx()); err.failure()) return err;
  const NvshmemApi* shm = Nvshmem();
  if (!s.config.uses_nvshmem || shm == nullptr || !shm->initialized()) return ffi::Error::Success();
  // A communicating call's workspace and control words, before XLA may capture the execute (see
  // ReserveWorkspace); every process initialises the same call sites in the same order.
  std::vector<Param> params;
  if (ffi::Error err = CollectParams(s, args, rets, &params); err.failure()) return err;
  const size_t staged = StagedRoom(params);
  std::lock_guard<std::mutex> ws_lock(SymmetricWorkspace::Get().mutex());
  unsigned char* base = nullptr;
  size_t arena = 0;
  uint64_t* ctl = nullptr;
  const TsPeerAlloc* peer_allocs = nullptr;
  if (std::string err = ReserveWorkspace(*cu, *shm, s.config.entry, ScratchRoom(s), staged, stream, &base, &arena,
                                         &ctl, &peer_allocs);
      !err.empty()) {
    return ffi::Error(ffi::ErrorCode::kResourceExhausted, "jax_tilescale: " + err);
  }
  return ffi::Error::Success();
}

ffi::Error Execute(cudaStream_t cuda_stream, LaunchState* state, ffi::RemainingArgs args,
                   ffi::RemainingRets rets) {
  ScopedNs timed(Counters().execute_ns);
  Counters().handler_calls.fetch_add(1, std::memory_order_relaxed);
  LaunchState& s = *state;
  auto stream = reinterpret_cast<CUstream>(cuda_stream);
  std::string driver_error;
  const DriverApi* cu_ptr = Driver(&driver_error);
  if (cu_ptr == nullptr) return Internal(s, driver_error);
  const DriverApi& cu = *cu_ptr;

  const NvshmemApi* shm = Nvshmem();
  if (s.config.uses_nvshmem && (shm == nullptr || !shm->initialized())) {
    return ffi::Error(ffi::ErrorCode::kFailedPrecondition,
                      "jax_tilescale kernel `" + s.config.entry + "`: " + kNotInitialised);
  }
  StreamContext scope(cu, stream);
  if (scope.result() != CUDA_SUCCESS) return CuFailed(s, "making XLA's stream context current", scope.result());
  if (ffi::Error err = EnsureLoaded(cu, s, stream, scope.ctx()); err.failure()) return err;

  std::vector<Param> params;
  if (ffi::Error err = CollectParams(s, args, rets, &params); err.failure()) return err;
  const size_t n_params = params.size();

  TsLaunchArgs launch{};
  launch.pe = s.my_kernel_pe;
  launch.npes = s.npes;
  launch.pe_map = reinterpret_cast<const int32_t*>(s.pe_map);
  launch.wait_fault = s.wait_record ? s.wait_record->device_ptr() : nullptr;
  launch.wait_timeout_ns = launch.wait_fault != nullptr ? s.wait_timeout_ns : 0;

  if (!s.config.uses_nvshmem) {
    // A plain launch: no peers, so nothing is staged and the scratch needs no symmetry. The kernel leaves
    // its scratch zero for the next launch (ts_call_end, or the kernel's own left_zero promise), so no
    // memset: with no scratch, or only left_zero scratch, a launch is all there is, and XLA may capture it in
    // a command buffer (the graph-compatible target).
    for (size_t i = 0; i < n_params; ++i) launch.buffers[i] = params[i].data;
    launch.launch_id = NextLaunchId();  // its waits report through the call site's record with it
    launch.scratch = reinterpret_cast<unsigned char*>(s.plain_scratch);
    launch.ctl = reinterpret_cast<uint64_t*>(s.plain_ctl);
    return LaunchKernel(cu, s, stream, launch);
  }

  // Workspace layout of this call: the scratch at the start of a half (in the scratch arena, which only
  // scratch ever uses, so it is zero: workspace.h), which the kernel picks by its launch number's parity
  // (ts_launch_scratch), then each staged buffer after the arena, in the half this handler's count of
  // staging launches picks. Alternating halves lets a peer that has passed a launch's end-of-call barrier
  // start its next launch (and write into this PE's other half) while this PE still copies out and
  // zeroes this one.
  const size_t staged = StagedRoom(params);

  // Zero-copy: a buffer peers reach only through their mapping of this PE's memory goes to the kernel as
  // XLA's own when it lies in an allocation every peer has mapped; the kernel tells the peers its address
  // (TS_CTL_PUB).
  const PeerMemory& peer_memory = PeerMemory::Get();
  uint64_t direct = 0, staged_p2p = 0;
  launch.direct_mask = HandOverDirect(params, s.npes, peer_memory, &direct, &staged_p2p);
  Counters().direct_buffers.fetch_add(direct, std::memory_order_relaxed);
  Counters().staged_p2p_buffers.fetch_add(staged_p2p, std::memory_order_relaxed);

  const bool capturing = Capturing(cu, stream);
  if (capturing) {
    if (std::string why = CaptureRefusal(params, s.config.entry, peer_memory.on()); !why.empty()) {
      return ffi::Error(ffi::ErrorCode::kFailedPrecondition, why);
    }
  }

  SymmetricWorkspace& ws = SymmetricWorkspace::Get();
  std::lock_guard<std::mutex> ws_lock(ws.mutex());
  const size_t scratch = ScratchRoom(s);
  TS_TRACE("%s: reserve %zu + %zu bytes x 2\n", s.config.entry.c_str(), scratch, staged);
  if (capturing && !ws.Holds(scratch, staged)) {
    return ffi::Error(ffi::ErrorCode::kFailedPrecondition,
                      "jax_tilescale kernel `" + s.config.entry + "`: XLA is capturing the call into a command "
                      "buffer before its initialize stage reserved the symmetric workspace (growing it cannot be "
                      "captured): set TILESCALE_COMMAND_BUFFERS=0 (docs/environment.md)");
  }
  unsigned char* base = nullptr;
  size_t arena = 0;
  uint64_t* ctl = nullptr;
  if (std::string err = ReserveWorkspace(cu, *shm, s.config.entry, scratch, staged, stream, &base, &arena, &ctl,
                                         &launch.peer_allocs);
      !err.empty()) {
    return ffi::Error(ffi::ErrorCode::kResourceExhausted, "jax_tilescale: " + err);
  }
  TS_TRACE("%s: reserved, control words\n", s.config.entry.c_str());
  launch.ctl = ctl;
  launch.ctl_slots = shm->nvshmem_n_pes();
  // scratch and launch_id stay 0: the kernel's are ctl[TS_CTL_SCRATCH(seq & 1)] and its launch number
  const bool odd = (++g_staging_launches & 1) != 0;
  if (base != nullptr && odd) base += ws.bytes_locked() / 2;  // the same offset on every PE
  int home = 0;
  for (size_t i = 0; i < n_params; ++i) {
    const Param& p = params[i];
    launch.buffers[i] = p.staged == kDirect || p.direct ? p.data : base + arena + p.offset;
    if (p.staged & (kKernelIn | kKernelOut)) launch.home[home++] = p.data;  // the kernel copies from / to it
    if (p.staged & kKernelOut) Counters().copied_out_by_kernel.fetch_add(1, std::memory_order_relaxed);
  }

  TS_TRACE("%s: staging half %d, ctl %p, %s\n", s.config.entry.c_str(), odd ? 1 : 0, static_cast<void*>(ctl),
           capturing ? "recording into a command buffer" : "launching");
  // 1. staged inputs in (the kernel's entry barrier, or a call-free kernel's publish, keeps peers from
  // reading them before it starts), but those the kernel copies in itself (TS_STAGE_KERNEL_IN).
  for (size_t i = 0; i < n_params; ++i) {
    const Param& p = params[i];
    if (!(p.staged & kCopyIn) || (p.staged & kKernelIn) || p.direct || p.bytes == 0) continue;
    if (CUresult r = cu.cuMemcpyDtoDAsync(reinterpret_cast<CUdeviceptr>(base + arena + p.offset),
                                          reinterpret_cast<CUdeviceptr>(p.data), p.bytes, stream);
        r != CUDA_SUCCESS) {
      return CuFailed(s, "copying buffer " + std::to_string(i) + " into the symmetric workspace", r);
    }
  }
  // 2. launch: the kernel ends with its end-of-call barrier, so every PE's remote writes into this PE are
  // complete when it ends, and it leaves its scratch zero (ts_call_end in the device header).
  if (ffi::Error err = LaunchKernel(cu, s, stream, launch); err.failure()) return err;
  TS_TRACE("%s: launched\n", s.config.entry.c_str());
  // 3. staged outputs back to XLA's buffers, but those the kernel copied out itself (TS_STAGE_KERNEL_OUT).
  for (size_t i = 0; i < n_params; ++i) {
    const Param& p = params[i];
    if (!(p.staged & kCopyOut) || (p.staged & kKernelOut) || p.direct || p.bytes == 0) continue;
    if (CUresult r = cu.cuMemcpyDtoDAsync(reinterpret_cast<CUdeviceptr>(p.data),
                                          reinterpret_cast<CUdeviceptr>(base + arena + p.offset), p.bytes, stream);
        r != CUDA_SUCCESS) {
      return CuFailed(s, "copying buffer " + std::to_string(i) + " out of the symmetric workspace", r);
    }
    Counters().copied_out_by_handler.fetch_add(1, std::memory_order_relaxed);
  }
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_TypeId* LaunchStateTypeId() { return &LaunchState::id; }

const XLA_FFI_TypeInfo* LaunchStateTypeInfo() { return &kLaunchStateTypeInfo; }

void SetDefaultPe(int64_t pe) { g_default_pe.store(pe); }

}  // namespace jax_tilescale

XLA_FFI_DEFINE_HANDLER_SYMBOL(TsLaunchInstantiate, jax_tilescale::Instantiate,
                              ffi::Ffi::BindInstantiate()
                                  .Attr<int64_t>("abi_version")
                                  .Attr<std::string_view>("cubin")
                                  .Attr<std::string_view>("entry")
                                  .Attr<ffi::Span<const int64_t>>("grid")
                                  .Attr<int64_t>("threads")
                                  .Attr<int64_t>("smem_bytes")
                                  .Attr<int64_t>("scratch_bytes")
                                  .Attr<int64_t>("wait_timeout_ns")
                                  .Attr<ffi::Span<const int64_t>>("staged")
                                  .Attr<ffi::Span<const int64_t>>("pe_table")
                                  .Attr<ffi::Span<const int64_t>>("mesh_shape")
                                  .Attr<ffi::Span<const int64_t>>("kernel_axes")
                                  .Attr<bool>("uses_nvshmem")
                                  .Attr<bool>("grid_barrier")
                                  .Attr<bool>("dependent_launch")
                                  .Attr<ffi::Span<const int64_t>>("tensor_maps"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(TsLaunchInitialize, jax_tilescale::Initialize,
                              ffi::Ffi::BindInitialize()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Ctx<ffi::State<jax_tilescale::LaunchState>>()
                                  .RemainingArgs()
                                  .RemainingRets());

XLA_FFI_DEFINE_HANDLER_SYMBOL(TsLaunchExecute, jax_tilescale::Execute,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Ctx<ffi::State<jax_tilescale::LaunchState>>()
                                  .RemainingArgs()
                                  .RemainingRets());

// The same execute, declared compatible with XLA's command buffers (CUDA graphs): the lowering uses it for
// launches with no host work that changes per call (CudaModule.graph_safe: no NVSHMEM, and no scratch or
// only scratch the kernel leaves zero itself).
XLA_FFI_DEFINE_HANDLER_SYMBOL(TsLaunchExecuteGraph, jax_tilescale::Execute,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Ctx<ffi::State<jax_tilescale::LaunchState>>()
                                  .RemainingArgs()
                                  .RemainingRets(),
                              {ffi::Traits::kCmdBufferCompatible});
