// select/select_rules.hpp - the row geometry and counting rules of block selection,
// written once for the host selector and the CUDA kernels (SPATTN_HD).
//
// For query block qb the allowed key blocks are always a prefix [0, n): without
// causality every block, with it the blocks whose first key is at or before
// the block's last position p_last = q_last - 1 + Lk - Lq. The forced blocks
// are the sinks [0, sink_blocks) and the local run of local_blocks blocks
// ending at the block that holds p_last, both cut to [0, n). A kept block is
// partial when causality removes some of its pairs (its last key lies after
// the block's first position). kept_count applies the budgets to the number a
// mode asked for.
#pragma once

#include <cstdint>

#include "spattn/hd.hpp"
#include "spattn/pattern_terms.hpp"

namespace spattn::select_detail {

// A validated SelectConfig resolved for one shape; plain data for kernels.
struct SelectParams {
  int64_t q_len = 0, k_len = 0;
  int64_t block_q = 0, block_k = 0;
  int64_t num_q_blocks = 0, num_k_blocks = 0;
  int32_t use_tau = 0;  // 1: tau mode, 0: topk mode
  int32_t causal = 0;
  int64_t topk = 0;
  double tau = 1.0;
  int64_t min_blocks = 0;
  int64_t max_blocks = 0;  // 0 = no limit
  int64_t sink_blocks = 0;
  int64_t local_blocks = 0;
  int64_t stride = 0;
  double scale = 1.0;
};

// Absolute position of the last query row of block qb (may be negative when Lq > Lk).
SPATTN_HD int64_t last_position(const SelectParams& p, int64_t qb) {
  const int64_t last_row = pattern_math::min64((qb + 1) * p.block_q, p.q_len) - 1;
  return last_row + p.k_len - p.q_len;
}

SPATTN_HD int64_t first_position(const SelectParams& p, int64_t qb) {
  return qb * p.block_q + p.k_len - p.q_len;
}

// Number of allowed key blocks of query block qb: they are [0, n).
SPATTN_HD int64_t allowed_blocks(const SelectParams& p, int64_t qb) {
  if (!p.causal) return p.num_k_blocks;
  const int64_t last = last_position(p, qb);
  if (last < 0) return 0;
  return pattern_math::min64(last / p.block_k + 1, p.num_k_blocks);
}

// The local run [first, last] (empty when last < first): local_blocks blocks
// ending at the block holding the row's last position.
SPATTN_HD int64_t local_last(const SelectParams& p, int64_t qb) {
  return pattern_math::min64(pattern_math::floor_div(last_position(p, qb), p.block_k), p.num_k_blocks - 1);
}
SPATTN_HD int64_t local_first(const SelectParams& p, int64_t qb) {
  return pattern_math::max64(local_last(p, qb) - p.local_blocks + 1, 0);
}

// Is allowed key block kb of query block qb forced (sink or local)?
SPATTN_HD bool is_forced(const SelectParams& p, int64_t qb, int64_t kb) {
  return kb < p.sink_blocks || (kb >= local_first(p, qb) && kb <= local_last(p, qb));
}

// Number of forced blocks among the n allowed blocks of query block qb.
SPATTN_HD int64_t forced_count(const SelectParams& p, int64_t qb, int64_t n) {
  const int64_t sinks = pattern_math::min64(p.sink_blocks, n);
  const int64_t hi = pattern_math::min64(local_last(p, qb), n - 1);
  const int64_t lo = local_first(p, qb);
  if (hi < lo) return sinks;
  const int64_t overlap = pattern_math::max64(pattern_math::min64(hi, sinks - 1) - lo + 1, 0);
  return sinks + (hi - lo + 1) - overlap;
}

// Does causality remove some pair of key block kb for query block qb?
SPATTN_HD bool block_is_cut(const SelectParams& p, int64_t qb, int64_t kb) {
  if (!p.causal) return false;
  const int64_t last_key = pattern_math::min64((kb + 1) * p.block_k, p.k_len) - 1;
  return last_key > first_position(p, qb);
}

// Blocks a row keeps when its mode asked for `wanted` (forced ones included),
// with `forced` forced blocks among its n allowed ones.
SPATTN_HD int64_t kept_count(const SelectParams& p, int64_t wanted, int64_t forced, int64_t n) {
  int64_t count = pattern_math::max64(pattern_math::max64(wanted, forced), p.min_blocks);
  if (p.max_blocks > 0) count = pattern_math::min64(count, p.max_blocks);
  return pattern_math::min64(count, n);
}

// Order of candidates: higher probability first, ties to the lower block index.
template <typename Real>
SPATTN_HD bool ranks_before(Real prob_a, int64_t a, Real prob_b, int64_t b) {
  return prob_a > prob_b || (prob_a == prob_b && a < b);
}

}  // namespace spattn::select_detail
