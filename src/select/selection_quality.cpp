// select/selection_quality.cpp - how much of dense attention a selection keeps.
//
// For evenly spaced rows i = floor((s + 1/2) Lq / n) of every (batch, query
// head), the exact dense (or causal) softmax row is computed in fp64 from
// fp64 copies of the head's keys and values; recall is its mass on the pairs
// BlockMask::allowed keeps, and the output error compares `out` with the dense
// output over all sampled rows. OpenMP over (batch, head).
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "select/block_scores.hpp"
#include "select/load_rows.hpp"
#include "select/select_config.hpp"
#include "spattn/error.hpp"
#include "spattn/select.hpp"

namespace spattn {

SelectionQuality selection_quality(const TensorView& q, const TensorView& k, const TensorView& v,
                                   const TensorView& out, const std::vector<BlockMask>& masks, bool causal,
                                   double scale, int64_t rows_per_head) {
  const int64_t B = q.batch(), Hq = q.heads(), Hkv = k.heads(), Lq = q.seq_len(), Lk = k.seq_len();
  const int64_t D = q.head_dim(), group = Hq / Hkv;
  select_detail::validate_select_inputs(q, k);
  for (int axis = 0; axis < 4; ++axis) {
    require(out.shape[axis] == q.shape[axis], "out shape must equal q shape (axis ", axis, ": ",
            out.shape[axis], " vs ", q.shape[axis], ")");
    require(v.shape[axis] == k.shape[axis], "v shape must equal k shape (axis ", axis, ": ", v.shape[axis],
            " vs ", k.shape[axis], ")");
  }
  require(rows_per_head > 0, "rows_per_head must be > 0, got ", rows_per_head);
  require(static_cast<int64_t>(masks.size()) == B, "selection_quality needs one mask per batch element (", B,
          "), got ", masks.size());
  const int64_t n = std::min(rows_per_head, Lq);
  double err2 = 0.0, ref2 = 0.0, recall_sum = 0.0, recall_min = 1.0;
  int64_t rows = 0;
#pragma omp parallel for collapse(2) schedule(dynamic) reduction(+ : err2, ref2, recall_sum, rows) \
    reduction(min : recall_min) if (B * Hq * n * Lk * D >= select_detail::kMinParallelWork)
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < Hq; ++h) {
      std::vector<double> keys(static_cast<size_t>(Lk * D)), values(static_cast<size_t>(Lk * D));
      select_detail::load_rows(k, b, h / group, 0, Lk, keys.data());
      select_detail::load_rows(v, b, h / group, 0, Lk, values.data());
      std::vector<double> qi(static_cast<size_t>(D)), oi(static_cast<size_t>(D)),
          dense(static_cast<size_t>(D));
      std::vector<double> logits(static_cast<size_t>(Lk));
      for (int64_t s = 0; s < n; ++s) {
        const int64_t i = static_cast<int64_t>((static_cast<double>(s) + 0.5) * static_cast<double>(Lq) /
                                               static_cast<double>(n));
        const int64_t end = causal ? std::min(Lk, i + Lk - Lq + 1) : Lk;
        if (end <= 0) continue;
        select_detail::load_rows(q, b, h, i, i + 1, qi.data());
        select_detail::load_rows(out, b, h, i, i + 1, oi.data());
        double row_max = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < end; ++j) {
          double dot = 0.0;
          for (int64_t d = 0; d < D; ++d) dot += qi[d] * keys[j * D + d];
          logits[j] = dot * scale;
          row_max = std::max(row_max, logits[j]);
        }
        double total = 0.0, kept = 0.0;
        std::fill(dense.begin(), dense.end(), 0.0);
        for (int64_t j = 0; j < end; ++j) {
          const double w = std::exp(logits[j] - row_max);
          total += w;
          if (masks[b].allowed(h, Hq, i, j)) kept += w;
          for (int64_t d = 0; d < D; ++d) dense[d] += w * values[j * D + d];
        }
        for (int64_t d = 0; d < D; ++d) {
          dense[d] /= total;
          err2 += (oi[d] - dense[d]) * (oi[d] - dense[d]);
          ref2 += dense[d] * dense[d];
        }
        recall_sum += kept / total;
        recall_min = std::min(recall_min, kept / total);
        ++rows;
      }
    }
  }
  SelectionQuality r;
  r.rows = rows;
  r.recall_mean = rows > 0 ? recall_sum / static_cast<double>(rows) : 1.0;
  r.recall_min = rows > 0 ? recall_min : 1.0;
  r.output_error = ref2 > 0.0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
  return r;
}

}  // namespace spattn
