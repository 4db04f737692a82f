// spattn/block_mask.hpp - the plan every backend reads, and the block iterator.
//
// A BlockMask lists, for each (mask head, query block), the sorted key blocks
// to visit, each marked full (every pair allowed: no per-element test) or
// partial (the pattern's predicate is applied per pair). Block sizes belong to
// the mask; the last block of a sequence may be short. A mask has 1 head
// (shared by all query heads) or G heads (query head h uses mask head
// h / (Hq / G)); it is shared across the batch. Offsets are 64-bit.
//
// BlockMaskView is the one block iterator: a plain struct of pointers usable on
// the host and on the GPU.
//
// A BlockMask is an immutable value: copies share its arrays and its plan
// cache (the plans attention calls made for it, spattn/plan.hpp), so they are
// cheap.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "spattn/hd.hpp"
#include "spattn/pattern.hpp"

namespace spattn {

namespace detail {
struct BlockMaskAssembly;  // cuda_build_mask: plans built on the device, valid by construction
class PlanCache;           // src/plan/plan_cache.hpp
}  // namespace detail

struct BlockMaskView {
  int64_t q_len = 0, k_len = 0;
  int64_t block_q = 0, block_k = 0;
  int64_t num_q_blocks = 0, num_k_blocks = 0;
  int64_t num_heads = 0;
  const int64_t* row_offsets = nullptr;  // num_heads * num_q_blocks + 1
  const int32_t* kv_indices = nullptr;   // sorted per row
  const uint8_t* kv_full = nullptr;      // 1 = full, 0 = partial

  // Mask head used by query head h out of `query_heads`.
  SPATTN_HD int64_t mask_head(int64_t h, int64_t query_heads) const {
    return h / (query_heads / num_heads);
  }
  SPATTN_HD int64_t row(int64_t mask_head, int64_t qb) const { return mask_head * num_q_blocks + qb; }
  SPATTN_HD int64_t row_begin(int64_t r) const { return row_offsets[r]; }
  SPATTN_HD int64_t row_end(int64_t r) const { return row_offsets[r + 1]; }
  // Query rows [first, last) of query block qb; keys [first, last) of key block kb.
  SPATTN_HD int64_t q_first(int64_t qb) const { return qb * block_q; }
  SPATTN_HD int64_t q_last(int64_t qb) const {
    return (qb + 1) * block_q < q_len ? (qb + 1) * block_q : q_len;
  }
  SPATTN_HD int64_t k_first(int64_t kb) const { return kb * block_k; }
  SPATTN_HD int64_t k_last(int64_t kb) const {
    return (kb + 1) * block_k < k_len ? (kb + 1) * block_k : k_len;
  }
};

struct MaskShape {
  int64_t q_len = 0;
  int64_t k_len = 0;
  int64_t block_q = 128;
  int64_t block_k = 128;
  int64_t num_heads = 1;  // query heads; a head-dependent pattern gets one mask head each
};

class BlockMask {
 public:
  BlockMask();
  // From BSR arrays. Validates sizes, ranges, sortedness and uniqueness. Partial
  // blocks need `pattern` to say which pairs inside them are allowed.
  BlockMask(int64_t q_len, int64_t k_len, int64_t block_q, int64_t block_k, int64_t num_heads,
            std::vector<int64_t> row_offsets, std::vector<int32_t> kv_indices,
            std::vector<uint8_t> kv_full, std::shared_ptr<const Pattern> pattern = nullptr);

  // Builds the plan of `pattern` for `shape` in time proportional to the kept
  // blocks (never L x L). Zero lengths are valid: Lq == 0 gives a plan of no
  // rows, Lk == 0 one whose rows keep no block.
  // Refuses (spattn::Error) before allocating when the plan would not fit in
  // the memory available (spattn/memory.hpp).
  static BlockMask build(const Pattern& pattern, const MaskShape& shape);
  // About how many bytes build() allocates for `shape`: the row offsets
  // exactly, the block lists extrapolated from 64 evenly spread rows (build()
  // checks their exact size again before allocating them). Checks the
  // arguments as build() does; costs the walk of 64 rows, whatever the lengths.
  static int64_t build_bytes(const Pattern& pattern, const MaskShape& shape);

  BlockMaskView view() const;
  int64_t q_len() const { return q_len_; }
  int64_t k_len() const { return k_len_; }
  int64_t block_q() const { return block_q_; }
  int64_t block_k() const { return block_k_; }
  int64_t num_heads() const { return num_heads_; }
  int64_t num_q_blocks() const;
  int64_t num_k_blocks() const;
  int64_t num_blocks() const { return static_cast<int64_t>(arrays_->kv_indices.size()); }
  int64_t num_full_blocks() const;
  const std::vector<int64_t>& row_offsets() const { return arrays_->row_offsets; }
  const std::vector<int32_t>& kv_indices() const { return arrays_->kv_indices; }
  const std::vector<uint8_t>& kv_full() const { return arrays_->kv_full; }
  const Pattern* pattern() const { return pattern_.get(); }
  const std::shared_ptr<const Pattern>& shared_pattern() const { return pattern_; }
  // True when the blocks are the pattern's own plan for this shape, as made
  // by build() or cuda_build_mask; false for masks made from arrays (even
  // where they hold the same blocks).
  bool is_pattern_plan() const { return pattern_plan_; }
  // The plans calls without an explicit plan made for this mask, and its
  // device copies (shared by copies of the mask, released with the last).
  detail::PlanCache& plan_cache() const { return *plans_; }

  // Allowed (query, key) pairs for query head h of `query_heads`, counted
  // through the plan (full blocks whole, partial blocks by the predicate).
  int64_t kept_pairs(int64_t query_heads) const;
  // kept_pairs / (query_heads * Lq * Lk); 0 when Lq or Lk is 0 (no pairs).
  double density(int64_t query_heads) const;

  // Is pair (i, j) allowed for query head h? Reads the plan, then the predicate.
  bool allowed(int64_t h, int64_t query_heads, int64_t i, int64_t j) const;

 private:
  // build() makes plans valid by construction and skips the O(blocks) checks.
  struct BuiltPlan {};
  BlockMask(BuiltPlan, int64_t q_len, int64_t k_len, int64_t block_q, int64_t block_k,
            int64_t num_heads, std::vector<int64_t> row_offsets, std::vector<int32_t> kv_indices,
            std::vector<uint8_t> kv_full, std::shared_ptr<const Pattern> pattern);
  // Throws spattn::Error unless the arrays form a plan (sizes, ranges, order).
  void validate() const;
  friend struct detail::BlockMaskAssembly;

  struct Arrays {
    std::vector<int64_t> row_offsets;
    std::vector<int32_t> kv_indices;
    std::vector<uint8_t> kv_full;
  };

  int64_t q_len_ = 0, k_len_ = 0, block_q_ = 0, block_k_ = 0, num_heads_ = 0;
  std::shared_ptr<const Arrays> arrays_;
  std::shared_ptr<const Pattern> pattern_;
  bool pattern_plan_ = false;
  std::shared_ptr<detail::PlanCache> plans_;
};

}  // namespace spattn
