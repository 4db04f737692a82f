// key_major_plan.cpp - the block mask transposed by a counting sort (key_major_plan.hpp).
#include "pattern/key_major_plan.hpp"

namespace spattn {

KeyMajorPlan key_major_plan(const BlockMaskView& plan) {
  KeyMajorPlan t;
  t.num_heads = plan.num_heads;
  t.num_k_blocks = plan.num_k_blocks;
  const int64_t rows = plan.num_heads * plan.num_q_blocks;
  const int64_t kept = rows == 0 ? 0 : plan.row_offsets[rows];
  t.col_offsets.assign(static_cast<size_t>(plan.num_heads * plan.num_k_blocks + 1), 0);
  for (int64_t mh = 0; mh < plan.num_heads; ++mh)
    for (int64_t qb = 0; qb < plan.num_q_blocks; ++qb) {
      const int64_t r = plan.row(mh, qb);
      for (int64_t at = plan.row_begin(r); at < plan.row_end(r); ++at)
        ++t.col_offsets[t.col(mh, plan.kv_indices[at]) + 1];
    }
  for (size_t c = 1; c < t.col_offsets.size(); ++c) t.col_offsets[c] += t.col_offsets[c - 1];
  t.q_indices.resize(static_cast<size_t>(kept));
  t.q_full.resize(static_cast<size_t>(kept));
  t.forward_position.resize(static_cast<size_t>(kept));
  std::vector<int64_t> next(t.col_offsets.begin(), t.col_offsets.end() - 1);
  // Rows in ascending query block order per head: each column comes out sorted.
  for (int64_t mh = 0; mh < plan.num_heads; ++mh)
    for (int64_t qb = 0; qb < plan.num_q_blocks; ++qb) {
      const int64_t r = plan.row(mh, qb);
      for (int64_t at = plan.row_begin(r); at < plan.row_end(r); ++at) {
        const int64_t slot = next[t.col(mh, plan.kv_indices[at])]++;
        t.q_indices[slot] = static_cast<int32_t>(qb);
        t.q_full[slot] = plan.kv_full[at];
        t.forward_position[slot] = at;
      }
    }
  return t;
}

}  // namespace spattn
