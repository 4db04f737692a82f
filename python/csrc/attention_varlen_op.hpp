// python/csrc/attention_varlen_op.hpp - one call of the spattn::attention_varlen
// operator, shared by its CPU and CUDA kernels.
//
// VarlenCall views packed q (total_q, Hq, D), k and v (total_k, Hkv, D) as
// batch-1 tensors, allocates out (strides of q) and lse (Hq, total_q) fp32,
// and describes the batch from the int32 cu_seqlens tensors (VarlenOffsets,
// on the device of q; read there by the CUDA kernel, on the host by the CPU
// kernel). The backward's CPU kernel uses the views and offsets alone.
#pragma once

#include <ATen/ATen.h>

#include <algorithm>
#include <optional>
#include <tuple>

#include "spattn/attention.hpp"

namespace spattn::torch_bridge {

// The length of the dense mask of a varlen call without one: the longest
// sequence (at least 1).
inline int64_t varlen_dense_length(int64_t max_seqlen_q, int64_t max_seqlen_k) {
  return std::max<int64_t>({max_seqlen_q, max_seqlen_k, 1});
}

// (total, H, D) -> the batch-1 view (1, H, total, D), strides kept; errors name `name`.
TensorView packed_view_of(const at::Tensor& t, const char* name);

// The batch described by int32 cu_seqlens tensors (batch + 1 entries each) on
// the device of q, kept contiguous and alive while the batch is used.
class VarlenOffsets {
 public:
  VarlenOffsets(const at::Tensor& cu_seqlens_q, const at::Tensor& cu_seqlens_k, int64_t max_seqlen_q,
                int64_t max_seqlen_k, const at::Tensor& q);
  VarlenBatch batch;

 private:
  at::Tensor cu_q_, cu_k_;
};

class VarlenCall {
 public:
  VarlenCall(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& cu_seqlens_q,
             const at::Tensor& cu_seqlens_k, int64_t max_seqlen_q, int64_t max_seqlen_k,
             std::optional<double> scale);

  // True when there are no query rows; the outputs are then final (empty).
  bool empty() const { return empty_; }
  std::tuple<at::Tensor, at::Tensor> result() const { return {out_tensor, lse_tensor}; }

  TensorView q, k, v, out, lse;
  VarlenOffsets offsets;
  const VarlenBatch& batch = offsets.batch;
  at::Tensor out_tensor, lse_tensor;
  AttentionOptions options;

 private:
  bool empty_ = false;
};

}  // namespace spattn::torch_bridge
