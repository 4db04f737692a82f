// reference.cpp - the exact CPU oracle every test compares against.
//
// For every (batch, query head, row) it walks the row's key blocks through the
// block iterator (BlockMaskView), tests pairs of partial blocks with the
// pattern predicate, and runs an online softmax in fp64: running max m, sum l
// and accumulator acc, rescaled whenever the max grows. Streamed per row: no
// score matrix is stored. Rows with no allowed key give 0 and LSE -inf.
// Non-finite scores follow IEEE arithmetic (attention.hpp): a NaN or +inf
// score makes its row NaN, a -inf score weighs 0.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "spattn/attention.hpp"

namespace spattn {

void reference_attention(const TensorView& q, const TensorView& k, const TensorView& v,
                         const TensorView& out, const BlockMask& mask, double scale,
                         const TensorView* lse) {
  const int64_t B = q.batch(), Hq = q.heads(), Lq = q.seq_len(), D = q.head_dim();
  const int64_t group = Hq / k.heads();
  const int64_t offset = k.seq_len() - Lq;
  const BlockMaskView plan = mask.view();
  const Pattern* pattern = mask.pattern();

#pragma omp parallel for collapse(2) schedule(dynamic)
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < Hq; ++h) {
      const int64_t kv_head = h / group;
      const PatternExpr* expr = pattern ? &pattern->expr_for_head(h, Hq) : nullptr;
      std::vector<double> q_row(D), acc(D);
      for (int64_t i = 0; i < Lq; ++i) {
        for (int64_t d = 0; d < D; ++d) q_row[d] = q.load(b, h, i, d);
        std::fill(acc.begin(), acc.end(), 0.0);
        double running_max = -std::numeric_limits<double>::infinity(), running_sum = 0.0;
        const int64_t r = plan.row(plan.mask_head(h, Hq), i / plan.block_q);
        for (int64_t at = plan.row_begin(r); at < plan.row_end(r); ++at) {
          const int64_t kb = plan.kv_indices[at];
          const bool full = plan.kv_full[at] != 0;
          for (int64_t j = plan.k_first(kb); j < plan.k_last(kb); ++j) {
            if (!full && !expr_allows(*expr, h, i, i + offset, j)) continue;
            double score = 0.0;
            for (int64_t d = 0; d < D; ++d) score += q_row[d] * k.load(b, kv_head, j, d);
            score *= scale;
            if (score == -std::numeric_limits<double>::infinity()) continue;  // weighs 0, as a masked key
            if (score > running_max) {
              const double rescale = std::exp(running_max - score);
              running_sum *= rescale;
              for (double& a : acc) a *= rescale;
              running_max = score;
            }
            const double weight = std::exp(score - running_max);
            running_sum += weight;
            for (int64_t d = 0; d < D; ++d) acc[d] += weight * v.load(b, kv_head, j, d);
          }
        }
        const bool empty = running_sum == 0.0;
        for (int64_t d = 0; d < D; ++d) out.store(b, h, i, d, empty ? 0.0 : acc[d] / running_sum);
        if (lse)
          lse->store(b, h, i, 0,
                     empty ? -std::numeric_limits<double>::infinity()
                           : running_max + std::log(running_sum));
      }
    }
  }
}

}  // namespace spattn
