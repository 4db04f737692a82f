// python/csrc/tensor_bridge.hpp - PyTorch tensors <-> spattn views and masks.
//
// The operators of the PyTorch package receive everything as tensors and
// integers. This header turns them into the library's types: a 4-D tensor
// into a TensorView (its strides passed through, so transposed views need no
// copy), the encoded pattern (spattn/pattern_codec.hpp) into a Pattern and
// back into tensors. spattn::Error becomes a Python ValueError through
// run_with_value_errors.
#pragma once

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <cstdint>
#include <tuple>
#include <vector>

#include "spattn/block_mask.hpp"
#include "spattn/error.hpp"
#include "spattn/pattern.hpp"
#include "spattn/tensor.hpp"

namespace spattn::torch_bridge {

// An encoded pattern as CPU tensors: code (int64), table_i32, table_i64.
using PatternTensors = std::tuple<at::Tensor, at::Tensor, at::Tensor>;

// Runs fn(); a spattn::Error it throws reaches Python as ValueError.
template <typename Fn>
auto run_with_value_errors(Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const Error& e) {
    C10_THROW_ERROR(ValueError, e.what());
  }
}

// The element type of `t`; a TypeError naming `name` for other dtypes.
DType dtype_of(const at::Tensor& t, const char* name);

// A view of 4-D `t` as logical (B, H, L, D) with its own strides.
TensorView view_of(const at::Tensor& t, const char* name);

// The LSE output (B, H, L) fp32 as a view with D = 1.
TensorView lse_view_of(const at::Tensor& lse);

// The pattern encoded by code + tables (all CPU tensors); null when code is empty.
std::shared_ptr<const Pattern> pattern_of(const int64_t* code, int64_t code_size,
                                          const at::Tensor& table_i32, const at::Tensor& table_i64);

PatternTensors pattern_tensors(const Pattern& pattern);

// 1-D CPU tensors holding copies of host arrays.
at::Tensor tensor_of(const std::vector<int64_t>& values);
at::Tensor tensor_of(const std::vector<int32_t>& values);
at::Tensor tensor_of(const std::vector<uint8_t>& values);

// Requires `t` to be a CPU tensor of `dtype` and returns it contiguous.
at::Tensor cpu_contiguous(const at::Tensor& t, at::ScalarType dtype, const char* name);

}  // namespace spattn::torch_bridge
