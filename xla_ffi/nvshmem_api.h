// NVSHMEM host functions, taken from the libnvshmem_host.so.3 that nvshmem4py has loaded.
//
// The extension does not link NVSHMEM. Measured on the 2 x H200 machine (jax 0.11.2, NVSHMEM 3.4.5,
// nvshmem4py 0.4.1): with libnvshmem_host.so.3 as a DT_NEEDED of this module, importing the module before
// nvshmem4py's init made that init segfault (preloading the library with ctypes, RTLD_LOCAL or GLOBAL,
// did not, so the load mode alone is not the cause). Looking the library up by soname with RTLD_NOLOAD
// avoids that, and guarantees that we call the very instance nvshmem4py initialised; when none is
// loaded, NVSHMEM cannot have been initialised in this process.
#pragma once

#include <nvshmem_host.h>

#include <string>

namespace jax_tilescale {

#define TS_NVSHMEM_FUNCTIONS(X)      \
  X(nvshmemx_init_status)            \
  X(nvshmem_my_pe)                   \
  X(nvshmem_n_pes)                   \
  X(nvshmem_malloc)                  \
  X(nvshmem_free)                    \
  X(nvshmemx_barrier_all_on_stream)  \
  X(nvshmemx_cumodule_init)          \
  X(nvshmemx_uint64_min_reduce_on_stream)

struct NvshmemApi {
  // The prototypes come from NVSHMEM's headers, so a signature change fails the build, not the run.
#define TS_DECLARE_NVSHMEM_FN(name) decltype(&::name) name = nullptr;
  TS_NVSHMEM_FUNCTIONS(TS_DECLARE_NVSHMEM_FN)
#undef TS_DECLARE_NVSHMEM_FN

  bool initialized() const { return nvshmemx_init_status() >= NVSHMEM_STATUS_IS_INITIALIZED; }
};

// The loaded library's functions, or nullptr (with *error set when not null) when no libnvshmem_host.so.3
// is loaded in the process yet, or it lacks a symbol. Once found, the table is kept.
const NvshmemApi* Nvshmem(std::string* error = nullptr);

// Whether NVSHMEM is loaded and initialised in this process.
bool NvshmemInitialized();

}  // namespace jax_tilescale
