// Kernel PE space -> NVSHMEM PEs, from the mesh (docs/calling_convention.md, last paragraph).
// Pure C++ (no CUDA): exposed to Python so tests check it against jax_tilescale/runtime/pe_table.py.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace jax_tilescale {

struct PeMap {
  int32_t my_kernel_pe = 0;
  std::vector<int32_t> pe_map;  // [npes]: kernel PE -> NVSHMEM PE
};

// Checks that the mesh description is self-consistent (sizes, axis indices); "" when it is.
std::string ValidateMesh(const std::vector<int64_t>& pe_table, const std::vector<int64_t>& mesh_shape,
                         const std::vector<int64_t>& kernel_axes);

// The device of `pe_table` holding `my_nvshmem_pe` (exactly one must) fixes the coordinates on the
// axes outside `kernel_axes`; the kernel PE space is row-major over `kernel_axes` in the given order.
// A one-device table stands for this process whatever PE it names (pe_map = {my_nvshmem_pe}).
// Returns "" and fills *out, or an error message.
std::string ComputePeMap(const std::vector<int64_t>& pe_table, const std::vector<int64_t>& mesh_shape,
                         const std::vector<int64_t>& kernel_axes, int64_t my_nvshmem_pe, PeMap* out);

}  // namespace jax_tilescale
