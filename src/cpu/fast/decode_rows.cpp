// cpu/fast/decode_rows.cpp - few query rows over many keys on the CPU (see decode_rows.hpp).
#include "cpu/fast/decode_rows.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "spattn/pattern_terms.hpp"

namespace spattn::cpu_fast {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// One query row's online softmax: running max, sum of weights, fp32
// accumulator, and whether a NaN or +inf score poisoned it.
struct RowState {
  int64_t head = 0, row = 0;
  float max = kNegInf, sum = 0.0f;
  bool poisoned = false;
};

// Row `row` of head h of `t` (batch b) as fp32 into `to` (D floats).
void load_row(const TensorView& t, int64_t b, int64_t h, int64_t row, float* to) {
  const int64_t D = t.head_dim();
  if (t.dtype == DType::F32 && t.stride[3] == 1) {
    std::copy_n(static_cast<const float*>(t.data) + t.offset(b, h, row, 0), D, to);
    return;
  }
  for (int64_t d = 0; d < D; ++d) to[d] = static_cast<float>(t.load(b, h, row, d));
}

// Keys (or values) [first, first + count) of sequence b, kv head g, as fp32 rows into `to`.
void load_keys(const KeyRows& keys, const TensorView& t, int64_t b, int64_t g, int64_t first, int64_t count,
               float* to) {
  const int64_t D = t.head_dim();
  for (int64_t r = 0; r < count; ++r) {
    const int64_t j = first + r;
    if (keys.page_table == nullptr) {
      load_row(t, b, g, j, to + r * D);
      continue;
    }
    const int64_t page = keys.page_table[b * keys.max_pages + j / keys.page_size];
    load_row(t, page, g, j % keys.page_size, to + r * D);
  }
}

float dot(const float* a, const float* b, int64_t n) {
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int64_t d = 0; d < n; ++d) s += a[d] * b[d];
  return s;
}

// Scratch of one thread: a key block and a value block in fp32, the scores
// of the rows over a block, and the rows' queries and accumulators.
struct Scratch {
  std::vector<float> keys, values, scores, queries, acc;
};

// The rows of kv head g of batch b that share mask row (mask_head, query
// block): their queries (pre-scaled), over the row's kept key blocks.
void run_rows(const TensorView& q, const KeyRows& kv, const TensorView& out, const TensorView* lse,
              const BlockMaskView& view, const Pattern* pattern, int64_t b, int64_t g, std::vector<RowState>& rows,
              int64_t mask_row, float scale, Scratch& s) {
  const int64_t D = q.head_dim(), Hq = q.heads(), n = static_cast<int64_t>(rows.size());
  const int64_t shift = view.k_len - view.q_len;
  s.queries.resize(static_cast<size_t>(n * D));
  s.acc.assign(static_cast<size_t>(n * D), 0.0f);
  for (int64_t r = 0; r < n; ++r) {
    load_row(q, b, rows[r].head, rows[r].row, s.queries.data() + r * D);
    for (int64_t d = 0; d < D; ++d) s.queries[r * D + d] *= scale;
  }
  for (int64_t e = view.row_begin(mask_row); e < view.row_end(mask_row); ++e) {
    const int64_t kb = view.kv_indices[e], j0 = view.k_first(kb), keys = view.k_last(kb) - j0;
    const bool full = view.kv_full[e] != 0;
    s.keys.resize(static_cast<size_t>(keys * D));
    s.values.resize(static_cast<size_t>(keys * D));
    s.scores.resize(static_cast<size_t>(n * keys));
    load_keys(kv, kv.k, b, g, j0, keys, s.keys.data());
    bool values_loaded = false;
    for (int64_t r = 0; r < n; ++r) {
      RowState& row = rows[r];
      const PatternExpr* expr = full || pattern == nullptr ? nullptr : &pattern->expr_for_head(row.head, Hq);
      float* scores = s.scores.data() + r * keys;
      float block_max = kNegInf;
      for (int64_t j = 0; j < keys; ++j) {
        if (expr && !expr_allows(*expr, row.head, row.row, row.row + shift, j0 + j)) {
          scores[j] = kNegInf;  // masked: weighs 0 and is never read
          continue;
        }
        const float x = dot(s.queries.data() + r * D, s.keys.data() + j * D, D);
        if (std::isnan(x) || x == std::numeric_limits<float>::infinity()) row.poisoned = true;
        scores[j] = x;
        if (x > block_max) block_max = x;
      }
      if (row.poisoned || block_max == kNegInf) continue;  // nothing of weight above 0 in this block
      if (!values_loaded) {
        load_keys(kv, kv.v, b, g, j0, keys, s.values.data());
        values_loaded = true;
      }
      float* acc = s.acc.data() + r * D;
      if (block_max > row.max) {
        const float rescale = std::exp(row.max - block_max);  // 0 while the row had no weight
        row.sum *= rescale;
        for (int64_t d = 0; d < D; ++d) acc[d] *= rescale;
        row.max = block_max;
      }
      for (int64_t j = 0; j < keys; ++j) {
        if (scores[j] == kNegInf) continue;
        const float p = std::exp(scores[j] - row.max);
        row.sum += p;
        const float* value = s.values.data() + j * D;
#pragma omp simd
        for (int64_t d = 0; d < D; ++d) acc[d] += p * value[d];
      }
    }
  }
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int64_t r = 0; r < n; ++r) {
    const RowState& row = rows[r];
    const bool empty = !row.poisoned && row.sum == 0.0f;
    for (int64_t d = 0; d < D; ++d) {
      const float o = row.poisoned ? nan : (empty ? 0.0f : s.acc[r * D + d] / row.sum);
      out.store(b, row.head, row.row, d, o);
    }
    if (lse)
      lse->store(b, row.head, row.row, 0, row.poisoned ? nan : (empty ? kNegInf : row.max + std::log(row.sum)));
  }
}

}  // namespace

bool decode_rows_fit(const CallShape& shape) {
  if (shape.kv_heads <= 0 || shape.q_len < 1) return false;
  return shape.q_len * (shape.q_heads / shape.kv_heads) <= kDecodeRows;
}

void run_decode_rows(const TensorView& q, const KeyRows& keys, const TensorView& out, const BlockMask& mask,
                     double scale, const TensorView* lse) {
  const BlockMaskView view = mask.view();
  const Pattern* pattern = mask.pattern();
  const int64_t B = q.batch(), Hq = q.heads(), Hkv = keys.k.heads(), group = Hq / Hkv, Lq = q.seq_len();
  const float row_scale = static_cast<float>(scale);
#pragma omp parallel
  {
    Scratch s;
    std::vector<RowState> rows;
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < B * Hkv; ++task) {
      const int64_t b = task / Hkv, g = task % Hkv;
      // The kv head's rows, grouped by the mask row they read (mask head, query block).
      std::vector<std::pair<int64_t, RowState>> keyed;
      for (int64_t h = g * group; h < (g + 1) * group; ++h)
        for (int64_t i = 0; i < Lq; ++i) {
          RowState row;
          row.head = h;
          row.row = i;
          keyed.emplace_back(view.row(view.mask_head(h, Hq), i / view.block_q), row);
        }
      std::stable_sort(keyed.begin(), keyed.end(),
                       [](const auto& a, const auto& c) { return a.first < c.first; });
      for (size_t at = 0; at < keyed.size();) {
        size_t end = at;
        rows.clear();
        while (end < keyed.size() && keyed[end].first == keyed[at].first) rows.push_back(keyed[end++].second);
        run_rows(q, keys, out, lse, view, pattern, b, g, rows, keyed[at].first, row_scale, s);
        at = end;
      }
    }
  }
}

}  // namespace spattn::cpu_fast
