// cuda/plan/dilated_split.cpp - recognising a dilated term in a pattern and
// building the two masks of its split (see dilated_split.hpp).
#include "cuda/plan/dilated_split.hpp"

#include <algorithm>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

namespace spattn::cuda_detail {
namespace {

// Groups shorter than this gain too little from the permutation.
constexpr int64_t kMinGroup = 64;

bool same_term(const PatternTerm& x, const PatternTerm& y) {
  return x.kind == y.kind && x.causal == y.causal && x.a == y.a && x.b == y.b && x.c == y.c;
}

// The pattern of one table-free term through its builder, or nothing when the
// builder does not reproduce the term exactly.
std::optional<Pattern> rebuild_term(const PatternTerm& t) {
  const bool causal = t.causal != 0;
  std::optional<Pattern> p;
  switch (t.kind) {
    case TermKind::Dense: p = Pattern::dense(causal); break;
    case TermKind::SlidingWindow: p = Pattern::sliding_window(t.a, t.b, causal); break;
    case TermKind::BlockDiagonal: p = Pattern::block_diagonal(t.a, causal); break;
    case TermKind::Streaming: p = Pattern::streaming(t.a, t.b); break;
    case TermKind::Strided: p = Pattern::strided(t.a); break;
    case TermKind::Dilated: p = Pattern::dilated({t.a}, {t.b}, causal); break;
    default: return std::nullopt;
  }
  if (!same_term(p->exprs()[0].terms[0], t)) return std::nullopt;
  return p;
}

bool same_blocks(const BlockMask& a, const BlockMask& b) {
  return a.num_heads() == b.num_heads() && a.row_offsets() == b.row_offsets() &&
         a.kv_indices() == b.kv_indices() && a.kv_full() == b.kv_full();
}

// Whether every mask head of the rest has the same rows and full runs as head
// 0 (a dilated mask is per head; its rest, the other terms' blocks and the
// rows of ragged segments, usually is the same in every head).
bool heads_alike(const std::vector<int64_t>& offsets, const std::vector<int32_t>& indices,
                 const std::vector<uint8_t>& full, const std::vector<int32_t>& full_runs, int64_t heads,
                 int64_t rows) {
  const int64_t per_head = offsets[static_cast<size_t>(rows)];
  for (int64_t h = 1; h < heads; ++h) {
    const int64_t base = offsets[static_cast<size_t>(h * rows)];
    if (offsets[static_cast<size_t>((h + 1) * rows)] - base != per_head) return false;
    for (int64_t qb = 1; qb <= rows; ++qb)
      if (offsets[static_cast<size_t>(h * rows + qb)] - base != offsets[static_cast<size_t>(qb)]) return false;
    if (!std::equal(indices.begin(), indices.begin() + per_head, indices.begin() + base) ||
        !std::equal(full.begin(), full.begin() + per_head, full.begin() + base) ||
        !std::equal(full_runs.begin(), full_runs.begin() + 2 * rows, full_runs.begin() + 2 * h * rows))
      return false;
  }
  return true;
}

// The rest's blocks: those of `mask` kept by `other` (rows matched by head)
// or lying in a query block that reaches outside positions [p_lo, p_hi); all
// partial except, in the other rows, the longest run of consecutive full
// blocks (when `runs` is set), whose keys go to `full_runs`. One mask head
// where all of them are alike: its plan is then shared by every query head,
// as for a pattern without the dilated term.
BlockMask rest_mask(const BlockMask& mask, const BlockMask* other, int64_t p_lo, int64_t p_hi, bool runs,
                    std::vector<int32_t>& full_runs) {
  const int64_t heads = mask.num_heads(), rows = mask.num_q_blocks();
  const int64_t shift = mask.k_len() - mask.q_len();
  const BlockMaskView v = mask.view();
  std::vector<int64_t> offsets{0};
  std::vector<int32_t> indices;
  std::vector<uint8_t> full;
  full_runs.assign(static_cast<size_t>(2 * heads * rows), 0);
  for (int64_t h = 0; h < heads; ++h) {
    const int64_t other_row_base = other ? (other->num_heads() == 1 ? 0 : h) * rows : 0;
    for (int64_t qb = 0; qb < rows; ++qb) {
      const bool ragged = v.q_first(qb) + shift < p_lo || v.q_last(qb) + shift > p_hi;
      const int64_t r = v.row(h, qb);
      int64_t at = 0, end = 0;
      if (other) {
        at = other->row_offsets()[other_row_base + qb];
        end = other->row_offsets()[other_row_base + qb + 1];
      }
      const size_t row_begin = indices.size();
      for (int64_t e = v.row_begin(r); e < v.row_end(r); ++e) {
        const int32_t kb = mask.kv_indices()[e];
        while (at < end && other->kv_indices()[at] < kb) ++at;
        if (ragged || (at < end && other->kv_indices()[at] == kb)) {
          indices.push_back(kb);
          full.push_back(mask.kv_full()[e]);
        }
      }
      // Keep the longest run of consecutive full blocks full; the rest partial.
      size_t best = row_begin, best_len = 0;
      for (size_t e = row_begin; e < indices.size();) {
        size_t f = e;
        while (f < indices.size() && full[f] && indices[f] == indices[e] + static_cast<int32_t>(f - e)) ++f;
        if (f - e > best_len) {
          best = e;
          best_len = f - e;
        }
        e = f > e ? f : e + 1;
      }
      if (!runs || ragged) best_len = 0;
      for (size_t e = row_begin; e < indices.size(); ++e) full[e] = e >= best && e < best + best_len;
      if (best_len > 0) {
        full_runs[2 * r] = static_cast<int32_t>(v.k_first(indices[best]));
        full_runs[2 * r + 1] = static_cast<int32_t>(v.k_last(indices[best + best_len - 1]));
      }
      offsets.push_back(static_cast<int64_t>(indices.size()));
    }
  }
  int64_t kept_heads = heads;
  if (heads > 1 && heads_alike(offsets, indices, full, full_runs, heads, rows)) {
    kept_heads = 1;
    offsets.resize(static_cast<size_t>(rows + 1));
    indices.resize(static_cast<size_t>(offsets.back()));
    full.resize(indices.size());
    full_runs.resize(static_cast<size_t>(2 * rows));
  }
  return BlockMask(mask.q_len(), mask.k_len(), mask.block_q(), mask.block_k(), kept_heads, std::move(offsets),
                   std::move(indices), std::move(full), std::make_shared<Pattern>(*mask.pattern()));
}

}  // namespace

std::shared_ptr<const DilatedSplit> make_dilated_split(const BlockMask& mask, TileShape tile) {
  const Pattern* pattern = mask.pattern();
  // A framed pattern's segments lie in the larger problem's positions: no split.
  if (pattern == nullptr || pattern->num_exprs() != 1 || pattern->frame().on) return nullptr;
  const PatternExpr& e = pattern->exprs()[0];
  if (e.op != ExprOp::Or && e.num_terms > 1) return nullptr;

  // The dilated term with the longest groups.
  int32_t chosen = -1;
  for (int32_t n = 0; n < e.num_terms; ++n) {
    const PatternTerm& t = e.terms[n];
    if (t.kind != TermKind::Dilated || t.a % t.b != 0 || t.a / t.b < kMinGroup) continue;
    if (chosen < 0 || t.a / t.b > e.terms[chosen].a / e.terms[chosen].b) chosen = n;
  }
  if (chosen < 0) return nullptr;
  const PatternTerm& d = e.terms[chosen];
  const int64_t w = d.a, shift = mask.k_len() - mask.q_len();
  const int64_t first_segment = (std::max<int64_t>(shift, 0) + w - 1) / w, end_segment = mask.k_len() / w;
  if (end_segment <= first_segment) return nullptr;

  std::optional<Pattern> others;
  for (int32_t n = 0; n < e.num_terms; ++n) {
    if (n == chosen) continue;
    std::optional<Pattern> p = rebuild_term(e.terms[n]);
    if (!p) return nullptr;
    others = others ? Pattern::unite(*others, *p) : *p;
  }
  const MaskShape shape{mask.q_len(), mask.k_len(), mask.block_q(), mask.block_k(), mask.num_heads()};
  if (!mask.is_pattern_plan() && !same_blocks(mask, BlockMask::build(*pattern, shape))) return nullptr;

  auto split = std::make_shared<DilatedSplit>();
  split->segment = w;
  split->rate = d.b;
  split->group = w / d.b;
  split->causal = d.causal;
  split->term = chosen;
  split->first_position = first_segment * w;
  split->num_segments = end_segment - first_segment;
  split->query_heads = mask.num_heads();
  std::optional<BlockMask> other_mask;
  if (others) other_mask = BlockMask::build(*others, shape);
  const bool runs = mask.block_q() % tile.rows == 0 && mask.block_k() % tile.cols == 0 &&
                    mask.k_len() <= std::numeric_limits<int32_t>::max();
  split->rest = rest_mask(mask, other_mask ? &*other_mask : nullptr, first_segment * w, end_segment * w, runs,
                          split->full_runs);
  const int64_t n = split->num_segments * split->group;
  split->permuted = BlockMask::build(Pattern::block_diagonal(split->group, d.causal != 0), {n, n, 128, 128, 1});
  return split;
}

DilatedExclusion rest_exclusion(const DilatedSplit& split) {
  DilatedExclusion x;
  x.kind = Exclusion::Rest;
  x.causal = split.causal;
  x.segment = split.segment;
  x.rate = split.rate;
  x.p_lo = split.first_position;
  x.p_hi = split.first_position + split.num_segments * split.segment;
  x.term = split.term;
  return x;
}

DilatedExclusion permuted_exclusion(const DilatedSplit& split, int64_t q_len, int64_t k_len, const int32_t* runs) {
  DilatedExclusion x = rest_exclusion(split);
  x.kind = Exclusion::FullRuns;
  x.group = split.group;
  x.first_position = split.first_position;
  x.shift = k_len - q_len;
  x.block_q = split.rest.block_q();
  x.num_q_blocks = split.rest.num_q_blocks();
  x.runs = runs;
  x.runs_per_head = split.rest.num_heads() != 1;
  return x;
}

}  // namespace spattn::cuda_detail
