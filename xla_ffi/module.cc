// jax_tilescale._ffi: the handler's capsules for jax.ffi, plus small introspection used by the runtime
// and its tests. Importing it must not need a GPU or libcuda (the driver is resolved on first use).
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>
#include <nvshmem_host.h>  // version macros only: the library is looked up at run time

#include <cstdint>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "driver_api.h"
#include "heap_check.h"
#include "kernel_module.h"
#include "launch_handler.h"
#include "nvshmem_api.h"
#include "pe_map.h"
#include "ts_abi.h"
#include "workspace.h"

namespace nb = nanobind;
namespace ts = jax_tilescale;

namespace {

template <typename T>
nb::capsule Capsule(T* ptr) {
  return nb::capsule(reinterpret_cast<void*>(ptr));
}

}  // namespace

NB_MODULE(_ffi, m) {
  m.doc() = "XLA FFI handler `jax_tilescale_launch` (see docs/calling_convention.md)";

  m.def(
      "registrations",
      []() {
        nb::dict stages;
        stages["instantiate"] = Capsule(TsLaunchInstantiate);
        stages["execute"] = Capsule(TsLaunchExecute);
        return stages;
      },
      "Stage name -> handler capsule, for jax.ffi.register_ffi_target(..., api_version=1).");

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
