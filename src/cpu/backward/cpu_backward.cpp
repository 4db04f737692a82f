// cpu_backward.cpp - the fast CPU backward pass (spattn/backward.hpp).
//
// fp32 accumulation over tiles of at most kTileRows query rows and kTileKeys
// keys inside the mask's blocks, recomputing P from the forward's LSE (no
// score matrix is kept between tiles). OpenMP over tasks that each own what
// they write, so the result does not depend on the thread count:
//   1. delta_i = d_out_i . out_i - d_lse_i for every row;
//   2. dk, dv: a task per (batch, kv head, key tile); it walks the query
//      blocks that keep its key block (the key-major plan) for every query
//      head of its kv head, in a fixed order;
//   3. dq: a task per (batch, query head, query tile) over its row's kept
//      blocks (the forward lists).
// Where every thread has a (batch, kv head) of its own and their dq fits in
// scratch, 2 and 3 are one pass instead: a task per (batch, kv head) walks
// its key tiles as in 2 and also adds each tile's dS K to its query heads'
// dq, so P and dP are computed once per pair instead of twice.
// Pairs of partial blocks are tested with the pattern predicate.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include <omp.h>

#include "cpu/backward/cpu_backward.hpp"
#include "cpu/backward/tile_grad.hpp"
#include "cpu/fast/element_access.hpp"
#include "cpu/fast/partial_bits.hpp"
#include "pattern/key_major_plan.hpp"
#include "spattn/backward.hpp"

namespace spattn {
namespace {

using cpu_backward::kTileKeys;
using cpu_backward::kTileRows;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Rows [first, first + count) of (b, h) of t into dst (count x D floats).
void stage_rows(const TensorView& t, int64_t b, int64_t h, int64_t first, int64_t count, float* dst) {
  cpu_fast::with_loader(t, [&](const auto& load) {
    for (int64_t r = 0; r < count; ++r) {
      const int64_t base = t.offset(b, h, first + r, 0);
      for (int64_t d = 0; d < t.head_dim(); ++d) dst[r * t.head_dim() + d] = load(base + d * t.stride[3]);
    }
  });
}

// Rows [first, first + count) of (b, h) of t transposed into dst (D x kTileKeys).
void stage_transposed(const TensorView& t, int64_t b, int64_t h, int64_t first, int64_t count, float* dst) {
  cpu_fast::with_loader(t, [&](const auto& load) {
    for (int64_t r = 0; r < count; ++r) {
      const int64_t base = t.offset(b, h, first + r, 0);
      for (int64_t d = 0; d < t.head_dim(); ++d) dst[d * kTileKeys + r] = load(base + d * t.stride[3]);
    }
  });
}

// rows x D floats of src, times `factor`, into rows [first, first + count) of (b, h) of t.
void store_rows(const TensorView& t, int64_t b, int64_t h, int64_t first, int64_t count, const float* src,
                float factor) {
  cpu_fast::with_storer(t, [&](const auto& store) {
    for (int64_t r = 0; r < count; ++r) {
      const int64_t base = t.offset(b, h, first + r, 0);
      for (int64_t d = 0; d < t.head_dim(); ++d) store(base + d * t.stride[3], src[r * t.head_dim() + d] * factor);
    }
  });
}

bool all_finite(const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(x[i])) return false;
  return true;
}

// Are the first `keys` columns of a transposed tile (D x kTileKeys) finite?
bool transposed_finite(const float* t, int64_t keys, int64_t head_dim) {
  for (int64_t d = 0; d < head_dim; ++d)
    if (!all_finite(t + d * kTileKeys, keys)) return false;
  return true;
}

enum class TileKeep { None, Some, All };

// One tile's inputs: query-side rows and key-side keys, staged as fp32.
struct TileScratch {
  std::vector<float> q, d_out, lse, delta;  // query side
  std::vector<float> k, k_t, v_t;           // key side
  std::vector<float> p, ds, acc_a, acc_b;
  std::vector<uint64_t> allowed, key_rows;  // per row: its allowed keys; per key: the rows it is allowed for
  bool query_finite = true, keys_finite = true;  // of the rows and keys staged now
  // The query side of the tile being computed: this scratch's own rows
  // (stage_query_side), or rows of a KvHeadRows (one_pass).
  const float *q_rows = nullptr, *d_out_rows = nullptr, *lse_rows = nullptr, *delta_rows = nullptr;

  explicit TileScratch(int64_t D)
      : q(kTileRows * D), d_out(kTileRows * D), lse(kTileRows), delta(kTileRows), k(kTileKeys * D),
        k_t(D * kTileKeys), v_t(D * kTileKeys), p(kTileRows * kTileKeys), ds(kTileRows * kTileKeys),
        acc_a(std::max(kTileRows, kTileKeys) * D), acc_b(kTileKeys * D), allowed(kTileRows), key_rows(kTileKeys) {}
};

struct Problem {
  const TensorView &q, &k, &v, &lse, &d_out;
  const AttentionGrads& grads;
  const BlockMaskView plan;
  const Pattern* pattern;
  float scale;
  const std::vector<float>& delta;  // (B, Hq, Lq)
  const cpu_backward::TileGradOps& fast = cpu_backward::fast_tile_grad(q.head_dim());
  const cpu_backward::TileGradOps& plain = cpu_backward::plain_tile_grad();

  // The kernels of the staged tile: the fast ones unless it holds a non-finite value.
  const cpu_backward::TileGradOps& ops(const TileScratch& s) const {
    return s.query_finite && s.keys_finite ? fast : plain;
  }

  int64_t query_heads() const { return q.heads(); }
  int64_t group() const { return q.heads() / k.heads(); }
  int64_t offset() const { return k.seq_len() - q.seq_len(); }

  // Query rows [i0, i0 + rows) of (b, h) into q_to, d_out_to (rows x D)
  // and lse_to, delta_to (rows).
  void stage_query_rows(int64_t b, int64_t h, int64_t i0, int64_t rows, float* q_to, float* d_out_to, float* lse_to,
                        float* delta_to) const {
    stage_rows(q, b, h, i0, rows, q_to);
    stage_rows(d_out, b, h, i0, rows, d_out_to);
    for (int64_t r = 0; r < rows; ++r) {
      lse_to[r] = static_cast<float>(lse.load(b, h, i0 + r, 0));
      delta_to[r] = delta[(b * q.heads() + h) * q.seq_len() + i0 + r];
    }
  }
  // Are the staged q, d_out (rows x D) and delta (rows) finite?
  bool query_rows_finite(const float* q_rows, const float* d_out_rows, const float* delta_rows, int64_t rows) const {
    return all_finite(q_rows, rows * q.head_dim()) && all_finite(d_out_rows, rows * q.head_dim()) &&
           all_finite(delta_rows, rows);
  }
  // Query rows [i0, i0 + rows) of (b, h) into the tile scratch.
  void stage_query_side(int64_t b, int64_t h, int64_t i0, int64_t rows, TileScratch& s) const {
    stage_query_rows(b, h, i0, rows, s.q.data(), s.d_out.data(), s.lse.data(), s.delta.data());
    s.query_finite = query_rows_finite(s.q.data(), s.d_out.data(), s.delta.data(), rows);
    s.q_rows = s.q.data();
    s.d_out_rows = s.d_out.data();
    s.lse_rows = s.lse.data();
    s.delta_rows = s.delta.data();
  }
  // Keys [j0, j0 + keys) of (b, kvh): transposed keys and values, and the keys as rows when `rows_too`.
  void stage_key_side(int64_t b, int64_t kvh, int64_t j0, int64_t keys, bool rows_too, TileScratch& s) const {
    stage_transposed(k, b, kvh, j0, keys, s.k_t.data());
    stage_transposed(v, b, kvh, j0, keys, s.v_t.data());
    if (rows_too) stage_rows(k, b, kvh, j0, keys, s.k.data());
    s.keys_finite = transposed_finite(s.k_t.data(), keys, k.head_dim()) &&
                    transposed_finite(s.v_t.data(), keys, k.head_dim());
  }
  // Which pairs of a tile (rows from i0, keys from j0) of head h are kept:
  // all (a full block's tile, or a partial block's tile every row keeps
  // whole), none (skipped), or some, with a key mask per row in s.allowed
  // from the per-key row masks of the forward's closed forms
  // (cpu/fast/partial_bits.hpp).
  TileKeep tile_keep(bool full, int64_t h, int64_t i0, int64_t rows, int64_t j0, int64_t keys, TileScratch& s) const {
    if (full) return TileKeep::All;
    const cpu_fast::TileMaskContext context{&pattern->expr_for_head(h, q.heads()), h, i0, rows, offset()};
    cpu_fast::tile_allowed_bits(&context, j0, keys, s.key_rows.data());
    std::fill(s.allowed.begin(), s.allowed.begin() + rows, uint64_t{0});
    for (int64_t c = 0; c < keys; ++c)
      for (uint64_t m = s.key_rows[c]; m != 0; m &= m - 1) s.allowed[__builtin_ctzll(m)] |= uint64_t{1} << c;
    const uint64_t every_key = keys >= 64 ? ~uint64_t{0} : (uint64_t{1} << keys) - 1;
    bool some = false, all = true;
    for (int64_t r = 0; r < rows; ++r) {
      some |= s.allowed[r] != 0;
      all &= s.allowed[r] == every_key;
    }
    return all ? TileKeep::All : (some ? TileKeep::Some : TileKeep::None);
  }
  void probabilities(TileKeep keep, int64_t rows, int64_t keys, TileScratch& s) const {
    const uint64_t* allowed = keep == TileKeep::Some ? s.allowed.data() : nullptr;
    ops(s).probabilities(s.q_rows, s.d_out_rows, s.k_t.data(), s.v_t.data(), s.lse_rows, s.delta_rows, allowed,
                         rows, keys, q.head_dim(), scale, s.p.data(), s.ds.data());
  }
};

std::vector<float> row_deltas(const TensorView& out, const TensorView& d_out, const TensorView* d_lse) {
  const int64_t B = out.batch(), H = out.heads(), L = out.seq_len(), D = out.head_dim();
  std::vector<float> delta(static_cast<size_t>(B * H * L));
#pragma omp parallel
  {
    std::vector<float> o(static_cast<size_t>(D)), g(static_cast<size_t>(D));
#pragma omp for collapse(2)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < L; ++i) {
          stage_rows(out, b, h, i, 1, o.data());
          stage_rows(d_out, b, h, i, 1, g.data());
          double sum = 0.0;
          for (int64_t d = 0; d < D; ++d) sum += static_cast<double>(o[d]) * g[d];
          delta[(b * H + h) * L + i] = static_cast<float>(sum - (d_lse ? d_lse->load(b, h, i, 0) : 0.0));
        }
  }
  return delta;
}

// The query side and the dq of every query head of one (batch, kv head),
// staged once for the one-pass walk: group x Lq rows each (and kTileRows
// rows of margin, which the register tiles may read and add 0 to).
struct KvHeadRows {
  std::vector<float> q, d_out, lse, delta, dq;
  std::vector<uint8_t> finite;  // per row: its q, d_out and delta are finite

  explicit KvHeadRows(const Problem& pr)
      : q(size(pr, pr.q.head_dim())), d_out(q.size()), lse(size(pr, 1)), delta(lse.size()), dq(q.size()),
        finite(lse.size()) {}
  static size_t size(const Problem& pr, int64_t width) {
    return static_cast<size_t>((pr.group() * pr.q.seq_len() + kTileRows) * width);
  }

  void stage(const Problem& pr, int64_t b, int64_t kvh) {
    const int64_t Lq = pr.q.seq_len(), D = pr.q.head_dim();
    for (int64_t local = 0; local < pr.group(); ++local) {
      const int64_t first = local * Lq;
      pr.stage_query_rows(b, kvh * pr.group() + local, 0, Lq, q.data() + first * D, d_out.data() + first * D,
                          lse.data() + first, delta.data() + first);
      for (int64_t i = first; i < first + Lq; ++i)
        finite[i] = pr.query_rows_finite(q.data() + i * D, d_out.data() + i * D, delta.data() + i, 1);
    }
    std::fill(dq.begin(), dq.end(), 0.0f);
  }

  // Points `s` at rows [i0, i0 + rows) of query head `local` of the kv head.
  void point(const Problem& pr, int64_t local, int64_t i0, int64_t rows, TileScratch& s) const {
    const int64_t first = local * pr.q.seq_len() + i0, D = pr.q.head_dim();
    s.q_rows = q.data() + first * D;
    s.d_out_rows = d_out.data() + first * D;
    s.lse_rows = lse.data() + first;
    s.delta_rows = delta.data() + first;
    s.query_finite = std::all_of(finite.begin() + first, finite.begin() + first + rows, [](uint8_t f) { return f; });
  }
  float* dq_rows(const Problem& pr, int64_t local, int64_t i0) {
    return dq.data() + (local * pr.q.seq_len() + i0) * pr.q.head_dim();
  }
};

// dk and dv of keys [j0, j0 + keys) of (b, kvh), all in key block kb; with
// `heads` (the one-pass walk) the query side comes from there, and dq +=
// dS K goes there for every row tile the keys meet.
void key_tile(const Problem& pr, const KeyMajorPlan& cols, int64_t b, int64_t kvh, int64_t kb, int64_t j0,
              int64_t keys, TileScratch& s, KvHeadRows* heads = nullptr) {
  const int64_t D = pr.q.head_dim();
  pr.stage_key_side(b, kvh, j0, keys, heads != nullptr, s);
  float* dk = s.acc_a.data();
  float* dv = s.acc_b.data();
  std::fill(dk, dk + keys * D, 0.0f);
  std::fill(dv, dv + keys * D, 0.0f);
  for (int64_t h = kvh * pr.group(); h < (kvh + 1) * pr.group(); ++h) {
    const int64_t c = cols.col(pr.plan.mask_head(h, pr.query_heads()), kb);
    for (int64_t e = cols.col_begin(c); e < cols.col_end(c); ++e) {
      const int64_t qb = cols.q_indices[e];
      for (int64_t i0 = pr.plan.q_first(qb); i0 < pr.plan.q_last(qb); i0 += kTileRows) {
        const int64_t rows = std::min(kTileRows, pr.plan.q_last(qb) - i0);
        const TileKeep keep = pr.tile_keep(cols.q_full[e] != 0, h, i0, rows, j0, keys, s);
        if (keep == TileKeep::None) continue;
        if (heads)
          heads->point(pr, h - kvh * pr.group(), i0, rows, s);
        else
          pr.stage_query_side(b, h, i0, rows, s);
        pr.probabilities(keep, rows, keys, s);
        pr.ops(s).accumulate_keys(s.p.data(), s.d_out_rows, rows, keys, D, dv);
        pr.ops(s).accumulate_keys(s.ds.data(), s.q_rows, rows, keys, D, dk);
        if (heads)
          pr.ops(s).accumulate_rows(s.ds.data(), s.k.data(), rows, keys, D,
                                    heads->dq_rows(pr, h - kvh * pr.group(), i0));
      }
    }
  }
  store_rows(pr.grads.dk, b, kvh, j0, keys, dk, pr.scale);
  store_rows(pr.grads.dv, b, kvh, j0, keys, dv, 1.0f);
}

// dq of rows [i0, i0 + rows) of (b, h), all in query block qb.
void query_tile(const Problem& pr, int64_t b, int64_t h, int64_t qb, int64_t i0, int64_t rows, TileScratch& s) {
  const int64_t D = pr.q.head_dim(), kvh = h / pr.group();
  pr.stage_query_side(b, h, i0, rows, s);
  float* dq = s.acc_a.data();
  std::fill(dq, dq + rows * D, 0.0f);
  const int64_t r = pr.plan.row(pr.plan.mask_head(h, pr.query_heads()), qb);
  for (int64_t at = pr.plan.row_begin(r); at < pr.plan.row_end(r); ++at) {
    const int64_t kb = pr.plan.kv_indices[at];
    for (int64_t j0 = pr.plan.k_first(kb); j0 < pr.plan.k_last(kb); j0 += kTileKeys) {
      const int64_t keys = std::min(kTileKeys, pr.plan.k_last(kb) - j0);
      const TileKeep keep = pr.tile_keep(pr.plan.kv_full[at] != 0, h, i0, rows, j0, keys, s);
      if (keep == TileKeep::None) continue;
      pr.stage_key_side(b, kvh, j0, keys, true, s);
      pr.probabilities(keep, rows, keys, s);
      pr.ops(s).accumulate_rows(s.ds.data(), s.k.data(), rows, keys, D, dq);
    }
  }
  store_rows(pr.grads.dq, b, h, i0, rows, dq, pr.scale);
}

// fn(b, head, block, first, count, scratch) on every tile of at most `tile`
// items inside each of `blocks` blocks (of block_size items, [first(block),
// last(block))) of each (batch, head): one OpenMP task per tile, a scratch per thread.
template <typename First, typename Last, typename Fn>
void parallel_tiles(int64_t B, int64_t heads, int64_t blocks, int64_t block_size, int64_t tile, int64_t head_dim,
                    const First& first, const Last& last, const Fn& fn) {
  const int64_t tiles_per_block = ceil_div(block_size, tile);
  const int64_t tasks = B * heads * blocks * tiles_per_block;
#pragma omp parallel
  {
    TileScratch s(head_dim);
#pragma omp for schedule(dynamic)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t block = task / tiles_per_block % blocks;
      const int64_t head = task / (tiles_per_block * blocks) % heads;
      const int64_t b = task / (tiles_per_block * blocks * heads);
      const int64_t start = first(block) + task % tiles_per_block * tile;
      if (start < last(block)) fn(b, head, block, start, std::min(tile, last(block) - start), s);
    }
  }
}

// Scratch of the one-pass walk, all threads together, up to which it is taken.
constexpr int64_t kOnePassScratchBytes = int64_t{1} << 30;

// Does the call take one pass (every (batch, kv head) a task that also
// accumulates its query heads' dq, 5 tile products per pair instead of 7)?
// Where there are tasks for every thread and their dq scratch fits.
bool one_pass_fits(const Problem& pr, int64_t threads) {
  const int64_t tasks = pr.q.batch() * pr.k.heads();
  const int64_t floats = 3 * (pr.group() * pr.q.seq_len() + kTileRows) * pr.q.head_dim();  // q, d_out, dq
  return tasks >= threads && floats <= kOnePassScratchBytes / 4 / threads;
}

// The one-pass walk: a task per (batch, kv head) stages its query heads'
// rows, walks its key tiles in order (key_tile with them), then stores their dq.
void one_pass(const Problem& pr, const KeyMajorPlan& cols) {
  const BlockMaskView& plan = pr.plan;
  const int64_t Hkv = pr.k.heads(), Lq = pr.q.seq_len(), D = pr.q.head_dim(), group = pr.group();
  const int64_t tasks = pr.q.batch() * Hkv;
#pragma omp parallel
  {
    TileScratch s(D);
    KvHeadRows heads(pr);
#pragma omp for schedule(dynamic)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t b = task / Hkv, kvh = task % Hkv;
      heads.stage(pr, b, kvh);
      for (int64_t kb = 0; kb < plan.num_k_blocks; ++kb)
        for (int64_t j0 = plan.k_first(kb); j0 < plan.k_last(kb); j0 += kTileKeys)
          key_tile(pr, cols, b, kvh, kb, j0, std::min(kTileKeys, plan.k_last(kb) - j0), s, &heads);
      for (int64_t local = 0; local < group; ++local)
        store_rows(pr.grads.dq, b, kvh * group + local, 0, Lq, heads.dq_rows(pr, local, 0), pr.scale);
    }
  }
}

}  // namespace

namespace cpu_backward {

void run_backward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                  const TensorView& lse, const TensorView& d_out, const AttentionGrads& grads, const BlockMask& mask,
                  const KeyMajorPlan& cols, double scale, const TensorView* d_lse) {
  const std::vector<float> delta = row_deltas(out, d_out, d_lse);
  const Problem pr{q, k, v, lse, d_out, grads, mask.view(), mask.pattern(), static_cast<float>(scale), delta};
  const BlockMaskView& plan = pr.plan;
  const int64_t B = q.batch(), Hq = q.heads(), Hkv = k.heads(), D = q.head_dim();
  if (one_pass_fits(pr, omp_get_max_threads())) {
    one_pass(pr, cols);
    return;
  }
  parallel_tiles(B, Hkv, plan.num_k_blocks, plan.block_k, kTileKeys, D,
                 [&](int64_t kb) { return plan.k_first(kb); }, [&](int64_t kb) { return plan.k_last(kb); },
                 [&](int64_t b, int64_t kvh, int64_t kb, int64_t j0, int64_t keys, TileScratch& s) {
                   key_tile(pr, cols, b, kvh, kb, j0, keys, s);
                 });
  parallel_tiles(B, Hq, plan.num_q_blocks, plan.block_q, kTileRows, D,
                 [&](int64_t qb) { return plan.q_first(qb); }, [&](int64_t qb) { return plan.q_last(qb); },
                 [&](int64_t b, int64_t h, int64_t qb, int64_t i0, int64_t rows, TileScratch& s) {
                   query_tile(pr, b, h, qb, i0, rows, s);
                 });
}

}  // namespace cpu_backward

void cpu_attention_backward(const TensorView& q, const TensorView& k, const TensorView& v,
                            const TensorView& out, const TensorView& lse, const TensorView& d_out,
                            const AttentionGrads& grads, const BlockMask& mask, double scale,
                            const TensorView* d_lse) {
  cpu_backward::run_backward(q, k, v, out, lse, d_out, grads, mask, key_major_plan(mask.view()), scale, d_lse);
}

}  // namespace spattn
