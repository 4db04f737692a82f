// tests/cpp/test_pattern_semantics.cpp - the pattern table of DESIGN.md
// section 2, checked on small exact pictures.
//
// Each test draws the allowed set of a pattern as rows of '#' (allowed) and
// '.' (not) and compares it with a picture worked out by hand from the design
// notes: the sliding-window conventions, streaming sinks, bottom-right
// alignment when Lq != Lk, the Sparse Transformer and LongNet patterns,
// Longformer globals, custom blocks on the index grid. The BigBird random
// block generator is checked for determinism, exclusions, causality, counts
// and rough uniformity.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "spattn/spattn.hpp"

namespace spattn {
namespace {

// Rows of '#'/'.' for query head h of H.
std::vector<std::string> picture(const Pattern& p, int64_t q_len, int64_t k_len, int64_t h = 0,
                                 int64_t H = 1) {
  std::vector<std::string> rows;
  for (int64_t i = 0; i < q_len; ++i) {
    std::string row;
    for (int64_t j = 0; j < k_len; ++j) row += p.allowed(h, H, q_len, k_len, i, j) ? '#' : '.';
    rows.push_back(row);
  }
  return rows;
}

using Rows = std::vector<std::string>;

TEST(PatternSemantics, SlidingWindowConventions) {
  // --window W alone: W keys including self (left = W-1, right = 0).
  const Rows w3 = {"#.....", "##....", "###...", ".###..", "..###.", "...###"};
  EXPECT_EQ(picture(Pattern::sliding_window(3), 6, 6), w3);
  EXPECT_EQ(picture(Pattern::sliding_window(2, 0), 6, 6), w3);
  // Inclusive bounds p - left <= j <= p + right.
  EXPECT_EQ(picture(Pattern::sliding_window(1, 2), 6, 6),
            (Rows{"###...", "####..", ".####.", "..####", "...###", "....##"}));
  EXPECT_EQ(picture(Pattern::sliding_window(1, 2, true), 6, 6),
            (Rows{"#.....", "##....", ".##...", "..##..", "...##.", "....##"}));
  EXPECT_EQ(picture(Pattern::sliding_window(1, 2).with_causal(), 6, 6),
            picture(Pattern::sliding_window(1, 0), 6, 6));
  EXPECT_EQ(picture(Pattern::sliding_window(1), 3, 3), (Rows{"#..", ".#.", "..#"}));
}

TEST(PatternSemantics, StreamingSinkTwoWindowThree) {
  EXPECT_EQ(picture(Pattern::streaming(2, 3), 8, 8),
            (Rows{"#.......", "##......", "###.....", "####....", "#####...", "##.###..",
                  "##..###.", "##...###"}));
  // No sink: a plain causal window.
  EXPECT_EQ(picture(Pattern::streaming(0, 3), 8, 8), picture(Pattern::sliding_window(3), 8, 8));
}

TEST(PatternSemantics, BottomRightAlignment) {
  // Lq < Lk: query i sits at p = i + 2.
  EXPECT_EQ(picture(Pattern::causal(), 3, 5), (Rows{"###..", "####.", "#####"}));
  EXPECT_EQ(picture(Pattern::sliding_window(1, 0), 2, 5), (Rows{"..##.", "...##"}));
  EXPECT_EQ(picture(Pattern::block_diagonal(2), 3, 5), (Rows{"..##.", "..##.", "....#"}));
  // Lq > Lk: the first Lq - Lk rows sit before position 0 and see nothing causal.
  EXPECT_EQ(picture(Pattern::causal(), 5, 3), (Rows{"...", "...", "#..", "##.", "###"}));
  EXPECT_EQ(picture(Pattern::streaming(1, 1), 5, 3), (Rows{"...", "...", "#..", "##.", "#.#"}));
  EXPECT_EQ(picture(Pattern::sliding_window(1, 1), 4, 3), (Rows{"#..", "##.", "###", ".##"}));
  EXPECT_EQ(picture(Pattern::dense(), 4, 2), (Rows{"##", "##", "##", "##"}));
}

TEST(PatternSemantics, BlockDiagonal) {
  EXPECT_EQ(picture(Pattern::block_diagonal(3), 7, 7),
            (Rows{"###....", "###....", "###....", "...###.", "...###.", "...###.", "......#"}));
  EXPECT_EQ(picture(Pattern::block_diagonal(3, true), 4, 4),
            (Rows{"#...", "##..", "###.", "...#"}));
}

TEST(PatternSemantics, StridedAndFixed) {
  const Rows strided = picture(Pattern::strided(3), 10, 10);
  EXPECT_EQ(strided[9], "#..#..####");  // {0, 3, 6} by stride, {7, 8, 9} by window
  EXPECT_EQ(strided[4], ".####.....");  // {2, 3, 4} by window, {1} by stride
  EXPECT_EQ(strided[0], "#.........");
  const Rows fixed = picture(Pattern::fixed(4, 1), 10, 10);
  EXPECT_EQ(fixed[6], "...####...");  // own segment {4, 5, 6}, summary column 3
  EXPECT_EQ(fixed[9], "...#...###");  // own segment {8, 9}, summary columns 3 and 7
  EXPECT_EQ(fixed[2], "###.......");
  EXPECT_EQ(picture(Pattern::fixed(4, 4), 6, 6), picture(Pattern::causal(), 6, 6));
  EXPECT_EQ(picture(Pattern::fixed(2, 0), 5, 5), picture(Pattern::block_diagonal(2, true), 5, 5));
}

TEST(PatternSemantics, DilatedHeadsAndBranches) {
  const Pattern p = Pattern::dilated({4}, {2});
  EXPECT_EQ(picture(p, 8, 8, 0, 2), (Rows{"#.#.....", "........", "#.#.....", "........",
                                          "....#.#.", "........", "....#.#.", "........"}));
  EXPECT_EQ(picture(p, 8, 8, 1, 2), (Rows{"........", ".#.#....", "........", ".#.#....",
                                          "........", ".....#.#", "........", ".....#.#"}));
  EXPECT_EQ(picture(p, 8, 8, 2, 3), picture(p, 8, 8, 0, 2));  // h % r picks the residue
  // Two branches: the union of segment 2 / rate 1 and segment 8 / rate 4.
  const Rows two = picture(Pattern::dilated({2, 8}, {1, 4}, true), 8, 8, 0, 1);
  EXPECT_EQ(two[4], "#...#...");
  EXPECT_EQ(two[5], "....##..");
  EXPECT_EQ(two[3], "..##....");
}

TEST(PatternSemantics, LongformerGlobalTokens) {
  const Rows rows = picture(Pattern::longformer(4, {0}), 8, 8);
  EXPECT_EQ(rows[0], "########");  // a global query sees everything
  EXPECT_EQ(rows[5], "#..#####");  // |5 - j| <= 2, plus the global key
  EXPECT_EQ(rows[2], "#####...");
  const Rows causal = picture(Pattern::longformer(4, {6, 1}, true), 8, 8);
  EXPECT_EQ(causal[6], "#######.");
  EXPECT_EQ(causal[4], ".####...");
  EXPECT_EQ(causal[0], "#.......");
}

TEST(PatternSemantics, WithinLengthDropsGlobalTokensBeyondTheSequence) {
  const Pattern full = Pattern::unite(Pattern::longformer(2, {1, 6, 9}), Pattern::streaming(1, 1));
  EXPECT_THROW(full.check_lengths(7, 7), Error);
  const Pattern seven = full.within_length(7);
  EXPECT_NO_THROW(seven.check_lengths(7, 7));
  EXPECT_EQ(picture(seven, 7, 7), picture(full, 7, 7));  // the same pairs on 7 positions
  EXPECT_THROW(full.within_length(10).check_lengths(9, 9), Error);  // token 9 kept, Lk = 9 too short
  EXPECT_EQ(picture(full.within_length(1), 1, 1), (Rows{"#"}));
}

TEST(PatternSemantics, CustomBlocksLieOnTheIndexGrid) {
  // Blocks of 1 x 2 on a 2 x 4 problem: no position shift for custom blocks.
  const Pattern p = Pattern::custom({1, 0, 0, 1}, 1, 2, 2, 1, 2);
  EXPECT_EQ(picture(p, 2, 4), (Rows{"##..", "..##"}));
  EXPECT_EQ(picture(Pattern::custom({1, 1, 0, 1}, 1, 2, 2, 1, 2, true), 2, 4),
            (Rows{"###.", "..##"}));
  const Pattern per_head = Pattern::custom({1, 0, 0, 1}, 2, 1, 2, 2, 2);
  EXPECT_EQ(picture(per_head, 2, 4, 0, 2), (Rows{"##..", "##.."}));
  EXPECT_EQ(picture(per_head, 2, 4, 1, 2), (Rows{"..##", "..##"}));
  EXPECT_EQ(picture(Pattern::custom_bsr({0, 1, 1}, {1}, 1, 2, 2, 1, 2), 2, 4),
            (Rows{"..##", "...."}));
}

TEST(PatternSemantics, CompositionAndPerHead) {
  const Pattern u = Pattern::unite(Pattern::streaming(1, 1), Pattern::strided(3));
  EXPECT_EQ(picture(u, 7, 7)[6], "#..####");
  const Pattern x = Pattern::intersect(Pattern::sliding_window(2, 2), Pattern::block_diagonal(3));
  EXPECT_EQ(picture(x, 6, 6)[2], "###...");
  EXPECT_EQ(picture(x, 6, 6)[3], "...###");
  const Pattern ph = Pattern::per_head({Pattern::causal(), Pattern::dense()});
  EXPECT_EQ(picture(ph, 2, 2, 0, 2), (Rows{"#.", "##"}));
  EXPECT_EQ(picture(ph, 2, 2, 1, 2), (Rows{"##", "##"}));
  EXPECT_EQ(picture(ph, 2, 2, 1, 4), picture(Pattern::causal(), 2, 2));  // heads 0, 1 -> pattern 0
  EXPECT_EQ(picture(ph, 2, 2, 3, 4), picture(Pattern::dense(), 2, 2));
  EXPECT_TRUE(ph.head_dependent());
  EXPECT_EQ(ph.num_exprs(), 2);
  EXPECT_FALSE(Pattern::unite(Pattern::causal(), Pattern::dilated({4}, {1})).head_dependent());
  EXPECT_NE(Pattern::streaming(4, 64).describe().find("streaming"), std::string::npos);
}

// ---- BigBird random blocks ----

std::set<int64_t> bigbird_candidates(int64_t n, int64_t w, int64_t g, int64_t b, bool causal) {
  std::set<int64_t> out;
  if (b < g || b >= n - g) return out;
  for (int64_t c = 0; c < n; ++c) {
    const bool window = std::abs(b - c) <= (w - 1) / 2, global = c < g || c >= n - g;
    if (!window && !global && (!causal || c <= b)) out.insert(c);
  }
  return out;
}

TEST(BigBirdRandomBlocks, RespectTheDocumentedRules) {
  for (int64_t n : {1, 2, 5, 16, 50})
    for (int64_t w : {1, 2, 3, 5})
      for (int64_t g : {0, 1, 2})
        for (int64_t r = 0; r <= std::min<int64_t>(4, n); ++r)
          for (bool causal : {false, true})
            for (uint64_t seed : {0ull, 1ull, 12345ull}) {
              SCOPED_TRACE(::testing::Message() << "n=" << n << " w=" << w << " g=" << g << " r="
                                                << r << " causal=" << causal << " seed=" << seed);
              const auto table = bigbird_random_blocks(n, w, g, r, seed, causal);
              ASSERT_EQ(static_cast<int64_t>(table.size()), n * r);
              EXPECT_EQ(table, bigbird_random_blocks(n, w, g, r, seed, causal));  // deterministic
              for (int64_t b = 0; b < n; ++b) {
                const std::set<int64_t> cand = bigbird_candidates(n, w, g, b, causal);
                std::set<int64_t> seen;
                int64_t used = 0;
                for (int64_t s = 0; s < r; ++s) {
                  const int32_t c = table[b * r + s];
                  if (c < 0) {
                    ASSERT_EQ(c, -1);
                    continue;
                  }
                  ASSERT_EQ(used, s) << "row " << b << ": a block after an unused slot";
                  ++used;
                  ASSERT_TRUE(cand.count(c))
                      << "row " << b << " drew block " << c << " (not a candidate)";
                  ASSERT_TRUE(seen.insert(c).second)
                      << "row " << b << " drew block " << c << " twice";
                }
                ASSERT_EQ(used, std::min<int64_t>(r, static_cast<int64_t>(cand.size())))
                    << "row " << b;
              }
            }
}

TEST(BigBirdRandomBlocks, SeedsDifferAndDrawsAreRoughlyUniform) {
  EXPECT_NE(bigbird_random_blocks(64, 3, 1, 3, 1, false),
            bigbird_random_blocks(64, 3, 1, 3, 2, false));
  EXPECT_NE(bigbird_random_blocks(64, 3, 1, 3, 1, true),
            bigbird_random_blocks(64, 3, 1, 3, 2, true));
  // Row 10 of 20 blocks (window 3, 1 global) has 15 candidates; 400 draws.
  std::map<int32_t, int> hits;
  for (uint64_t seed = 0; seed < 200; ++seed) {
    const auto table = bigbird_random_blocks(20, 3, 1, 2, seed, false);
    for (int s = 0; s < 2; ++s) ++hits[table[10 * 2 + s]];
  }
  ASSERT_EQ(hits.size(), 15u);
  for (const auto& [block, count] : hits) {
    EXPECT_GE(count, 10) << "block " << block;
    EXPECT_LE(count, 50) << "block " << block;
  }
  // The pattern reads the same table.
  const Pattern p = Pattern::bigbird(20 * 8, 8, 3, 1, 2, 7);
  const auto table = bigbird_random_blocks(20, 3, 1, 2, 7, false);
  for (int64_t kb = 0; kb < 20; ++kb) {
    const bool drawn = table[10 * 2] == kb || table[10 * 2 + 1] == kb;
    const bool structural = std::abs(10 - kb) <= 1 || kb == 0 || kb == 19;
    EXPECT_EQ(p.allowed(0, 1, 160, 160, 10 * 8 + 3, kb * 8 + 5), drawn || structural)
        << "key block " << kb;
  }
}

}  // namespace
}  // namespace spattn
