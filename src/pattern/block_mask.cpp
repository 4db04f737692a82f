// block_mask.cpp - BlockMask construction from BSR arrays, its view (the block
// iterator) and queries through it (kept pairs, density, pair membership).
#include "spattn/block_mask.hpp"

#include <algorithm>
#include <limits>

#include "plan/plan_cache.hpp"
#include "spattn/error.hpp"

namespace spattn {

BlockMask::BlockMask()
    : arrays_(std::make_shared<const Arrays>()), plans_(std::make_shared<detail::PlanCache>()) {}

BlockMask::BlockMask(int64_t q_len, int64_t k_len, int64_t block_q, int64_t block_k,
                     int64_t num_heads, std::vector<int64_t> row_offsets,
                     std::vector<int32_t> kv_indices, std::vector<uint8_t> kv_full,
                     std::shared_ptr<const Pattern> pattern)
    : BlockMask(BuiltPlan{}, q_len, k_len, block_q, block_k, num_heads, std::move(row_offsets),
                std::move(kv_indices), std::move(kv_full), std::move(pattern)) {
  pattern_plan_ = false;
  validate();
}

BlockMask::BlockMask(BuiltPlan, int64_t q_len, int64_t k_len, int64_t block_q, int64_t block_k,
                     int64_t num_heads, std::vector<int64_t> row_offsets,
                     std::vector<int32_t> kv_indices, std::vector<uint8_t> kv_full,
                     std::shared_ptr<const Pattern> pattern)
    : q_len_(q_len),
      k_len_(k_len),
      block_q_(block_q),
      block_k_(block_k),
      num_heads_(num_heads),
      arrays_(std::make_shared<const Arrays>(Arrays{std::move(row_offsets), std::move(kv_indices),
                                                    std::move(kv_full)})),
      pattern_(std::move(pattern)),
      pattern_plan_(pattern_ != nullptr),
      plans_(std::make_shared<detail::PlanCache>()) {}

void BlockMask::validate() const {
  const std::vector<int64_t>& offsets = arrays_->row_offsets;
  const std::vector<int32_t>& indices = arrays_->kv_indices;
  const std::vector<uint8_t>& full = arrays_->kv_full;
  const int64_t q_len = q_len_, k_len = k_len_, block_q = block_q_, block_k = block_k_,
                num_heads = num_heads_;
  require(q_len >= 0, "q_len must be >= 0, got ", q_len);
  require(k_len >= 0, "k_len must be >= 0, got ", k_len);
  require(block_q > 0, "block_q must be > 0, got ", block_q);
  require(block_k > 0, "block_k must be > 0, got ", block_k);
  require(num_heads > 0, "num_heads must be > 0, got ", num_heads);
  const int64_t nqb = num_q_blocks(), nkb = num_k_blocks();
  require(nkb <= std::numeric_limits<int32_t>::max(), "the number of key blocks must fit in 32 bits",
          ", got ", nkb, " (k_len=", k_len, ", block_k=", block_k, ")");
  require(nqb <= std::numeric_limits<int64_t>::max() / num_heads - 1,
          "num_heads * num_q_blocks overflows: num_heads=", num_heads, " num_q_blocks=", nqb);
  const int64_t rows = num_heads * nqb;
  require(static_cast<int64_t>(offsets.size()) == rows + 1,
          "row_offsets must have num_heads*num_q_blocks+1 = ", rows + 1, " entries, got ",
          offsets.size());
  require(offsets.front() == 0, "row_offsets[0] must be 0, got ", offsets.front());
  require(offsets.back() == static_cast<int64_t>(indices.size()),
          "row_offsets[last] must equal the number of kv_indices (", indices.size(), "), got ",
          offsets.back());
  require(full.size() == indices.size(), "kv_full must have one entry per kv index (",
          indices.size(), "), got ", full.size());
  for (int64_t r = 0; r < rows; ++r) {
    require(offsets[r] <= offsets[r + 1], "row_offsets must be non-decreasing, got row_offsets[",
            r, "]=", offsets[r], " > row_offsets[", r + 1, "]=", offsets[r + 1]);
    for (int64_t at = offsets[r]; at < offsets[r + 1]; ++at) {
      require(indices[at] >= 0 && indices[at] < nkb, "kv_indices[", at, "] must be in [0, ",
              nkb, "), got ", indices[at]);
      require(at == offsets[r] || indices[at] > indices[at - 1], "kv_indices of row ", r,
              " must be sorted and unique, got ", indices[at - 1], " then ", indices[at]);
      require(full[at] <= 1, "kv_full[", at, "] must be 0 or 1, got ",
              static_cast<int>(full[at]));
      require(full[at] == 1 || pattern_, "kv_full[", at,
              "] marks a partial block but the mask has no pattern to test its pairs");
    }
  }
  if (pattern_) {
    pattern_->check_lengths(q_len, k_len);
    require(num_heads % pattern_->num_exprs() == 0,
            "the pattern has ", pattern_->num_exprs(), " heads, which does not fit a mask of ",
            num_heads, " heads");
  }
}

int64_t BlockMask::num_q_blocks() const { return pattern_math::ceil_div(q_len_, block_q_); }
int64_t BlockMask::num_k_blocks() const { return pattern_math::ceil_div(k_len_, block_k_); }

int64_t BlockMask::num_full_blocks() const {
  return std::count(kv_full().begin(), kv_full().end(), uint8_t{1});
}

BlockMaskView BlockMask::view() const {
  BlockMaskView v;
  v.q_len = q_len_;
  v.k_len = k_len_;
  v.block_q = block_q_;
  v.block_k = block_k_;
  v.num_q_blocks = num_q_blocks();
  v.num_k_blocks = num_k_blocks();
  v.num_heads = num_heads_;
  v.row_offsets = arrays_->row_offsets.data();
  v.kv_indices = arrays_->kv_indices.data();
  v.kv_full = arrays_->kv_full.data();
  return v;
}

int64_t BlockMask::kept_pairs(int64_t query_heads) const {
  require(query_heads > 0 && query_heads % num_heads_ == 0, "query_heads must be a positive ",
          "multiple of the mask's heads (", num_heads_, "), got ", query_heads);
  const BlockMaskView v = view();
  const bool per_query_head = pattern_ && pattern_->head_dependent();
  const int64_t heads_to_count = per_query_head ? query_heads : num_heads_;
  const int64_t multiplier = per_query_head ? 1 : query_heads / num_heads_;
  const int64_t offset = k_len_ - q_len_;
  int64_t total = 0;
  for (int64_t h = 0; h < heads_to_count; ++h) {
    const int64_t mh = per_query_head ? v.mask_head(h, query_heads) : h;
    const int64_t qh = per_query_head ? h : h * (query_heads / num_heads_);
    for (int64_t qb = 0; qb < v.num_q_blocks; ++qb) {
      const int64_t r = v.row(mh, qb);
      for (int64_t at = v.row_begin(r); at < v.row_end(r); ++at) {
        const int64_t kb = v.kv_indices[at];
        const int64_t j0 = v.k_first(kb), j1 = v.k_last(kb) - 1;
        if (v.kv_full[at]) {
          total += (v.q_last(qb) - v.q_first(qb)) * (j1 - j0 + 1);
          continue;
        }
        const PatternExpr& e = pattern_->expr_for_head(qh, query_heads);
        for (int64_t i = v.q_first(qb); i < v.q_last(qb); ++i)
          total += expr_count_row(e, qh, i, i + offset, j0, j1);
      }
    }
  }
  return total * multiplier;
}

double BlockMask::density(int64_t query_heads) const {
  const int64_t kept = kept_pairs(query_heads);
  if (q_len_ == 0 || k_len_ == 0) return 0.0;  // no pairs at all
  return static_cast<double>(kept) /
         (static_cast<double>(query_heads) * static_cast<double>(q_len_) * static_cast<double>(k_len_));
}

bool BlockMask::allowed(int64_t h, int64_t query_heads, int64_t i, int64_t j) const {
  const BlockMaskView v = view();
  const int64_t r = v.row(v.mask_head(h, query_heads), i / block_q_);
  const int32_t kb = static_cast<int32_t>(j / block_k_);
  const std::vector<int32_t>& indices = kv_indices();
  const auto begin = indices.begin() + v.row_begin(r), end = indices.begin() + v.row_end(r);
  const auto it = std::lower_bound(begin, end, kb);
  if (it == end || *it != kb) return false;
  if (kv_full()[static_cast<size_t>(it - indices.begin())]) return true;
  return pattern_->allowed(h, query_heads, q_len_, k_len_, i, j);
}

}  // namespace spattn
