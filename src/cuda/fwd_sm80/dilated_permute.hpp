// cuda/fwd_sm80/dilated_permute.hpp - the token permutation of a dilated split
// (cuda/plan/dilated_split.hpp) on the device: gather of q, k, v into
// (segment, residue) groups and the merge of the permuted pass's result back
// into the output.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "cuda/common/fwd_params.hpp"
#include "spattn/dtype.hpp"

namespace spattn::cuda_detail {

// Row a of group g of query head h holds position
//   first_position + g * segment + h % rate + a * rate.
struct PermuteGeometry {
  int64_t batch = 0, heads = 0, head_dim = 0;
  int64_t segment = 0, rate = 1, group = 0, num_segments = 0, first_position = 0;
  SPATTN_HD int64_t rows() const { return batch * heads * num_segments * group; }
};

// dst (B, heads, num_segments * group, D), contiguous, from src: row a of group g
// of head h reads src head h / head_div at row position - row_shift.
void launch_dilated_gather(const PermuteGeometry& g, const TensorArg& src, int64_t head_div, int64_t row_shift,
                           void* dst, DType dtype, cudaStream_t stream);

// Merges the permuted pass (o: fp32 rows as gathered, lse: one per row) into
// out / lse of p (query index = position - (k_len - q_len)):
//   lse = max + log1p(exp(min - max)), O = O_a exp(lse_a - lse) + O_b exp(lse_b - lse);
// a side with LSE -inf (no allowed key) gives way to the other.
void launch_dilated_merge(const PermuteGeometry& g, const FwdParams& p, const float* o, const float* lse,
                          DType dtype, cudaStream_t stream);

}  // namespace spattn::cuda_detail
