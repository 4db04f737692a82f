// tests/cpp/test_pattern_kinds.cpp - conformance of every pattern kind: each
// form the library derives from a term must agree, pair by pair, with the
// term's predicate (term_allows, and expr_allows for expressions).
//
// The derived forms: row counts (term_count_row, expr_count_row), the key
// intervals the host builder starts from (pattern/key_intervals.hpp, a
// superset), block classification (pattern/block_classify.hpp: the closed
// forms where they decide, the exact classification always), the CPU lane
// bits of a tile (cpu/fast/partial_bits.hpp) and the GPU row words
// (cuda/common/row_key_bits.hpp, host/device code run here on the host). For
// every TermKind, terms are drawn through the public builders with random
// parameters (edge values included: 0, 1, lengths +-1, "unbounded"
// extents), causal or not, over short, odd and long sequences (positions past
// 2^32), Lq != Lk both ways, several heads where the kind reads the head, and
// block sizes from 1 to 256; rows and keys are probed where the term's
// boundaries lie. A second suite does the same for unions and intersections
// of random kinds.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "cpu/fast/partial_bits.hpp"
#include "cuda/common/row_key_bits.hpp"
#include "pattern/block_classify.hpp"
#include "pattern/key_intervals.hpp"
#include "pattern_cases.hpp"
#include "spattn/pattern.hpp"

namespace spattn::testing {
namespace {

constexpr TermKind kKinds[] = {TermKind::Dense,     TermKind::BlockDiagonal, TermKind::SlidingWindow,
                               TermKind::Streaming, TermKind::Strided,       TermKind::Fixed,
                               TermKind::Dilated,   TermKind::BigBird,       TermKind::Longformer,
                               TermKind::Custom};
constexpr int kNumKinds = static_cast<int>(sizeof(kKinds) / sizeof(kKinds[0]));
static_assert(static_cast<int>(TermKind::Custom) + 1 == kNumKinds, "every TermKind is drawn here");

// The kinds whose rows have a span form on the GPU (row_key_bits.hpp); the
// others are tested key by key there.
bool has_span_form(TermKind kind) {
  return kind != TermKind::Fixed && kind != TermKind::BigBird && kind != TermKind::Longformer;
}

constexpr int64_t kUnbounded = std::numeric_limits<int64_t>::max();

// ---- drawing terms ----------------------------------------------------------

enum class Lengths { Short, Odd, Long, Mixed };

struct Shape {
  int64_t q_len = 1, k_len = 1, heads = 1;
};

int64_t draw_length(std::mt19937_64& rng, Lengths lengths) {
  switch (lengths) {
    case Lengths::Short: return draw(rng, 1, 40);
    case Lengths::Odd: return 2 * draw(rng, 0, 700) + 1;
    default: return draw(rng, int64_t{1} << 17, int64_t{1} << 41);
  }
}

Shape draw_shape(std::mt19937_64& rng, Lengths lengths) {
  Shape s;
  if (lengths == Lengths::Mixed) {  // one long sequence, one short: rows far before or after the keys
    s.q_len = draw_length(rng, Lengths::Long);
    s.k_len = draw_length(rng, Lengths::Short);
    if (draw(rng, 0, 1)) std::swap(s.q_len, s.k_len);
  } else {
    s.q_len = draw_length(rng, lengths);
    s.k_len = draw(rng, 0, 2) ? draw_length(rng, lengths) : s.q_len;
  }
  s.heads = draw(rng, 1, 6);
  return s;
}

// A window-like extent >= `least` for sequences of length L: the least
// values, small ones, ones on the scale of L, L itself +- 2, or unbounded
// (`unbounded` is the largest value the builder takes unclamped).
int64_t draw_extent(std::mt19937_64& rng, int64_t L, int64_t least, int64_t unbounded) {
  switch (draw(rng, 0, 6)) {
    case 0: return least + draw(rng, 0, 2);
    case 1: return draw(rng, least, least + 16);
    case 2: return draw(rng, least, std::max(least, L / 16));
    case 3:
    case 4: return draw(rng, least, std::max(least, L + 2));
    case 5: return std::max(least, L + draw(rng, -2, 2));
    default: return unbounded;
  }
}

// Sorted distinct random values in [lo, hi], about `count` of them.
std::vector<int64_t> draw_sorted_set(std::mt19937_64& rng, int64_t count, int64_t lo, int64_t hi) {
  std::vector<int64_t> v;
  for (int64_t n = 0; n < count; ++n) v.push_back(draw(rng, lo, hi));
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

// Longformer's global tokens: a few anywhere, a run near the start and a
// cluster around `focus` (where the probes look most).
std::vector<int64_t> draw_global_tokens(std::mt19937_64& rng, int64_t k_len, int64_t focus) {
  std::vector<int64_t> tokens = draw_sorted_set(rng, draw(rng, 0, 3), 0, k_len - 1);
  for (int64_t n = draw(rng, 0, 3); n > 0; --n) tokens.push_back(std::min(k_len - 1, draw(rng, 0, 4)));
  for (int64_t n = draw(rng, 0, 6); n > 0; --n)
    tokens.push_back(std::clamp<int64_t>(focus + draw(rng, -80, 80), 0, k_len - 1));
  std::sort(tokens.begin(), tokens.end());
  tokens.erase(std::unique(tokens.begin(), tokens.end()), tokens.end());
  return tokens;
}

// A custom block mask of random density in BSR form, on blocks of at least
// L / 600 so that long sequences keep small tables.
Pattern draw_custom(std::mt19937_64& rng, const Shape& s, bool causal) {
  const int64_t block_q = std::max(draw(rng, 1, 40), pattern_math::ceil_div(s.q_len, 600));
  const int64_t block_k = std::max(draw(rng, 1, 40), pattern_math::ceil_div(s.k_len, 600));
  const int64_t rows = pattern_math::ceil_div(s.q_len, block_q), cols = pattern_math::ceil_div(s.k_len, block_k);
  const int64_t heads = draw(rng, 0, 1) ? s.heads : 1;
  const double density = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
  std::bernoulli_distribution keep(density);
  std::vector<int64_t> offsets{0};
  std::vector<int32_t> indices;
  for (int64_t r = 0; r < heads * rows; ++r) {
    for (int64_t c = 0; c < cols; ++c)
      if (keep(rng)) indices.push_back(static_cast<int32_t>(c));
    offsets.push_back(static_cast<int64_t>(indices.size()));
  }
  return Pattern::custom_bsr(std::move(offsets), std::move(indices), heads, rows, cols, block_q, block_k, causal);
}

// One term of `kind` through its public builder, with random parameters for
// shape `s`; `focus` is a key position the probes favour.
Pattern draw_term(std::mt19937_64& rng, TermKind kind, const Shape& s, int64_t focus) {
  const int64_t L = std::max(s.q_len, s.k_len);
  const int64_t big = int64_t{1} << 62;  // unbounded for parameters the builders do not clamp
  const bool causal = draw(rng, 0, 1) == 1;
  switch (kind) {
    case TermKind::Dense: return Pattern::dense(causal);
    case TermKind::BlockDiagonal: return Pattern::block_diagonal(draw_extent(rng, L, 1, big), causal);
    case TermKind::SlidingWindow:
      if (draw(rng, 0, 3) == 0) return Pattern::sliding_window(draw_extent(rng, L, 1, kUnbounded));
      return Pattern::sliding_window(draw_extent(rng, L, 0, kUnbounded), draw_extent(rng, L, 0, kUnbounded),
                                     causal);
    case TermKind::Streaming:
      return Pattern::streaming(draw_extent(rng, L, 0, kUnbounded), draw_extent(rng, L, 1, kUnbounded));
    case TermKind::Strided: return Pattern::strided(draw_extent(rng, L, 1, kUnbounded));
    case TermKind::Fixed: {
      const int64_t stride = draw_extent(rng, L, 1, kUnbounded);
      const int64_t summary = draw(rng, 0, 3) == 0 ? draw(rng, 0, 1) * stride : draw(rng, 0, std::min(stride, L));
      return Pattern::fixed(stride, summary);
    }
    case TermKind::Dilated: {
      const int64_t rate = draw(rng, 0, 5) == 0 ? draw_extent(rng, L, 1, big) : draw(rng, 1, 6);
      return Pattern::dilated({draw_extent(rng, L, 1, big)}, {rate}, causal);
    }
    case TermKind::BigBird: {
      const int64_t least_block = pattern_math::ceil_div(s.k_len, 3000);  // at most 3000 blocks
      const int64_t block = std::max(least_block, draw_extent(rng, s.k_len / 4, 1, s.k_len + 5));
      const int64_t blocks = pattern_math::ceil_div(s.k_len, block);
      const int64_t window = draw(rng, 0, 6) == 0 ? kUnbounded : draw(rng, 1, 7);
      const int64_t global = draw(rng, 0, 6) == 0 ? kUnbounded : draw(rng, 0, 3);
      return Pattern::bigbird(s.k_len, block, window, global, draw(rng, 0, std::min<int64_t>(4, blocks)), rng(),
                              causal);
    }
    case TermKind::Longformer:
      return Pattern::longformer(draw_extent(rng, L, 0, big), draw_global_tokens(rng, s.k_len, focus), causal);
    case TermKind::Custom: return draw_custom(rng, s, causal);
  }
  return Pattern::dense();
}

// ---- probing ----------------------------------------------------------------

enum Form { kRowCount, kKeyIntervals, kBlockClass, kClosedFormClass, kLaneBits, kRowWord, kNumForms };
const char* const kFormNames[kNumForms] = {"row counts",     "key intervals",  "block classes",
                                           "closed classes", "CPU lane bits", "GPU row words"};

// How many checks each (kind, form) made, to show that every kind reached
// every form it has.
struct Tally {
  int64_t checks[kNumKinds][kNumForms] = {};
  void add(const PatternExpr& e, Form form) {
    for (int32_t t = 0; t < e.num_terms; ++t) checks[static_cast<int>(e.terms[t].kind)][form] += 1;
  }
};

// One expression of one head on one shape, and where to look.
struct Probe {
  const PatternExpr& e;
  int64_t h, q_len, k_len, shift, focus;
  std::mt19937_64& rng;

  int64_t clamp_row(int64_t i) const { return std::clamp<int64_t>(i, 0, q_len - 1); }
  int64_t clamp_key(int64_t j) const { return std::clamp<int64_t>(j, 0, k_len - 1); }

  // A query row: anywhere, at either end, or one whose position is near the focus.
  int64_t row() {
    switch (draw(rng, 0, 3)) {
      case 0: return draw(rng, 0, q_len - 1);
      case 1: return clamp_row(draw(rng, 0, 1) ? draw(rng, 0, 3) : q_len - 1 - draw(rng, 0, 3));
      default: return clamp_row(focus - shift + draw(rng, -100, 100));
    }
  }

  // A key near where the expression's terms change their answer for position
  // p (window ends, segment starts, sinks, global tokens), or anywhere.
  int64_t key(int64_t p) {
    const PatternTerm& t = e.terms[draw(rng, 0, e.num_terms - 1)];
    const int64_t a = std::min(t.a, int64_t{1} << 50), b = std::min(t.b, int64_t{1} << 50);
    int64_t at = 0;
    switch (draw(rng, 0, 9)) {
      case 0: at = draw(rng, 0, k_len - 1); break;
      case 1: at = 0; break;
      case 2: at = k_len - 1; break;
      case 3: at = p; break;
      case 4: at = p - a; break;
      case 5: at = p + b; break;
      case 6: at = p - b; break;
      case 7: at = a > 0 ? pattern_math::floor_div(p, a) * a : p; break;
      case 8: at = a - b; break;
      default: at = focus; break;
    }
    return clamp_key(at + draw(rng, -3, 3));
  }

  // Keys [j0, j1] inside [0, k_len) around key(p), up to `max_width` of them.
  std::pair<int64_t, int64_t> keys(int64_t p, int64_t max_width) {
    const int64_t width = draw(rng, 1, max_width);
    const int64_t j0 = clamp_key(key(p) - draw(rng, 0, width - 1));
    return {j0, std::min(k_len - 1, j0 + width - 1)};
  }
};

std::string where(int64_t h, int64_t i, int64_t p) {
  return "head " + std::to_string(h) + ", row " + std::to_string(i) + " (position " + std::to_string(p) + ")";
}

// term_count_row and expr_count_row over random key intervals.
void check_row_counts(Probe& pr, Tally& tally) {
  for (int n = 0; n < 12; ++n) {
    const int64_t i = pr.row(), p = i + pr.shift;
    const auto [j0, j1] = pr.keys(p, draw(pr.rng, 0, 3) ? 80 : 700);
    int64_t allowed = 0;
    for (int64_t j = j0; j <= j1; ++j) allowed += expr_allows(pr.e, pr.h, i, p, j) ? 1 : 0;
    ASSERT_EQ(expr_count_row(pr.e, pr.h, i, p, j0, j1), allowed)
        << "expr_count_row, " << where(pr.h, i, p) << ", keys [" << j0 << ", " << j1 << "]";
    for (int32_t n_term = 0; n_term < pr.e.num_terms; ++n_term) {
      const PatternTerm& t = pr.e.terms[n_term];
      int64_t term_allowed = 0;
      for (int64_t j = j0; j <= j1; ++j) term_allowed += term_allows(t, pr.h, i, p, j) ? 1 : 0;
      ASSERT_EQ(term_count_row(t, pr.h, i, p, j0, j1), term_allowed)
          << "term_count_row of term " << n_term << ", " << where(pr.h, i, p) << ", keys [" << j0 << ", " << j1
          << "]";
    }
    tally.add(pr.e, kRowCount);
  }
}

// The keys of [0, k_len) outside every interval: none of them may be allowed
// in any row of the block. Checked on some rows of the block by the (checked)
// row counts over every gap between the intervals, and key by key at the ends
// of some gaps.
void expect_outside_disallowed(Probe& pr, std::vector<KeyInterval> intervals, int64_t i0, int64_t i1,
                               const PatternTerm* term, const char* what) {
  for (const KeyInterval& iv : intervals)
    ASSERT_TRUE(iv.hi < iv.lo || (iv.lo >= 0 && iv.hi < pr.k_len))
        << what << ": interval [" << iv.lo << ", " << iv.hi << "] leaves [0, " << pr.k_len << ")";
  std::sort(intervals.begin(), intervals.end(), [](const KeyInterval& x, const KeyInterval& y) { return x.lo < y.lo; });
  std::vector<KeyInterval> gaps;
  int64_t next = 0;  // keys below are covered
  for (const KeyInterval& iv : intervals) {
    if (iv.hi < iv.lo) continue;
    if (iv.lo > next) gaps.push_back({next, iv.lo - 1});
    next = std::max(next, iv.hi + 1);
  }
  if (next < pr.k_len) gaps.push_back({next, pr.k_len - 1});
  if (gaps.empty()) return;
  auto allowed = [&](int64_t i, int64_t j) {
    return term ? term_allows(*term, pr.h, i, i + pr.shift, j) : expr_allows(pr.e, pr.h, i, i + pr.shift, j);
  };
  for (const int64_t i : {i0, i1, draw(pr.rng, i0, i1), draw(pr.rng, i0, i1)}) {
    const int64_t p = i + pr.shift;
    for (const KeyInterval& gap : gaps) {
      const int64_t count = term ? term_count_row(*term, pr.h, i, p, gap.lo, gap.hi)
                                 : expr_count_row(pr.e, pr.h, i, p, gap.lo, gap.hi);
      ASSERT_EQ(count, 0) << what << ": " << where(pr.h, i, p) << ", keys [" << gap.lo << ", " << gap.hi
                          << "] outside";
    }
    const size_t last = gaps.size() - 1;
    for (const size_t g : {size_t{0}, last, static_cast<size_t>(draw(pr.rng, 0, static_cast<int64_t>(last)))}) {
      const int64_t edge = std::min<int64_t>(gaps[g].hi - gaps[g].lo + 1, 64);
      for (int64_t k = 0; k < edge; ++k)
        for (const int64_t j : {gaps[g].lo + k, gaps[g].hi - k})
          ASSERT_FALSE(allowed(i, j)) << what << ": " << where(pr.h, i, p) << ", key " << j << " outside";
    }
  }
}

// Strided and fixed terms list one interval per period before the rows (the
// host builder's rows are a block each, of at most 2^31 key blocks): the
// intervals are checked for rows at positions up to this.
constexpr int64_t kMaxIntervalPosition = int64_t{1} << 20;

// term_key_intervals and expr_key_intervals of blocks of query rows.
void check_key_intervals(Probe& pr, Tally& tally) {
  std::vector<KeyInterval> intervals;
  for (int n = 0; n < 3; ++n) {
    const int64_t i0 = std::min(pr.row(), kMaxIntervalPosition - pr.shift - 256);
    if (i0 < 0) return;
    const int64_t i1 = std::min(pr.q_len - 1, i0 + draw(pr.rng, 0, draw(pr.rng, 0, 1) ? 7 : 255));
    const int64_t p0 = i0 + pr.shift, p1 = i1 + pr.shift;
    expr_key_intervals(pr.e, pr.h, i0, i1, p0, p1, pr.k_len, intervals);
    expect_outside_disallowed(pr, intervals, i0, i1, nullptr, "expr_key_intervals");
    for (int32_t t = 0; t < pr.e.num_terms; ++t) {
      intervals.clear();
      term_key_intervals(pr.e.terms[t], pr.h, i0, i1, p0, p1, pr.k_len, intervals);
      expect_outside_disallowed(pr, intervals, i0, i1, &pr.e.terms[t], "term_key_intervals");
    }
    if (::testing::Test::HasFatalFailure()) return;
    tally.add(pr.e, kKeyIntervals);
  }
}

// The class of the rectangle, pair by pair.
template <typename Allowed>
BlockClass exact_class(const BlockRect& r, Allowed allowed) {
  bool some_allowed = false, some_blocked = false;
  for (int64_t i = r.i0; i <= r.i1; ++i)
    for (int64_t j = r.j0; j <= r.j1; ++j) (allowed(i, j) ? some_allowed : some_blocked) = true;
  return some_allowed ? (some_blocked ? BlockClass::Partial : BlockClass::Full) : BlockClass::Empty;
}

const char* class_name(BlockClass c) {
  switch (c) {
    case BlockClass::Empty: return "empty";
    case BlockClass::Partial: return "partial";
    case BlockClass::Full: return "full";
    case BlockClass::Unknown: return "unknown";
  }
  return "?";
}

std::string rect_name(const BlockRect& r) {
  return "rows [" + std::to_string(r.i0) + ", " + std::to_string(r.i1) + "] at [" + std::to_string(r.p0) + ", " +
         std::to_string(r.p1) + "], keys [" + std::to_string(r.j0) + ", " + std::to_string(r.j1) + "]";
}

// term_classify_block, expr_classify_block (where they decide) and
// expr_classify_block_exact (always) on every block of a grid of 3 x 4
// blocks, and on the grid's rows of 4 blocks taken whole.
void check_block_classes(Probe& pr, Tally& tally) {
  const bool large = draw(pr.rng, 0, 5) == 0;
  const int64_t block_q = large ? draw(pr.rng, 64, 256) : draw(pr.rng, 1, 24);
  const int64_t block_k = large ? draw(pr.rng, 32, 16384 / block_q) : draw(pr.rng, 1, 24);
  const int64_t num_qb = pattern_math::ceil_div(pr.q_len, block_q), num_kb = pattern_math::ceil_div(pr.k_len, block_k);
  const int64_t qb0 = std::min(pr.row() / block_q, std::max<int64_t>(0, num_qb - 3));
  const int64_t kb0 = std::min(pr.key(qb0 * block_q + pr.shift) / block_k, std::max<int64_t>(0, num_kb - 4));
  auto rect = [&](int64_t qb, int64_t kb_first, int64_t kb_last) {
    const int64_t i0 = qb * block_q, i1 = std::min(pr.q_len, i0 + block_q) - 1;
    return BlockRect{i0, i1, i0 + pr.shift, i1 + pr.shift, kb_first * block_k,
                     std::min(pr.k_len, (kb_last + 1) * block_k) - 1};
  };
  for (int64_t qb = qb0; qb < std::min(num_qb, qb0 + 3); ++qb) {
    const int64_t kb_end = std::min(num_kb, kb0 + 4);
    std::vector<BlockRect> rects;
    for (int64_t kb = kb0; kb < kb_end; ++kb) rects.push_back(rect(qb, kb, kb));
    if (kb_end - kb0 > 1) rects.push_back(rect(qb, kb0, kb_end - 1));
    for (const BlockRect& r : rects) {
      const BlockClass want =
          exact_class(r, [&](int64_t i, int64_t j) { return expr_allows(pr.e, pr.h, i, i + pr.shift, j); });
      ASSERT_EQ(expr_classify_block_exact(pr.e, pr.h, r.i0, r.i1, pr.shift, r.j0, r.j1), want)
          << "expr_classify_block_exact, head " << pr.h << ", " << rect_name(r) << " is " << class_name(want);
      const BlockClass quick = expr_classify_block(pr.e, pr.h, r);
      ASSERT_TRUE(quick == BlockClass::Unknown || quick == want)
          << "expr_classify_block says " << class_name(quick) << ", head " << pr.h << ", " << rect_name(r)
          << " is " << class_name(want);
      for (int32_t n = 0; n < pr.e.num_terms; ++n) {
        const PatternTerm& t = pr.e.terms[n];
        const BlockClass got = term_classify_block(t, pr.h, r);
        if (got == BlockClass::Unknown) continue;
        const BlockClass term_want =
            exact_class(r, [&](int64_t i, int64_t j) { return term_allows(t, pr.h, i, i + pr.shift, j); });
        ASSERT_EQ(got, term_want) << "term_classify_block of term " << n << " says " << class_name(got)
                                  << ", head " << pr.h << ", " << rect_name(r) << " is " << class_name(term_want);
        tally.checks[static_cast<int>(t.kind)][kClosedFormClass] += 1;
      }
      tally.add(pr.e, kBlockClass);
    }
  }
}

// tile_allowed_bits: a tile of up to 64 rows over up to 128 keys.
void check_lane_bits(Probe& pr, Tally& tally) {
  for (int n = 0; n < 3; ++n) {
    cpu_fast::TileMaskContext context;
    context.expr = &pr.e;
    context.head = pr.h;
    context.row0 = pr.row();
    context.rows = std::min<int64_t>(draw(pr.rng, 1, 64), pr.q_len - context.row0);
    context.shift = pr.shift;
    const auto [first, last] = pr.keys(context.row0 + pr.shift, 128);
    std::vector<uint64_t> bits(static_cast<size_t>(last - first + 1));
    cpu_fast::tile_allowed_bits(&context, first, last - first + 1, bits.data());
    for (int64_t j = first; j <= last; ++j)
      for (int64_t lane = 0; lane < 64; ++lane) {
        const int64_t i = context.row0 + lane;
        const bool want = lane < context.rows && expr_allows(pr.e, pr.h, i, i + pr.shift, j);
        ASSERT_EQ(((bits[static_cast<size_t>(j - first)] >> lane) & 1) != 0, want)
            << "tile_allowed_bits, tile rows [" << context.row0 << ", " << context.row0 + context.rows - 1
            << "], lane " << lane << ": " << where(pr.h, i, i + pr.shift) << ", key " << j;
      }
    tally.add(pr.e, kLaneBits);
  }
}

// expr_row_word and term_row_word (where the terms have a span form), and
// an OR's word with each term left out.
void check_row_words(Probe& pr, Tally& tally) {
  for (int n = 0; n < 8; ++n) {
    const int64_t i = pr.row(), p = i + pr.shift;
    int64_t k0 = std::max<int64_t>(0, pr.key(p) - draw(pr.rng, 0, 63));
    if (draw(pr.rng, 0, 1)) k0 -= k0 % 64;  // a tile's first key, or any
    for (int32_t n_term = 0; n_term < pr.e.num_terms; ++n_term) {
      const PatternTerm& t = pr.e.terms[n_term];
      uint64_t word = 0;
      if (!cuda_detail::term_row_word(t, pr.h, i, p, k0, word)) continue;
      for (int k = 0; k < 64; ++k)
        ASSERT_EQ(((word >> k) & 1) != 0, term_allows(t, pr.h, i, p, k0 + k))
            << "term_row_word of term " << n_term << ", " << where(pr.h, i, p) << ", key " << k0 + k;
      tally.checks[static_cast<int>(t.kind)][kRowWord] += 1;
    }
    uint64_t word = 0;
    if (!cuda_detail::expr_row_word(pr.e, pr.h, i, p, k0, word)) continue;
    for (int k = 0; k < 64; ++k)
      ASSERT_EQ(((word >> k) & 1) != 0, expr_allows(pr.e, pr.h, i, p, k0 + k))
          << "expr_row_word, " << where(pr.h, i, p) << ", key " << k0 + k;
    if (pr.e.op != ExprOp::Or || pr.e.num_terms < 2) continue;
    const int32_t skip = static_cast<int32_t>(draw(pr.rng, 0, pr.e.num_terms - 1));
    ASSERT_TRUE(cuda_detail::expr_row_word(pr.e, pr.h, i, p, k0, word, skip));
    for (int k = 0; k < 64; ++k) {
      bool want = false;
      for (int32_t n_term = 0; n_term < pr.e.num_terms; ++n_term)
        want |= n_term != skip && term_allows(pr.e.terms[n_term], pr.h, i, p, k0 + k);
      ASSERT_EQ(((word >> k) & 1) != 0, want)
          << "expr_row_word without term " << skip << ", " << where(pr.h, i, p) << ", key " << k0 + k;
    }
  }
}

// Every derived form of the pattern's expression for a random head.
void check_every_form(const Pattern& pattern, const Shape& s, int64_t focus, std::mt19937_64& rng, Tally& tally) {
  const int64_t h = draw(rng, 0, s.heads - 1);
  Probe pr{pattern.expr_for_head(h, s.heads), h, s.q_len, s.k_len, s.k_len - s.q_len, focus, rng};
  SCOPED_TRACE(pattern.describe() + ", Lq " + std::to_string(s.q_len) + ", Lk " + std::to_string(s.k_len) +
               ", heads " + std::to_string(s.heads));
  check_row_counts(pr, tally);
  if (::testing::Test::HasFatalFailure()) return;
  check_key_intervals(pr, tally);
  if (::testing::Test::HasFatalFailure()) return;
  check_block_classes(pr, tally);
  if (::testing::Test::HasFatalFailure()) return;
  check_lane_bits(pr, tally);
  if (::testing::Test::HasFatalFailure()) return;
  check_row_words(pr, tally);
}

constexpr Lengths kLengths[] = {Lengths::Short, Lengths::Odd, Lengths::Long, Lengths::Mixed};

std::string kind_name(TermKind kind) {
  static const char* const names[kNumKinds] = {"dense",   "block-diagonal", "sliding-window", "streaming",
                                               "strided", "fixed",          "dilated",        "bigbird",
                                               "longformer", "custom"};
  return names[static_cast<int>(kind)];
}

TEST(PatternKinds, EveryDerivedFormAgreesWithThePredicate) {
  constexpr int kDrawsPerLengths = 120;
  std::mt19937_64 rng(45);
  Tally tally;
  for (const TermKind kind : kKinds)
    for (const Lengths lengths : kLengths)
      for (int n = 0; n < kDrawsPerLengths; ++n) {
        const Shape s = draw_shape(rng, lengths);
        const int64_t focus = draw(rng, 0, s.k_len - 1);
        const Pattern pattern = draw_term(rng, kind, s, focus);
        ASSERT_EQ(pattern.exprs()[0].terms[0].kind, kind);
        SCOPED_TRACE(kind_name(kind) + " draw " + std::to_string(n));
        check_every_form(pattern, s, focus, rng, tally);
        if (HasFatalFailure()) return;
      }
  for (const TermKind kind : kKinds) {
    const int k = static_cast<int>(kind);
    for (int form = 0; form < kNumForms; ++form) {
      if (form == kRowWord && !has_span_form(kind)) continue;
      EXPECT_GT(tally.checks[k][form], 4 * kDrawsPerLengths)
          << kind_name(kind) << ": too few checks of " << kFormNames[form];
    }
  }
}

// Framed patterns (one rectangle of a larger problem): every derived form,
// which translates the call's coordinates through the frame, agrees with the
// framed predicate (which BlockMaskBuild.FramedPatternsPlanTheirRectangle
// checks against the whole pattern).
TEST(PatternKinds, FramedPatternsAgreeInEveryForm) {
  std::mt19937_64 rng(47);
  Tally tally;
  for (const TermKind kind : kKinds)
    for (int n = 0; n < 60; ++n) {
      const Shape whole = draw_shape(rng, n % 2 ? Lengths::Odd : Lengths::Short);
      const Pattern pattern = draw_term(rng, kind, whole, draw(rng, 0, whole.k_len - 1));
      const int64_t row = draw(rng, 0, whole.q_len - 1), key = draw(rng, 0, whole.k_len - 1);
      const Shape s{draw(rng, 1, whole.q_len - row), draw(rng, 1, whole.k_len - key), whole.heads};
      SCOPED_TRACE(kind_name(kind) + " framed draw " + std::to_string(n));
      check_every_form(pattern.framed(row, key, whole.q_len, whole.k_len), s, draw(rng, 0, s.k_len - 1), rng,
                       tally);
      if (HasFatalFailure()) return;
    }
  for (const TermKind kind : kKinds)
    EXPECT_GT(tally.checks[static_cast<int>(kind)][kBlockClass], 0) << kind_name(kind) << " never drawn";
}

// Unions and intersections of two or three terms of random kinds (sharing
// the shape and, for per-head kinds, the heads), causal or not.
TEST(PatternKinds, CompositesAgreeWithTheirPredicate) {
  std::mt19937_64 rng(46);
  Tally tally;
  for (int n = 0; n < 800; ++n) {
    const Shape s = draw_shape(rng, kLengths[draw(rng, 0, 3)]);
    const int64_t focus = draw(rng, 0, s.k_len - 1);
    const bool unite = draw(rng, 0, 1) == 1;
    Pattern pattern = draw_term(rng, kKinds[draw(rng, 0, kNumKinds - 1)], s, focus);
    for (int64_t terms = draw(rng, 2, 3); pattern.exprs()[0].num_terms < terms;) {
      const Pattern next = draw_term(rng, kKinds[draw(rng, 0, kNumKinds - 1)], s, focus);
      pattern = unite ? Pattern::unite(pattern, next) : Pattern::intersect(pattern, next);
    }
    SCOPED_TRACE("composite draw " + std::to_string(n));
    check_every_form(pattern, s, focus, rng, tally);
    if (HasFatalFailure()) return;
  }
  for (const TermKind kind : kKinds)
    EXPECT_GT(tally.checks[static_cast<int>(kind)][kBlockClass], 0) << kind_name(kind) << " never drawn";
}

}  // namespace
}  // namespace spattn::testing
