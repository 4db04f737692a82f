// naive_dense.cpp - the naive dense baseline of the seed programs.
//
// Materialises the full Lq x Lk score matrix of each (batch, head) in fp32,
// computing every pair whether the mask keeps it or not, then applies the mask
// (through the block iterator and predicate) and a row softmax. It is the
// "dense" column of seed-style tables and only meant for small L.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "spattn/attention.hpp"
#include "spattn/error.hpp"

namespace spattn {

void naive_dense_attention(const TensorView& q, const TensorView& k, const TensorView& v,
                           const TensorView& out, const BlockMask& mask, double scale,
                           const TensorView* lse) {
  const int64_t B = q.batch(), Hq = q.heads(), Lq = q.seq_len(), Lk = k.seq_len(), D = q.head_dim();
  require(Lq <= kNaiveDenseMaxScores / Lk, "the naive dense baseline materialises Lq x Lk scores and is ",
          "limited to ", kNaiveDenseMaxScores, " of them, got Lq=", Lq, " Lk=", Lk);
  const int64_t group = Hq / k.heads();
  const int64_t offset = Lk - Lq;
  const BlockMaskView plan = mask.view();
  const Pattern* pattern = mask.pattern();
  const float fscale = static_cast<float>(scale);

#pragma omp parallel for collapse(2) schedule(dynamic)
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < Hq; ++h) {
      const int64_t kv_head = h / group;
      const PatternExpr* expr = pattern ? &pattern->expr_for_head(h, Hq) : nullptr;
      std::vector<float> scores(static_cast<size_t>(Lq * Lk));
      for (int64_t i = 0; i < Lq; ++i)
        for (int64_t j = 0; j < Lk; ++j) {
          float s = 0.f;
          for (int64_t d = 0; d < D; ++d)
            s += static_cast<float>(q.load(b, h, i, d)) * static_cast<float>(k.load(b, kv_head, j, d));
          scores[i * Lk + j] = s * fscale;
        }
      std::vector<uint8_t> keep(static_cast<size_t>(Lk));
      std::vector<float> acc(static_cast<size_t>(D));
      for (int64_t i = 0; i < Lq; ++i) {
        std::fill(keep.begin(), keep.end(), uint8_t{0});
        const int64_t r = plan.row(plan.mask_head(h, Hq), i / plan.block_q);
        for (int64_t at = plan.row_begin(r); at < plan.row_end(r); ++at) {
          const int64_t kb = plan.kv_indices[at];
          for (int64_t j = plan.k_first(kb); j < plan.k_last(kb); ++j)
            keep[j] = plan.kv_full[at] || expr_allows(*expr, h, i, i + offset, j);
        }
        float row_max = -std::numeric_limits<float>::infinity();
        for (int64_t j = 0; j < Lk; ++j)
          if (keep[j] && scores[i * Lk + j] > row_max) row_max = scores[i * Lk + j];
        float row_sum = 0.f;
        std::fill(acc.begin(), acc.end(), 0.f);
        for (int64_t j = 0; j < Lk; ++j) {
          // A score of -inf weighs 0, like a masked key (and exp(-inf - -inf) would be NaN).
          if (!keep[j] || scores[i * Lk + j] == -std::numeric_limits<float>::infinity()) continue;
          const float w = std::exp(scores[i * Lk + j] - row_max);
          row_sum += w;
          for (int64_t d = 0; d < D; ++d) acc[d] += w * static_cast<float>(v.load(b, kv_head, j, d));
        }
        const bool empty = row_sum == 0.f;
        for (int64_t d = 0; d < D; ++d) out.store(b, h, i, d, empty ? 0.0 : acc[d] / row_sum);
        if (lse)
          lse->store(b, h, i, 0,
                     empty ? -std::numeric_limits<double>::infinity()
                           : static_cast<double>(row_max) + std::log(static_cast<double>(row_sum)));
      }
    }
  }
}

}  // namespace spattn
