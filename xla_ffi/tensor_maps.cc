#include "tensor_maps.h"

namespace jax_tilescale {

std::string ValidateTensorMaps(const std::vector<int64_t>& spec, size_t n_buffers) {
  if (spec.size() % kTensorMapFields != 0) {
    return "`tensor_maps` has " + std::to_string(spec.size()) + " values, not a multiple of " +
           std::to_string(kTensorMapFields);
  }
  for (size_t at = 0; at < spec.size(); at += kTensorMapFields) {
    const int64_t* m = spec.data() + at;
    const std::string which = "tensor map " + std::to_string(at / kTensorMapFields);
    if (m[0] < 0 || static_cast<size_t>(m[0]) >= n_buffers) return which + ": no buffer " + std::to_string(m[0]);
    if (m[2] != 2) return which + ": rank " + std::to_string(m[2]) + " (only 2 is generated)";
    if (m[3] < 1 || m[4] < 1 || m[5] % 16 != 0 || m[6] < 1 || m[6] > 256 || m[7] < 1 || m[7] > 256) {
      return which + ": bad dimensions, stride or box";
    }
  }
  return "";
}

std::string EncodeTensorMaps(const DriverApi& cu, const std::vector<int64_t>& spec, void* const* buffers,
                             std::vector<CUtensorMap>* out) {
  out->resize(spec.size() / kTensorMapFields);
  for (size_t i = 0; i < out->size(); ++i) {
    const int64_t* m = spec.data() + i * kTensorMapFields;
    const cuuint64_t dims[2] = {static_cast<cuuint64_t>(m[3]), static_cast<cuuint64_t>(m[4])};
    const cuuint64_t strides[1] = {static_cast<cuuint64_t>(m[5])};
    const cuuint32_t box[2] = {static_cast<cuuint32_t>(m[6]), static_cast<cuuint32_t>(m[7])};
    const cuuint32_t elem_strides[2] = {1, 1};
    CUresult r = cu.cuTensorMapEncodeTiled(
        &(*out)[i], static_cast<CUtensorMapDataType>(m[1]), 2, buffers[m[0]], dims, strides, box, elem_strides,
        CU_TENSOR_MAP_INTERLEAVE_NONE, static_cast<CUtensorMapSwizzle>(m[8]), CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) {
      return "cuTensorMapEncodeTiled (map " + std::to_string(i) + " of buffer " + std::to_string(m[0]) +
             ") failed: " + CuErrorText(r);
    }
  }
  return "";
}

}  // namespace jax_tilescale
