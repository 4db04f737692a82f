// cuda/common/excluded_keys.hpp - the keys that one pass of a dilated split
// leaves to the other in one query row (DilatedExclusion, fwd_params.hpp), as
// a single span {lo <= j <= hi, j = residue mod stride}. Host and device: the
// kernels turn it into bits (lane_keep_word, tile_mask.cuh); a host test checks
// it against the split's partition of the pairs.
#pragma once

#include <cstdint>

#include "cuda/common/fwd_params.hpp"
#include "pattern/terms/term_forms.hpp"
#include "spattn/hd.hpp"

namespace spattn::cuda_detail {

struct KeySpan {
  int64_t lo = 0, hi = -1, stride = 1, residue = 0;
};

// The keys `x` removes from query row i of query head h, whose residue
// h mod x.rate the caller computes once for all its rows (in the rest pass a
// row of a sequence with `shift` = k_len - q_len; in the permuted pass a
// permuted row, its keys permuted keys); false when it removes none.
SPATTN_HD bool excluded_keys(const DilatedExclusion& x, int64_t h, int64_t residue, int64_t i, int64_t shift,
                             KeySpan& keys) {
  if (x.kind == Exclusion::Rest) {
    const int64_t pos = i + shift;
    if (pos < x.p_lo || pos >= x.p_hi || pattern_math::positive_mod(pos, x.rate) != residue) return false;
    keys.lo = pos - pattern_math::positive_mod(pos, x.segment);
    keys.hi = x.causal ? pos : keys.lo + x.segment - 1;
    keys.stride = x.rate;
    keys.residue = residue;
    return true;
  }
  const int64_t g = pattern_math::nonnegative_div(i, x.group), start = x.first_position + g * x.segment + residue;
  const int64_t qb = pattern_math::nonnegative_div(start + (i - g * x.group) * x.rate - x.shift, x.block_q);
  const int32_t* run = x.runs + 2 * ((x.runs_per_head ? h : 0) * x.num_q_blocks + qb);
  const int64_t first = run[0] - start, last = run[1] - 1 - start;  // key offsets from the group start
  if (last < 0 || first > last) return false;
  const int64_t b_lo = first <= 0 ? 0 : pattern_math::nonnegative_div(first + x.rate - 1, x.rate);
  const int64_t b_last = pattern_math::nonnegative_div(last, x.rate);
  const int64_t b_hi = b_last < x.group - 1 ? b_last : x.group - 1;
  keys.lo = g * x.group + b_lo;
  keys.hi = g * x.group + b_hi;
  keys.stride = 1;
  keys.residue = 0;
  return true;
}

}  // namespace spattn::cuda_detail
