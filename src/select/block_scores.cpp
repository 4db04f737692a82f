// select/block_scores.cpp - host block scores and row probabilities (see
// block_scores.hpp).
//
// Mean pooling: one fp64 mean per (head, block, d); a row's scores are dot
// products of pooled vectors, cost Hq * nqb * nkb * D.
// Antidiagonal sampling: every row i of the query block meets the keys
// j = first key + off, off + S, ... with (i - first row) + off = S - 1 mod S,
// stopping at the block end and, causally, after its position; the block score
// is max + log(mean(exp(sample - max))), cost Hq * Lq * Lk * D / S (fp32 dot
// products of fp32 copies of q and k).
// Rows are independent; both loops are OpenMP-parallel over rows.
#include "select/block_scores.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "select/load_rows.hpp"

namespace spattn::select_detail {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

double dot(const double* a, const double* b, int64_t n) {
  double acc[4] = {0.0, 0.0, 0.0, 0.0};
  int64_t d = 0;
  for (; d + 4 <= n; d += 4)
    for (int lane = 0; lane < 4; ++lane) acc[lane] += a[d + lane] * b[d + lane];
  for (; d < n; ++d) acc[0] += a[d] * b[d];
  return (acc[0] + acc[1]) + (acc[2] + acc[3]);
}

float dot(const float* a, const float* b, int64_t n) {
  float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  int64_t d = 0;
  for (; d + 8 <= n; d += 8)
    for (int lane = 0; lane < 8; ++lane) acc[lane] += a[d + lane] * b[d + lane];
  for (; d < n; ++d) acc[0] += a[d] * b[d];
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

// Adds softmax(scores[0, n)) * weight to probs[0, n); no-op if no score is finite.
void add_softmax(const double* scores, int64_t n, double weight, double* probs) {
  double row_max = kNegInf;
  for (int64_t c = 0; c < n; ++c) row_max = std::fmax(row_max, scores[c]);
  if (row_max == kNegInf) return;
  double sum = 0.0;
  for (int64_t c = 0; c < n; ++c) sum += std::exp(scores[c] - row_max);
  for (int64_t c = 0; c < n; ++c) probs[c] += weight * std::exp(scores[c] - row_max) / sum;
}

BlockProbs empty_probs(const SelectParams& p, int64_t mask_heads) {
  BlockProbs r;
  r.num_heads = mask_heads;
  r.num_q_blocks = p.num_q_blocks;
  r.num_k_blocks = p.num_k_blocks;
  r.probs.assign(static_cast<size_t>(mask_heads * p.num_q_blocks * p.num_k_blocks), 0.0);
  return r;
}

// Calls score_row(h, kv_head, qb, n, scores) for every query head of every
// row and accumulates the softmaxes into the row's probabilities.
// `work_per_head_row` estimates the multiply-adds of one score_row call.
template <typename ScoreRow>
BlockProbs accumulate_rows(const SelectParams& p, int64_t q_heads, int64_t kv_heads, bool per_query_head,
                           int64_t work_per_head_row, ScoreRow score_row) {
  const int64_t group = q_heads / kv_heads;
  const int64_t mask_heads = per_query_head ? q_heads : kv_heads;
  const int64_t heads_per_row = per_query_head ? 1 : group;
  BlockProbs r = empty_probs(p, mask_heads);
  const int64_t rows = mask_heads * p.num_q_blocks;
#pragma omp parallel if (rows * heads_per_row * work_per_head_row >= kMinParallelWork)
  {
    std::vector<double> scores(static_cast<size_t>(p.num_k_blocks));
#pragma omp for schedule(dynamic, 4)
    for (int64_t row = 0; row < rows; ++row) {
      const int64_t m = row / p.num_q_blocks, qb = row % p.num_q_blocks;
      const int64_t n = allowed_blocks(p, qb);
      double* probs = r.probs.data() + row * p.num_k_blocks;
      for (int64_t t = 0; t < heads_per_row; ++t) {
        const int64_t h = per_query_head ? m : m * group + t;
        score_row(h, h / group, qb, n, scores.data());
        add_softmax(scores.data(), n, 1.0 / static_cast<double>(heads_per_row), probs);
      }
      for (int64_t c = 0; c < n; ++c)  // non-finite inputs: rank such blocks last
        if (!(probs[c] >= 0.0)) probs[c] = 0.0;
    }
  }
  return r;
}

}  // namespace

std::vector<double> pool_blocks(const TensorView& t, int64_t b, int64_t block) {
  const int64_t H = t.heads(), L = t.seq_len(), D = t.head_dim();
  const int64_t blocks = L / block + (L % block != 0 ? 1 : 0);
  std::vector<double> pooled(static_cast<size_t>(H * blocks * D), 0.0);
#pragma omp parallel for collapse(2) schedule(static) if (H * L * D >= kMinParallelWork)
  for (int64_t h = 0; h < H; ++h) {
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const int64_t l0 = blk * block, l1 = std::min(l0 + block, L);
      double* mean = pooled.data() + (h * blocks + blk) * D;
      add_rows(t, b, h, l0, l1, mean);
      const double inv = 1.0 / static_cast<double>(l1 - l0);
      for (int64_t d = 0; d < D; ++d) mean[d] *= inv;
    }
  }
  return pooled;
}

BlockProbs mean_pooled_probs(const std::vector<double>& pooled_q, const std::vector<double>& pooled_k,
                             const SelectParams& p, int64_t q_heads, int64_t kv_heads, int64_t head_dim,
                             bool per_query_head) {
  const int64_t D = head_dim, nqb = p.num_q_blocks, nkb = p.num_k_blocks;
  return accumulate_rows(p, q_heads, kv_heads, per_query_head, nkb * D,
                         [&](int64_t h, int64_t kvh, int64_t qb, int64_t n, double* scores) {
                           const double* pq = pooled_q.data() + (h * nqb + qb) * D;
                           const double* pk = pooled_k.data() + kvh * nkb * D;
                           for (int64_t c = 0; c < n; ++c) scores[c] = dot(pq, pk + c * D, D) * p.scale;
                         });
}

BlockProbs antidiagonal_probs(const TensorView& q, const TensorView& k, int64_t b, const SelectParams& p,
                              bool per_query_head) {
  const int64_t Hq = q.heads(), Hkv = k.heads(), Lq = p.q_len, Lk = p.k_len, D = q.head_dim();
  std::vector<float> qf(static_cast<size_t>(Hq * Lq * D)), kf(static_cast<size_t>(Hkv * Lk * D));
#pragma omp parallel for schedule(static) if ((Hq * Lq + Hkv * Lk) * D >= kMinParallelWork)
  for (int64_t h = 0; h < Hq + Hkv; ++h) {
    if (h < Hq)
      load_rows(q, b, h, 0, Lq, qf.data() + h * Lq * D);
    else
      load_rows(k, b, h - Hq, 0, Lk, kf.data() + (h - Hq) * Lk * D);
  }
  const int64_t S = p.stride, offset = Lk - Lq;
  const float scale = static_cast<float>(p.scale);
  const int64_t samples_per_row = p.block_q * Lk / S + 1;
  return accumulate_rows(p, Hq, Hkv, per_query_head, samples_per_row * D,
                         [&](int64_t h, int64_t kvh, int64_t qb, int64_t n, double* scores) {
                           const int64_t i0 = qb * p.block_q, i1 = std::min(i0 + p.block_q, Lq);
                           for (int64_t c = 0; c < n; ++c) {
                             const int64_t j0 = c * p.block_k, j1 = std::min(j0 + p.block_k, Lk);
                             double row_max = kNegInf, sum = 0.0;
                             int64_t count = 0;
                             for (int64_t i = i0; i < i1; ++i) {
                               const int64_t j_end = p.causal ? std::min(j1, i + offset + 1) : j1;
                               const float* qi = qf.data() + (h * Lq + i) * D;
                               for (int64_t j = j0 + (S - 1 - (i - i0) % S); j < j_end; j += S) {
                                 const double s = dot(qi, kf.data() + (kvh * Lk + j) * D, D) * scale;
                                 if (s > row_max) {
                                   sum = sum * std::exp(row_max - s);
                                   row_max = s;
                                 }
                                 sum += std::exp(s - row_max);
                                 ++count;
                               }
                             }
                             scores[c] =
                                 count == 0 ? kNegInf : row_max + std::log(sum / static_cast<double>(count));
                           }
                         });
}

}  // namespace spattn::select_detail
