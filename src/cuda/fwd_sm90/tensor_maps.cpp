// cuda/fwd_sm90/tensor_maps.cpp - builds the Hopper kernel's TMA tensor maps
// (see tensor_maps.hpp).
#include "cuda/fwd_sm90/tensor_maps.hpp"

#include <cuda_runtime_api.h>
#include <cudaTypedefs.h>

#include <string>

#include "cuda/common/cuda_check.hpp"
#include "spattn/error.hpp"

namespace spattn::cuda_detail {
namespace {

PFN_cuTensorMapEncodeTiled_v12000 encode_function() {
  static const PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    check_cuda(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found),
               "cudaGetDriverEntryPointByVersion(cuTensorMapEncodeTiled)");
    require(found == cudaDriverEntryPointSuccess && fn != nullptr,
            "CUDA backend: the driver has no cuTensorMapEncodeTiled (the sm90 kernel needs CUDA 12 or newer)");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  return encode;
}

}  // namespace

bool out_tensor_map_usable(const TensorArg& t, int64_t batch, int64_t heads, int64_t len) {
  const auto stride_ok = [](int64_t extent, int64_t stride) { return extent == 1 || (stride * 2) % 16 == 0; };
  return reinterpret_cast<uintptr_t>(t.data) % 16 == 0 && stride_ok(len, t.stride_l) &&
         stride_ok(heads, t.stride_h) && stride_ok(batch, t.stride_b);
}

CUtensorMap make_tile_tensor_map(const TensorArg& t, DType dtype, int64_t batch, int64_t heads, int64_t len,
                                 int64_t rate, int64_t head_dim, int box_rows) {
  const int64_t elem = dtype_size(dtype);
  // Strides of axes of extent 1 are never stepped; any multiple of 16 bytes describes them.
  auto stride_bytes = [&](int64_t extent, int64_t stride) { return extent == 1 ? 16 * 1024 : stride * elem; };
  const cuuint64_t dims[5] = {static_cast<cuuint64_t>(head_dim), static_cast<cuuint64_t>(rate),
                              static_cast<cuuint64_t>(len), static_cast<cuuint64_t>(heads),
                              static_cast<cuuint64_t>(batch)};
  const cuuint64_t strides[4] = {static_cast<cuuint64_t>(stride_bytes(rate, t.stride_l)),
                                 static_cast<cuuint64_t>(stride_bytes(len, t.stride_l * rate)),
                                 static_cast<cuuint64_t>(stride_bytes(heads, t.stride_h)),
                                 static_cast<cuuint64_t>(stride_bytes(batch, t.stride_b))};
  const cuuint32_t box[5] = {static_cast<cuuint32_t>(128 / elem), 1, static_cast<cuuint32_t>(box_rows), 1, 1};
  const cuuint32_t element_strides[5] = {1, 1, 1, 1, 1};
  CUtensorMap map{};
  const CUresult status = encode_function()(
      &map, dtype == DType::BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 5, t.data,
      dims, strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  require(status == CUDA_SUCCESS, "CUDA backend: cuTensorMapEncodeTiled failed (error ", static_cast<int>(status),
          ") for a tensor of ", batch, " x ", heads, " x ", len * rate, " x ", head_dim, " with strides ", t.stride_b,
          ", ", t.stride_h, ", ", t.stride_l, (rate > 1 ? " read at residue rate " + std::to_string(rate) : ""));
  return map;
}

}  // namespace spattn::cuda_detail
