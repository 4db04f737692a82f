// cuda/common/row_merge.cuh - how two results of one query row over
// disjoint key sets combine (the two passes of a dilated split): the weights
// of each side's normalised O and the LSE of the union, in the permuted
// pass's epilogue (write_output).
#pragma once

namespace spattn::cuda_detail {

// O = w_a O_a + w_b O_b and the merged LSE, for results (O_a, lse_a) and
// (O_b, lse_b) with lse_b not -inf; lse_a = -inf (no key on that side) gives
// w_a = 0. A NaN LSE on either side (a row with a NaN score) makes the merged
// LSE and weights NaN: fmaxf and fminf drop a NaN operand, so the NaN is
// put back explicitly.
struct RowMerge {
  float w_a = 0.0f, w_b = 1.0f, lse = 0.0f;
  __device__ __forceinline__ static RowMerge of(float lse_a, float lse_b) {
    RowMerge r;
    r.lse = lse_b;
    if (lse_a != -__builtin_huge_valf()) {
      const float hi = fmaxf(lse_a, lse_b), lo = fminf(lse_a, lse_b);
      r.lse = hi + log1pf(__expf(lo - hi));
      if (isnan(lse_a) || isnan(lse_b)) r.lse = lse_a + lse_b;
      r.w_a = __expf(lse_a - r.lse);
      r.w_b = __expf(lse_b - r.lse);
    }
    return r;
  }
};

}  // namespace spattn::cuda_detail
