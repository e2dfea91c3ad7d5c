#include "wait_timeout.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>

namespace jax_tilescale {
namespace {

std::atomic<uint64_t> g_next_launch_id{1};

struct Registry {
  std::mutex mutex;
  std::vector<WaitFaultRecord*> records;
};

Registry& Records() {
  static Registry* r = new Registry();  // leaked: records may be destroyed during static destruction
  return *r;
}

void Register(WaitFaultRecord* record) {
  Registry& r = Records();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.records.push_back(record);
}

uint64_t LoadVolatile(const uint64_t* p) { return *reinterpret_cast<const volatile uint64_t*>(p); }

std::string Text(const char* chars, size_t cap) { return std::string(chars, strnlen(chars, cap)); }

int64_t SignExtend(uint64_t bits, int width) {
  if (width >= 64) return static_cast<int64_t>(bits);
  const uint64_t sign = uint64_t{1} << (width - 1), mask = (uint64_t{1} << width) - 1;
  bits &= mask;
  return static_cast<int64_t>((bits ^ sign) - sign);
}

}  // namespace

uint64_t NextLaunchId() { return g_next_launch_id.fetch_add(1, std::memory_order_relaxed); }

std::string WaitFaultRecord::Create(const DriverApi& cu, const std::string& kernel,
                                    std::unique_ptr<WaitFaultRecord>* out) {
  std::unique_ptr<WaitFaultRecord> rec(new WaitFaultRecord());
  rec->kernel_ = kernel;
  void* host = nullptr;
  // Portable: XLA may run the call site on any thread; mapped: the kernel writes it directly.
  if (CUresult r = cu.cuMemHostAlloc(&host, sizeof(TsWaitFault), CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE);
      r != CUDA_SUCCESS) {
    return "cuMemHostAlloc(wait record) failed: " + CuErrorText(r);
  }
  memset(host, 0, sizeof(TsWaitFault));
  CUdeviceptr dev = 0;
  if (CUresult r = cu.cuMemHostGetDevicePointer(&dev, host, 0); r != CUDA_SUCCESS) {
    cu.cuMemFreeHost(host);
    return "cuMemHostGetDevicePointer(wait record) failed: " + CuErrorText(r);
  }
  rec->host_ = static_cast<TsWaitFault*>(host);
  rec->device_ = reinterpret_cast<TsWaitFault*>(dev);
  rec->cu_ = &cu;
  Register(rec.get());
  *out = std::move(rec);
  return "";
}

std::unique_ptr<WaitFaultRecord> WaitFaultRecord::CreateForTest(const std::string& kernel) {
  std::unique_ptr<WaitFaultRecord> rec(new WaitFaultRecord());
  rec->kernel_ = kernel;
  rec->host_ = new TsWaitFault();
  memset(rec->host_, 0, sizeof(TsWaitFault));
  rec->device_ = rec->host_;
  Register(rec.get());
  return rec;
}

WaitFaultRecord::~WaitFaultRecord() {
  {
    Registry& r = Records();
    std::lock_guard<std::mutex> lock(r.mutex);
    r.records.erase(std::remove(r.records.begin(), r.records.end(), this), r.records.end());
  }
  if (cu_ == nullptr) {
    delete host_;
  } else if (host_ != nullptr) {
    cu_->cuMemFreeHost(host_);  // errors ignored: at process exit the driver may be gone
  }
}

std::vector<WaitFaultReport> TakeWaitFaults() {
  std::vector<WaitFaultReport> out;
  Registry& r = Records();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (WaitFaultRecord* rec : r.records) {
    TsWaitFault* f = rec->host();
    const uint64_t id = LoadVolatile(&f->launch_id);
    if (id == 0 || id == rec->reported_ || LoadVolatile(&f->acked) == id) continue;
    rec->reported_ = id;
    std::atomic_thread_fence(std::memory_order_acquire);  // the fields were written before launch_id
    WaitFaultReport w;
    w.kernel = rec->kernel();
    w.launch_id = id;
    w.pe = f->pe;
    w.npes = f->npes;
    w.peer = f->peer;
    w.cmp = f->cmp;
    w.bits = f->bits == 32 ? 32 : 64;
    w.is_signed = f->is_signed != 0;
    w.seen_bits = f->seen;
    w.expected_bits = f->expected;
    w.seen = w.is_signed ? SignExtend(w.seen_bits, w.bits) : static_cast<int64_t>(w.seen_bits);
    w.expected = w.is_signed ? SignExtend(w.expected_bits, w.bits) : static_cast<int64_t>(w.expected_bits);
    w.waited_ns = f->waited_ns;
    for (int i = 0; i < 3; ++i) w.block[i] = f->block[i];
    w.thread = f->thread;
    w.op = Text(f->op, sizeof f->op);
    w.where = Text(f->where, sizeof f->where);
    out.push_back(std::move(w));
  }
  return out;
}

void AckWaitFaults() {
  Registry& r = Records();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (WaitFaultRecord* rec : r.records) {
    TsWaitFault* f = rec->host();
    if (rec->reported_ != 0 && LoadVolatile(&f->acked) != rec->reported_) {
      *reinterpret_cast<volatile uint64_t*>(&f->acked) = rec->reported_;  // the kernel may end now
    }
  }
}

}  // namespace jax_tilescale
