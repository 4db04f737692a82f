// element_access.hpp - reading and writing tensor elements as fp32, per dtype.
//
// with_loader / with_storer dispatch once on a tensor's dtype and hand a typed
// accessor to the caller's loop, so the loop body is compiled per dtype with no
// switch per element. row_as_float returns one (b, h, l) row as contiguous
// fp32, converting only when the tensor is not fp32 with unit head-dim stride.
// Generic code only (never included by the per-ISA kernels).
#pragma once

#include <cstdint>

#include "spattn/dtype.hpp"
#include "spattn/tensor.hpp"

namespace spattn::cpu_fast {

// Calls fn(loader) with a loader reading element `index` of t's buffer as float.
template <typename Fn>
void with_loader(const TensorView& t, Fn&& fn) {
  switch (t.dtype) {
    case DType::F32: {
      const float* p = static_cast<const float*>(t.data);
      fn([p](int64_t index) { return p[index]; });
      return;
    }
    case DType::F16: {
      const uint16_t* p = static_cast<const uint16_t*>(t.data);
      fn([p](int64_t index) { return half_to_float(p[index]); });
      return;
    }
    case DType::BF16: {
      const uint16_t* p = static_cast<const uint16_t*>(t.data);
      fn([p](int64_t index) { return bf16_to_float(p[index]); });
      return;
    }
    case DType::F64: {
      const double* p = static_cast<const double*>(t.data);
      fn([p](int64_t index) { return static_cast<float>(p[index]); });
      return;
    }
  }
}

// Calls fn(storer) with a storer writing a float to element `index` of t's buffer.
template <typename Fn>
void with_storer(const TensorView& t, Fn&& fn) {
  switch (t.dtype) {
    case DType::F32: {
      float* p = static_cast<float*>(t.data);
      fn([p](int64_t index, float x) { p[index] = x; });
      return;
    }
    case DType::F16: {
      uint16_t* p = static_cast<uint16_t*>(t.data);
      fn([p](int64_t index, float x) { p[index] = float_to_half(x); });
      return;
    }
    case DType::BF16: {
      uint16_t* p = static_cast<uint16_t*>(t.data);
      fn([p](int64_t index, float x) { p[index] = float_to_bf16(x); });
      return;
    }
    case DType::F64: {
      double* p = static_cast<double*>(t.data);
      fn([p](int64_t index, float x) { p[index] = x; });
      return;
    }
  }
}

// Row (b, h, l) of t as fp32: a pointer into t itself when it is fp32 with unit
// head-dim stride, else converted into `buffer` (head_dim floats).
template <typename Load>
const float* row_as_float(const TensorView& t, const Load& load, int64_t b, int64_t h, int64_t l,
                          float* buffer) {
  const int64_t src = t.offset(b, h, l, 0);
  if (t.dtype == DType::F32 && t.stride[3] == 1) return static_cast<const float*>(t.data) + src;
  for (int64_t d = 0; d < t.head_dim(); ++d) buffer[d] = load(src + d * t.stride[3]);
  return buffer;
}

}  // namespace spattn::cpu_fast
