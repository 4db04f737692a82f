// tests/cpp/test_block_classify.cpp - the closed-form block classification
// (pattern/block_classify.hpp) on arbitrary rectangles, against the patterns'
// independent specs (pattern_cases.hpp): whenever it decides (empty, partial
// or full), the pairs of the rectangle must agree. Rectangles are drawn
// anywhere, of any size, so BigBird and custom cells, global Longformer rows
// and keys, segments and windows are crossed in every way, causal or not,
// Lq != Lk both ways. Also: BigBird's closed-form count of connected blocks
// against the block relation it counts.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "pattern/block_classify.hpp"
#include "pattern_cases.hpp"

namespace spattn::testing {
namespace {

// Classifies `rectangles` random rectangles of the case on the shape (at most
// `max_rows` rows each) and checks each decided one; returns how many were
// decided.
int64_t check_random_rectangles(const Case& c, int64_t q_len, int64_t k_len, int64_t heads,
                                std::mt19937_64& rng, int rectangles, int64_t max_rows) {
  SCOPED_TRACE(c.name + ", Lq " + std::to_string(q_len) + " Lk " + std::to_string(k_len));
  const int64_t offset = k_len - q_len;
  int64_t decided = 0;
  for (int n = 0; n < rectangles; ++n) {
    const int64_t h = draw(rng, 0, heads - 1);
    const int64_t i0 = draw(rng, 0, q_len - 1);
    const int64_t i1 = std::min(q_len - 1, i0 + draw(rng, 0, max_rows - 1));
    int64_t j0 = draw(rng, 0, k_len - 1), j1 = draw(rng, 0, k_len - 1);
    if (j0 > j1) std::swap(j0, j1);
    const BlockClass got = expr_classify_block(c.pattern.expr_for_head(h, heads), h,
                                               BlockRect{i0, i1, i0 + offset, i1 + offset, j0, j1});
    if (got == BlockClass::Unknown) continue;
    ++decided;
    int64_t allowed = 0;
    for (int64_t i = i0; i <= i1; ++i)
      for (int64_t j = j0; j <= j1; ++j) allowed += c.spec(h, i, i + offset, j) ? 1 : 0;
    const int64_t pairs = (i1 - i0 + 1) * (j1 - j0 + 1);
    const BlockClass want = allowed == 0 ? BlockClass::Empty
                            : allowed == pairs ? BlockClass::Full
                                               : BlockClass::Partial;
    EXPECT_EQ(static_cast<int>(got), static_cast<int>(want))
        << "head " << h << ", rows [" << i0 << ", " << i1 << "], keys [" << j0 << ", " << j1
        << "] (0 empty, 1 partial, 2 full)";
    if (::testing::Test::HasFailure()) return decided;
  }
  return decided;
}

TEST(BlockClassify, EveryPatternKindOnRandomRectangles) {
  std::mt19937_64 rng(41);
  for (int kind = 0; kind < kNumLeafKinds; ++kind)
    for (int n = 0; n < 30; ++n) {
      const int64_t q_len = draw(rng, 1, 200), k_len = draw(rng, 0, 2) ? q_len : draw(rng, 1, 200);
      const int64_t heads = draw(rng, 1, 3);
      check_random_rectangles(random_leaf(rng, kind, q_len, k_len, heads), q_len, k_len, heads, rng, 60,
                              q_len);
      if (HasFailure()) return;
    }
}

// BigBird, Longformer and custom decide rectangles of a row or two across
// any number of key cells in closed form (the builders' rows are one query
// block tall and one cell of these grids, or less, at the usual sizes).
TEST(BlockClassify, BigBirdCustomAndLongformerDecideAcrossCells) {
  std::mt19937_64 rng(42);
  for (const int kind : {9, 10, 11, 12}) {
    int64_t decided = 0, drawn = 0;
    for (int n = 0; n < 30; ++n) {
      const int64_t q_len = draw(rng, 1, 200), k_len = draw(rng, 0, 2) ? q_len : draw(rng, 1, 200);
      const Case c = random_leaf(rng, kind, q_len, k_len, 2);
      decided += check_random_rectangles(c, q_len, k_len, 2, rng, 60, 2);
      drawn += 60;
      if (HasFailure()) return;
    }
    EXPECT_GT(decided, drawn / 2) << "kind " << kind;
  }
}

TEST(BlockClassify, BigBirdConnectedCountMatchesTheRelation) {
  std::mt19937_64 rng(43);
  for (int n = 0; n < 200; ++n) {
    const int64_t k_len = draw(rng, 1, 400), block = draw(rng, 1, 40);
    const int64_t blocks = ceil_div(k_len, block);
    const Pattern p = Pattern::bigbird(k_len, block, draw(rng, 1, 7), draw(rng, 0, 3),
                                       draw(rng, 0, std::min<int64_t>(4, blocks)), rng(), draw(rng, 0, 1) == 1);
    const PatternTerm& t = p.exprs()[0].terms[0];
    for (int m = 0; m < 20; ++m) {
      const int64_t qb = draw(rng, -2, blocks + 1);
      int64_t kb0 = draw(rng, 0, blocks - 1), kb1 = draw(rng, 0, blocks - 1);
      if (kb0 > kb1) std::swap(kb0, kb1);
      int64_t want = 0;
      for (int64_t kb = kb0; kb <= kb1; ++kb) want += bigbird_blocks_connected(t, qb, kb) ? 1 : 0;
      ASSERT_EQ(bigbird_connected_count(t, qb, kb0, kb1), want)
          << p.describe() << ", query block " << qb << ", key blocks [" << kb0 << ", " << kb1 << "]";
    }
  }
}

}  // namespace
}  // namespace spattn::testing
