// cuda/common/tensor_arg.hpp - a tensor as the CUDA kernels receive it: its
// device pointer and 64-bit element strides of the batch, head and row axes
// (unit stride along D), passed by value at launch. Shared by the forward,
// backward and KV-cache kernels' arguments.
#pragma once

#include <cstdint>

#include "spattn/hd.hpp"
#include "spattn/tensor.hpp"

namespace spattn::cuda_detail {

// A (B, H, L, D) tensor with unit stride along D; strides in elements.
struct TensorArg {
  void* data = nullptr;
  int64_t stride_b = 0, stride_h = 0, stride_l = 0;

  SPATTN_HD int64_t row_offset(int64_t b, int64_t h, int64_t l) const {
    return b * stride_b + h * stride_h + l * stride_l;
  }
};

// The kernel argument of a (B, H, L, D) view (its layout checked by the caller).
inline TensorArg tensor_arg(const TensorView& t) { return TensorArg{t.data, t.stride[0], t.stride[1], t.stride[2]}; }

}  // namespace spattn::cuda_detail
