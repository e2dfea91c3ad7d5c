// Tensor maps (TMA descriptors) of a kernel's bulk tensor copies, encoded per launch.
//
// The code generator lists the maps a kernel needs in the `tensor_maps` attribute, kTensorMapFields
// int64 values per map: [buffer index, CUtensorMapDataType, rank (2), dim0, dim1, row stride in bytes,
// box0, box1, CUtensorMapSwizzle], dimension 0 the contiguous one (docs/calling_convention.md). The
// handler encodes them against the buffers the launch actually uses (XLA's, or their staged copies) and
// passes them as the kernel's second parameter, `const __grid_constant__ TsTensorMaps`.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <string>
#include <vector>

#include "driver_api.h"

namespace jax_tilescale {

inline constexpr size_t kTensorMapFields = 9;

// "" when `spec` is well formed for a kernel with `n_buffers` buffers, else why not.
std::string ValidateTensorMaps(const std::vector<int64_t>& spec, size_t n_buffers);

// Encodes every map of `spec` for the buffer addresses `buffers`; "" or the driver's complaint.
std::string EncodeTensorMaps(const DriverApi& cu, const std::vector<int64_t>& spec, void* const* buffers,
                             std::vector<CUtensorMap>* out);

}  // namespace jax_tilescale
