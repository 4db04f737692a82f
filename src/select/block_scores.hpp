// select/block_scores.hpp - host block scores and row probabilities for one
// batch element (phases 1 and 2 of select_blocks).
//
// BlockProbs holds, per (mask head, query block), the probability of each key
// block: the softmax over the row's allowed prefix [0, n) of the block scores
// of every query head mapped to the mask head, averaged over those heads.
// Entries past the prefix are 0. A query head whose row has no finite score
// (antidiagonal sampling found no allowed pair) adds nothing.
#pragma once

#include <cstdint>
#include <vector>

#include "select/select_rules.hpp"
#include "spattn/tensor.hpp"

namespace spattn::select_detail {

// Below this many multiply-adds a loop runs on one thread: OpenMP start-up
// (and spinning threads on a busy machine) would cost more than the work.
constexpr int64_t kMinParallelWork = int64_t{1} << 18;

struct BlockProbs {
  int64_t num_heads = 0, num_q_blocks = 0, num_k_blocks = 0;
  std::vector<double> probs;  // (num_heads, num_q_blocks, num_k_blocks)

  const double* row(int64_t mask_head, int64_t qb) const {
    return probs.data() + (mask_head * num_q_blocks + qb) * num_k_blocks;
  }
};

// Mean over each block of `block` rows of head h of batch element b, for all
// heads: (H, num_blocks, D), accumulated in fp64.
std::vector<double> pool_blocks(const TensorView& t, int64_t b, int64_t block);

// Scores from pooled q (Hq, nqb, D) and pooled k (Hkv, nkb, D).
BlockProbs mean_pooled_probs(const std::vector<double>& pooled_q, const std::vector<double>& pooled_k,
                             const SelectParams& p, int64_t q_heads, int64_t kv_heads, int64_t head_dim,
                             bool per_query_head);

// Scores from antidiagonal samples with stride p.stride, read from batch element b.
BlockProbs antidiagonal_probs(const TensorView& q, const TensorView& k, int64_t b, const SelectParams& p,
                              bool per_query_head);

}  // namespace spattn::select_detail
