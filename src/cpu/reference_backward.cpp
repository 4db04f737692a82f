// reference_backward.cpp - the exact fp64 backward pass, the oracle of the
// backward tests (spattn/backward.hpp has the formulas).
//
// Streamed like the forward reference, with no score matrix and O(D) memory
// per thread: delta_i = d_out_i . out_i - d_lse_i per row first; then dq row
// by row over each row's kept blocks; then dk and dv key by key over the
// query blocks that keep its block (the key-major plan), recomputing each
// score. Pairs in partial blocks are tested with the pattern predicate; a
// -inf score weighs 0 as in the forward pass; rows with LSE -inf are skipped.
#include <cmath>
#include <limits>
#include <vector>

#include "pattern/key_major_plan.hpp"
#include "spattn/backward.hpp"

namespace spattn {
namespace {

constexpr double kMinusInf = -std::numeric_limits<double>::infinity();

double dot_rows(const TensorView& a, int64_t ab, int64_t ah, int64_t ai, const TensorView& b, int64_t bb,
                int64_t bh, int64_t bi) {
  double s = 0.0;
  for (int64_t d = 0; d < a.head_dim(); ++d) s += a.load(ab, ah, ai, d) * b.load(bb, bh, bi, d);
  return s;
}

}  // namespace

void reference_attention_backward(const TensorView& q, const TensorView& k, const TensorView& v,
                                  const TensorView& out, const TensorView& lse, const TensorView& d_out,
                                  const AttentionGrads& grads, const BlockMask& mask, double scale,
                                  const TensorView* d_lse) {
  const int64_t B = q.batch(), Hq = q.heads(), Lq = q.seq_len(), D = q.head_dim();
  const int64_t Hkv = k.heads(), group = Hq / Hkv, offset = k.seq_len() - Lq;
  const BlockMaskView plan = mask.view();
  const Pattern* pattern = mask.pattern();
  const auto allows = [&](bool full, int64_t h, int64_t i, int64_t j) {
    return full || expr_allows(pattern->expr_for_head(h, Hq), h, i, i + offset, j);
  };

  std::vector<double> delta(static_cast<size_t>(B * Hq * Lq));
#pragma omp parallel for collapse(2)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h)
      for (int64_t i = 0; i < Lq; ++i)
        delta[(b * Hq + h) * Lq + i] =
            dot_rows(d_out, b, h, i, out, b, h, i) - (d_lse ? d_lse->load(b, h, i, 0) : 0.0);

  // dq, row by row.
#pragma omp parallel for collapse(2) schedule(dynamic)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h) {
      const int64_t kvh = h / group;
      std::vector<double> dq(static_cast<size_t>(D));
      for (int64_t i = 0; i < Lq; ++i) {
        std::fill(dq.begin(), dq.end(), 0.0);
        const double row_lse = lse.load(b, h, i, 0), row_delta = delta[(b * Hq + h) * Lq + i];
        const int64_t r = plan.row(plan.mask_head(h, Hq), i / plan.block_q);
        for (int64_t at = plan.row_begin(r); row_lse != kMinusInf && at < plan.row_end(r); ++at) {
          const int64_t kb = plan.kv_indices[at];
          for (int64_t j = plan.k_first(kb); j < plan.k_last(kb); ++j) {
            if (!allows(plan.kv_full[at] != 0, h, i, j)) continue;
            const double s = scale * dot_rows(q, b, h, i, k, b, kvh, j);
            if (s == kMinusInf) continue;
            const double p = std::exp(s - row_lse);
            const double ds = p * (dot_rows(d_out, b, h, i, v, b, kvh, j) - row_delta);
            for (int64_t d = 0; d < D; ++d) dq[d] += ds * k.load(b, kvh, j, d);
          }
        }
        for (int64_t d = 0; d < D; ++d) grads.dq.store(b, h, i, d, scale * dq[d]);
      }
    }

  // dk and dv, key by key, over the query heads of its kv head.
  const KeyMajorPlan cols = key_major_plan(plan);
#pragma omp parallel for collapse(3) schedule(dynamic)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t kvh = 0; kvh < Hkv; ++kvh)
      for (int64_t kb = 0; kb < plan.num_k_blocks; ++kb) {
        std::vector<double> dk(static_cast<size_t>(D)), dv(static_cast<size_t>(D));
        for (int64_t j = plan.k_first(kb); j < plan.k_last(kb); ++j) {
          std::fill(dk.begin(), dk.end(), 0.0);
          std::fill(dv.begin(), dv.end(), 0.0);
          for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
            const int64_t c = cols.col(plan.mask_head(h, Hq), kb);
            for (int64_t e = cols.col_begin(c); e < cols.col_end(c); ++e) {
              const int64_t qb = cols.q_indices[e];
              for (int64_t i = plan.q_first(qb); i < plan.q_last(qb); ++i) {
                const double row_lse = lse.load(b, h, i, 0);
                if (row_lse == kMinusInf || !allows(cols.q_full[e] != 0, h, i, j)) continue;
                const double s = scale * dot_rows(q, b, h, i, k, b, kvh, j);
                if (s == kMinusInf) continue;
                const double p = std::exp(s - row_lse);
                const double ds =
                    p * (dot_rows(d_out, b, h, i, v, b, kvh, j) - delta[(b * Hq + h) * Lq + i]);
                for (int64_t d = 0; d < D; ++d) {
                  dv[d] += p * d_out.load(b, h, i, d);
                  dk[d] += ds * q.load(b, h, i, d);
                }
              }
            }
          }
          for (int64_t d = 0; d < D; ++d) {
            grads.dk.store(b, kvh, j, d, scale * dk[d]);
            grads.dv.store(b, kvh, j, d, dv[d]);
          }
        }
      }
}

}  // namespace spattn
