#include "pe_map.h"

#include <limits>

namespace jax_tilescale {
namespace {

std::string Join(const std::vector<int64_t>& v) {
  std::string s = "(";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + ")";
}

}  // namespace

std::string ValidateMesh(const std::vector<int64_t>& pe_table, const std::vector<int64_t>& mesh_shape,
                         const std::vector<int64_t>& kernel_axes) {
  int64_t devices = 1;
  for (int64_t size : mesh_shape) {
    if (size < 1) return "mesh_shape " + Join(mesh_shape) + " has an axis of size < 1";
    devices *= size;
    if (devices > std::numeric_limits<int32_t>::max()) return "mesh_shape " + Join(mesh_shape) + " is too large";
  }
  if (static_cast<int64_t>(pe_table.size()) != devices) {
    return "pe_table has " + std::to_string(pe_table.size()) + " entries but mesh_shape " + Join(mesh_shape) +
           " has " + std::to_string(devices) + " devices";
  }
  for (int64_t pe : pe_table) {
    if (pe < 0 || pe > std::numeric_limits<int32_t>::max()) return "pe_table holds an invalid PE " + std::to_string(pe);
  }
  std::vector<bool> seen(mesh_shape.size(), false);
  for (int64_t axis : kernel_axes) {
    if (axis < 0 || axis >= static_cast<int64_t>(mesh_shape.size())) {
      return "kernel_axes " + Join(kernel_axes) + " names axis " + std::to_string(axis) + " of a mesh of rank " +
             std::to_string(mesh_shape.size());
    }
    if (seen[axis]) return "kernel_axes " + Join(kernel_axes) + " repeats axis " + std::to_string(axis);
    seen[axis] = true;
  }
  return "";
}

std::string ComputePeMap(const std::vector<int64_t>& pe_table, const std::vector<int64_t>& mesh_shape,
                         const std::vector<int64_t>& kernel_axes, int64_t my_nvshmem_pe, PeMap* out) {
  if (std::string err = ValidateMesh(pe_table, mesh_shape, kernel_axes); !err.empty()) return err;
  const size_t rank = mesh_shape.size();

  // A one-device mesh is this device, whatever PE the table names: it is what a call outside shard_map
  // passes (a placeholder table), and the kernel's only peer is then itself.
  if (pe_table.size() == 1) {
    out->my_kernel_pe = 0;
    out->pe_map.assign(1, static_cast<int32_t>(my_nvshmem_pe));
    return "";
  }

  int64_t mine = -1;
  for (size_t d = 0; d < pe_table.size(); ++d) {
    if (pe_table[d] != my_nvshmem_pe) continue;
    if (mine >= 0) {
      return "NVSHMEM PE " + std::to_string(my_nvshmem_pe) +
             " holds several devices of the mesh; NVSHMEM has one PE per process, so run one GPU per process";
    }
    mine = static_cast<int64_t>(d);
  }
  if (mine < 0) {
    return "this process (NVSHMEM PE " + std::to_string(my_nvshmem_pe) + ") holds no device of the mesh (pe_table " +
           Join(pe_table) + ")";
  }

  // Row-major coordinates of this process's device.
  std::vector<int64_t> coords(rank);
  for (size_t a = rank, rest = static_cast<size_t>(mine); a-- > 0;) {
    coords[a] = static_cast<int64_t>(rest % mesh_shape[a]);
    rest /= mesh_shape[a];
  }

  int64_t npes = 1;
  int64_t my_kernel_pe = 0;
  for (int64_t axis : kernel_axes) {
    npes *= mesh_shape[axis];
    my_kernel_pe = my_kernel_pe * mesh_shape[axis] + coords[axis];
  }

  out->my_kernel_pe = static_cast<int32_t>(my_kernel_pe);
  out->pe_map.assign(npes, 0);
  std::vector<int64_t> c = coords;  // peers share our coordinates on the other axes
  for (int64_t k = 0; k < npes; ++k) {
    for (size_t i = kernel_axes.size(), rest = static_cast<size_t>(k); i-- > 0;) {
      const int64_t axis = kernel_axes[i];
      c[axis] = static_cast<int64_t>(rest % mesh_shape[axis]);
      rest /= mesh_shape[axis];
    }
    int64_t flat = 0;
    for (size_t a = 0; a < rank; ++a) flat = flat * mesh_shape[a] + c[a];
    out->pe_map[k] = static_cast<int32_t>(pe_table[flat]);
  }
  return "";
}

}  // namespace jax_tilescale
