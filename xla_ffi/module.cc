// jax_tilescale._ffi: the handler's capsules for jax.ffi, plus small introspection used by the runtime
// and its tests. Importing it must not need a GPU or libcuda (the driver is resolved on first use).
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>
#include <nvshmem_host.h>  // version macros only: the library is looked up at run time

#include <cstdint>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "driver_api.h"
#include "heap_check.h"
#include "kernel_module.h"
#include "launch_counters.h"
#include "launch_handler.h"
#include "nvshmem_api.h"
#include "pe_map.h"
#include "peer_memory.h"
#include "launch_abi.h"
#include "wait_timeout.h"
#include "workspace.h"

namespace nb = nanobind;
namespace ts = jax_tilescale;

namespace {

std::unique_ptr<ts::WaitFaultRecord> g_test_record;  // inject_wait_fault_for_test's

template <typename T>
nb::capsule Capsule(T* ptr) {
  return nb::capsule(reinterpret_cast<void*>(ptr));
}

}  // namespace

NB_MODULE(_ffi, m) {
  m.doc() = "XLA FFI handler `jax_tilescale_launch` (see docs/calling_convention.md)";

  m.def(
      "registrations",
      [](bool graph) {
        nb::dict stages;
        stages["instantiate"] = Capsule(TsLaunchInstantiate);
        stages["initialize"] = Capsule(TsLaunchInitialize);
        stages["execute"] = graph ? Capsule(TsLaunchExecuteGraph) : Capsule(TsLaunchExecute);
        return stages;
      },
      nb::arg("graph") = false,
      "Stage name -> handler capsule, for jax.ffi.register_ffi_target(..., api_version=1); graph=True: the "
      "execute stage declared compatible with XLA's command buffers (for launches with no per-call host work).");

  m.def(
      "type_registrations",
      []() {
        nb::dict registration;
        registration["type_id"] = Capsule(ts::LaunchStateTypeId());
        registration["type_info"] = Capsule(const_cast<XLA_FFI_TypeInfo*>(ts::LaunchStateTypeInfo()));
        nb::dict out;
        out[ts::kLaunchStateTypeName] = registration;
        return out;
      },
      "Type name -> {'type_id', 'type_info'} capsules, for jax.ffi.register_ffi_type.");

  m.def("abi_version", []() { return TS_ABI_VERSION; }, "The calling-convention ABI this handler implements.");
  m.def("max_buffers", []() { return TS_MAX_BUFFERS; });
  m.def(
      "abi_facts",
      []() {
        nb::dict d;  // what this binary was compiled with: a stale build disagrees with jax_tilescale/abi
        d["TS_ABI_VERSION"] = TS_ABI_VERSION;
        d["TS_MAX_BUFFERS"] = TS_MAX_BUFFERS;
        d["sizeof(TsLaunchArgs)"] = sizeof(TsLaunchArgs);
        d["sizeof(TsWaitFault)"] = sizeof(TsWaitFault);
        d["offsetof(TsLaunchArgs, wait_fault)"] = offsetof(TsLaunchArgs, wait_fault);
        d["offsetof(TsLaunchArgs, ctl)"] = offsetof(TsLaunchArgs, ctl);
        d["TS_STAGE_COPY_OUT"] = static_cast<int64_t>(ts::kCopyOut);
        d["TS_STAGE_COPY_IN"] = static_cast<int64_t>(ts::kCopyIn);
        d["TS_STAGE_P2P"] = static_cast<int64_t>(ts::kP2P);
        d["TS_PEER_ALLOCS"] = TS_PEER_ALLOCS;
        d["sizeof(TsPeerAlloc)"] = sizeof(TsPeerAlloc);
        d["offsetof(TsLaunchArgs, peer_allocs)"] = offsetof(TsLaunchArgs, peer_allocs);
        d["TS_CMP_EQ"] = TS_CMP_EQ;
        d["TS_CMP_NE"] = TS_CMP_NE;
        d["TS_CMP_GT"] = TS_CMP_GT;
        d["TS_CMP_GE"] = TS_CMP_GE;
        d["TS_CMP_LT"] = TS_CMP_LT;
        d["TS_CMP_LE"] = TS_CMP_LE;
        return d;
      },
      "The calling convention's constants and struct sizes as compiled into this handler.");
  m.def("workspace_alignment", []() { return ts::kWorkspaceAlign; });
  m.def(
      "nvshmem_header_version",
      []() {
        return std::to_string(NVSHMEM_VENDOR_MAJOR_VERSION) + "." + std::to_string(NVSHMEM_VENDOR_MINOR_VERSION) +
               "." + std::to_string(NVSHMEM_VENDOR_PATCH_VERSION);
      },
      "The NVSHMEM version whose headers the extension was built against.");
  m.def(
      "nvshmem_initialized", []() { return ts::NvshmemInitialized(); },
      "Whether the process's libnvshmem_host.so.3 (the one nvshmem4py loaded) is loaded and initialised.");

  m.def(
      "set_default_pe", [](int64_t pe) { ts::SetDefaultPe(pe); },
      "This process's PE for launches while NVSHMEM is not initialised (jax.process_index()).");

  m.def(
      "workspace_bytes", []() { return ts::SymmetricWorkspace::Get().bytes(); },
      "Current size of the process's symmetric workspace (0 until a call needs one).");
  m.def(
      "release_workspace",
      []() {
        std::string ignored;
        const ts::DriverApi* cu = ts::Driver(&ignored);
        std::string err = ts::SymmetricWorkspace::Get().Release(cu);
        if (!err.empty()) throw std::runtime_error(err);
      },
      "Free the symmetric workspace (collective: every process must call it), before nvshmem finalize.");
  m.def("loaded_module_count", []() { return ts::LoadedModuleCount(); });
  // Zero-copy (peer_memory.h): the runtime's exchange of XLA's memory pools hands the result over here.
  m.def(
      "set_peer_memory",
      [](const std::vector<uint64_t>& own, const std::vector<uint64_t>& table, int n_pes) {
        if (ts::SymmetricWorkspace::Get().has_control()) {
          throw std::runtime_error("set_peer_memory after the first communicating launch: the table is uploaded "
                                   "with the launch-control words, which exist already");
        }
        std::string err = ts::PeerMemory::Get().Set(own, table, n_pes);
        if (!err.empty()) throw std::invalid_argument(err);
      },
      "own: [base, size, ...] of this process's allocations every peer mapped; table: [base, size, mapped] for "
      "each NVSHMEM PE and each of its TS_PEER_ALLOCS slots (size 0: unused).");
  m.def(
      "take_zero_copy_counts",
      []() {
        const ts::ZeroCopyCounts c = ts::TakeZeroCopyCounts();
        return std::make_tuple(c.direct, c.staged);
      },
      "(params handed over as XLA's buffers, TS_STAGE_P2P params staged) since the last take; resets them.");
  m.def(
      "take_copy_out_counts",
      []() {
        const ts::CopyOutCounts c = ts::TakeCopyOutCounts();
        return std::make_tuple(c.by_handler, c.by_kernel);
      },
      "(staged outputs copied out by the handler, left to the kernel: TS_STAGE_KERNEL_OUT) since the last take, "
      "one per param and launch; resets them.");
  m.def(
      "take_launch_kinds",
      []() {
        const ts::LaunchKinds k = ts::TakeLaunchKinds();
        return std::make_tuple(k.plain, k.dependent, k.cooperative);
      },
      "(plain, programmatic dependent, cooperative) kernel launches by the handler since the last take; resets them.");
  m.def("clear_peer_memory", []() { ts::PeerMemory::Get().Clear(); }, "Zero-copy off (every buffer staged).");
  m.def("peer_memory_on", []() { return ts::PeerMemory::Get().on(); });
  m.def(
      "peer_memory_holds", [](uint64_t p, size_t bytes) {
        return ts::PeerMemory::Get().Holds(reinterpret_cast<const void*>(p), bytes);
      },
      "Whether [p, p + bytes) is in an allocation every peer mapped (a launch hands such buffers over directly).");
  m.def(
      "take_handler_times",
      []() {
        const ts::HandlerTimes t = ts::TakeHandlerTimes();
        return std::make_tuple(t.calls, t.execute_ns, t.launch_ns);
      },
      "(calls, ns in the execute handler, ns in cuLaunchKernel) since the last take; resets them.");

  // Waits that gave up (wait_timeout.h): polled by jax_tilescale.runtime.wait_timeout's watcher.
  m.def(
      "take_wait_faults",
      []() {
        nb::list out;
        for (const ts::WaitFaultReport& w : ts::TakeWaitFaults()) {
          nb::dict d;
          d["kernel"] = w.kernel;
          d["launch_id"] = w.launch_id;
          d["pe"] = w.pe;
          d["npes"] = w.npes;
          d["peer"] = w.peer;
          d["cmp"] = w.cmp;
          d["bits"] = w.bits;
          d["is_signed"] = w.is_signed;
          if (w.is_signed) {
            d["seen"] = w.seen;
            d["expected"] = w.expected;
          } else {
            d["seen"] = w.seen_bits;
            d["expected"] = w.expected_bits;
          }
          d["waited_ns"] = w.waited_ns;
          d["block"] = std::make_tuple(w.block[0], w.block[1], w.block[2]);
          d["thread"] = w.thread;
          d["op"] = w.op;
          d["where"] = w.where;
          out.append(d);
        }
        return out;
      },
      "Every wait that gave up since the last call (one dict per record), each returned once.");
  m.def(
      "ack_wait_faults", []() { ts::AckWaitFaults(); },
      "Acknowledges what take_wait_faults returned: the reporting kernels stop waiting for the host.");
  m.def(
      "inject_wait_fault_for_test",
      [](const std::string& kernel, uint64_t launch_id, int32_t pe, int32_t npes, int32_t peer, int32_t cmp,
         int32_t bits, bool is_signed, uint64_t seen, uint64_t expected, uint64_t waited_ns, const std::string& op,
         const std::string& where) {
        // A record in ordinary memory, filled as the device would; kept registered until the next call.
        g_test_record.reset();
        g_test_record = ts::WaitFaultRecord::CreateForTest(kernel);
        ts::TsWaitFault* f = g_test_record->host();
        f->pe = pe;
        f->npes = npes;
        f->peer = peer;
        f->cmp = cmp;
        f->bits = bits;
        f->is_signed = is_signed ? 1 : 0;
        f->seen = seen;
        f->expected = expected;
        f->waited_ns = waited_ns;
        f->block[0] = 1;
        f->thread = 0;
        snprintf(f->op, sizeof f->op, "%s", op.c_str());
        snprintf(f->where, sizeof f->where, "%s", where.c_str());
        f->launch_id = launch_id;
        return launch_id;
      },
      "Tests without a GPU: registers a record filled as a kernel's wait would (replacing the previous one).");
  m.def(
      "wait_fault_acked_for_test",
      []() { return g_test_record ? g_test_record->host()->acked : uint64_t{0}; },
      "The `acked` word of the record inject_wait_fault_for_test made.");

  // The symmetric heap check (heap_check.h), for tests without a GPU.
  m.def(
      "parse_nvshmem_size", [](const std::string& text, size_t fallback) {
        return ts::ParseNvshmemSize(text.c_str(), fallback);
      },
      "NVSHMEM_SYMMETRIC_SIZE's value in bytes as the heap check reads it (`fallback` when unreadable).");
  m.def(
      "heap_check",
      [](const std::string& entry, size_t needed, size_t request, size_t configured, size_t known_capacity,
         size_t free_bytes, size_t total_bytes, size_t min_free, int npes) {
        ts::HeapFacts f;
        f.needed = needed;
        f.request = request;
        f.configured = configured;
        f.known_capacity = known_capacity;
        f.free_bytes = free_bytes;
        f.total_bytes = total_bytes;
        return std::make_tuple(ts::FitsWithoutGrowth(f), ts::FitsLocally(f),
                               ts::HeapTooSmallMessage(entry, f, min_free, npes));
      },
      nb::arg("entry"), nb::arg("needed"), nb::arg("request"), nb::arg("configured"), nb::arg("known_capacity"),
      nb::arg("free_bytes"), nb::arg("total_bytes"), nb::arg("min_free"), nb::arg("npes"),
      "(fits without growth, this PE's verdict, the refusal's message) for these facts.");

  m.def(
      "driver_error",
      []() {
        std::string err;
        ts::Driver(&err);
        return err;
      },
      "'' when the CUDA driver resolves, else why not (loads libcuda.so.1 on first call).");

  m.def(
      "kernel_pe_map",
      [](std::vector<int64_t> pe_table, std::vector<int64_t> mesh_shape, std::vector<int64_t> kernel_axes,
         int64_t my_nvshmem_pe) {
        ts::PeMap map;
        std::string err = ts::ComputePeMap(pe_table, mesh_shape, kernel_axes, my_nvshmem_pe, &map);
        if (!err.empty()) throw nb::value_error(err.c_str());
        return std::make_tuple(map.my_kernel_pe, map.pe_map);
      },
      nb::arg("pe_table"), nb::arg("mesh_shape"), nb::arg("kernel_axes"), nb::arg("my_nvshmem_pe"),
      "The handler's own (my_kernel_pe, pe_map) computation, for tests against runtime.pe_table.");
}
