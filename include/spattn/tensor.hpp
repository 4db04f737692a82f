// spattn/tensor.hpp - non-owning views of 4-D attention tensors.
//
// A TensorView is a pointer, an element type, a logical shape (B, H, L, D) and
// strides in elements for each of those axes. A (B, H, L, D) buffer and a
// (B, L, H, D) buffer are the same logical tensor with different strides, so
// both are accepted without copies. Offsets are computed in 64 bits.
#pragma once

#include <array>
#include <cstdint>

#include "spattn/dtype.hpp"

namespace spattn {

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::F32;
  std::array<int64_t, 4> shape{0, 0, 0, 0};   // (B, H, L, D)
  std::array<int64_t, 4> stride{0, 0, 0, 0};  // elements, per logical axis

  int64_t batch() const { return shape[0]; }
  int64_t heads() const { return shape[1]; }
  int64_t seq_len() const { return shape[2]; }
  int64_t head_dim() const { return shape[3]; }
  int64_t numel() const { return shape[0] * shape[1] * shape[2] * shape[3]; }
  // True when an axis is 0: the view holds no element (its data may be null).
  bool empty() const { return shape[0] == 0 || shape[1] == 0 || shape[2] == 0 || shape[3] == 0; }

  int64_t offset(int64_t b, int64_t h, int64_t l, int64_t d) const {
    return b * stride[0] + h * stride[1] + l * stride[2] + d * stride[3];
  }
  double load(int64_t b, int64_t h, int64_t l, int64_t d) const {
    return load_as_double(data, dtype, offset(b, h, l, d));
  }
  void store(int64_t b, int64_t h, int64_t l, int64_t d, double value) const {
    store_from_double(data, dtype, offset(b, h, l, d), value);
  }
};

// A contiguous buffer laid out as (B, H, L, D).
inline TensorView make_bhld(void* data, DType dtype, int64_t B, int64_t H, int64_t L, int64_t D) {
  return TensorView{data, dtype, {B, H, L, D}, {H * L * D, L * D, D, 1}};
}

// A contiguous buffer laid out as (B, L, H, D), viewed as logical (B, H, L, D).
inline TensorView make_blhd(void* data, DType dtype, int64_t B, int64_t L, int64_t H, int64_t D) {
  return TensorView{data, dtype, {B, H, L, D}, {L * H * D, D, H * D, 1}};
}

// Batch element b of t, as a view with batch 1 (no copy).
inline TensorView batch_slice(const TensorView& t, int64_t b) {
  TensorView s = t;
  s.data = static_cast<unsigned char*>(t.data) + b * t.stride[0] * dtype_size(t.dtype);
  s.shape[0] = 1;
  return s;
}

// Rows [first, first + len) of t along the sequence axis, as a view (no copy).
inline TensorView seq_slice(const TensorView& t, int64_t first, int64_t len) {
  TensorView s = t;
  s.data = static_cast<unsigned char*>(t.data) + first * t.stride[2] * dtype_size(t.dtype);
  s.shape[2] = len;
  return s;
}

// The log-sum-exp output: fp32 (B, H, Lq) viewed as a TensorView with D = 1.
inline TensorView make_lse(float* data, int64_t B, int64_t H, int64_t L) {
  return TensorView{data, DType::F32, {B, H, L, 1}, {H * L, L, 1, 1}};
}

}  // namespace spattn
