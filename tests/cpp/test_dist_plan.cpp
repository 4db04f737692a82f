// tests/cpp/test_dist_plan.cpp - ShardLayout and ContextParallelPlan (spattn/dist.hpp).
//
// Layouts cover the sequence once, in block-aligned chunks, with clear errors
// for impossible splits. For random patterns (pattern_cases.hpp), world sizes
// and both layouts, each rank's needed blocks equal a brute-force scan of the
// predicate over its rows, and the runs between every pair of ranks carry
// exactly the needed rows of the sender's chunks, laid out back to back.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "expect_error.hpp"
#include "pattern_cases.hpp"
#include "spattn/dist.hpp"
#include "spattn/error.hpp"

namespace spattn::testing {
namespace {

using dist::Chunk;
using dist::ContextParallelPlan;
using dist::KeyRun;
using dist::LayoutKind;
using dist::ShardLayout;

TEST(ShardLayout, ChunksCoverTheSequenceOnce) {
  for (const LayoutKind kind : {LayoutKind::Contiguous, LayoutKind::Zigzag})
    for (int64_t world = 1; world <= 5; ++world)
      for (const int64_t L : {int64_t{160}, int64_t{251}, int64_t{1000}}) {
        const ShardLayout layout(kind, L, world, 16);
        std::vector<int> seen(static_cast<size_t>(L), 0);
        int64_t total = 0;
        for (int64_t r = 0; r < world; ++r) {
          for (const Chunk& c : layout.pieces(r)) {
            ASSERT_EQ(c.start % 16, 0);
            ASSERT_TRUE(c.end % 16 == 0 || c.end == L);
            for (int64_t p = c.start; p < c.end; ++p) ++seen[static_cast<size_t>(p)];
          }
          total += layout.local_len(r);
        }
        EXPECT_EQ(total, L);
        for (int64_t p = 0; p < L; ++p) ASSERT_EQ(seen[static_cast<size_t>(p)], 1) << "position " << p;
      }
  const ShardLayout zigzag(LayoutKind::Zigzag, 256, 2, 32);
  EXPECT_EQ(zigzag.pieces(0).size(), 2u);
  EXPECT_EQ(zigzag.pieces(0)[1].start, 192);  // rank 0 holds the first and the last chunk
}

TEST(ShardLayout, ImpossibleSplitsAreRejected) {
  expect_error([] { ShardLayout(LayoutKind::Zigzag, 100, 4, 16); }, "fewer than the 8 chunks");
  expect_error([] { ShardLayout(LayoutKind::Contiguous, 0, 2, 16); }, "seq_len must be >= 1");
  expect_error([] { ShardLayout(LayoutKind::Contiguous, 64, 0, 16); }, "world_size must be >= 1");
  expect_error([] { ShardLayout(LayoutKind::Contiguous, 64, 2, 16).pieces(2); }, "rank must be in [0, 2)");
}

TEST(ContextParallelPlan, NeededBlocksAndRunsMatchABruteForceScan) {
  std::mt19937_64 rng(5252);
  int checked = 0;
  for (int n = 0; n < 60; ++n) {
    const int64_t world = draw(rng, 1, 4), block = draw(rng, 0, 1) ? 8 : 16, heads = draw(rng, 1, 3);
    const LayoutKind kind = draw(rng, 0, 1) ? LayoutKind::Zigzag : LayoutKind::Contiguous;
    const int64_t chunks = world * (kind == LayoutKind::Zigzag ? 2 : 1);
    const int64_t L = draw(rng, chunks * block, 200);
    const Case c = random_case(rng, L, L, heads);
    SCOPED_TRACE(c.name + ", L " + std::to_string(L) + ", world " + std::to_string(world) + ", block " +
                 std::to_string(block) + (kind == LayoutKind::Zigzag ? ", zigzag" : ", contiguous"));
    const ShardLayout layout(kind, L, world, block);
    const ContextParallelPlan plan(c.pattern, layout, heads);
    for (int64_t r = 0; r < world; ++r) {
      std::set<int64_t> want;
      for (const Chunk& q : layout.pieces(r))
        for (int64_t i = q.start; i < q.end; ++i)
          for (int64_t j = 0; j < L; ++j)
            for (int64_t h = 0; h < heads && !want.count(j / block); ++h)
              if (c.spec(h, i, i, j)) want.insert(j / block);
      const std::vector<int64_t>& got = plan.needed_blocks(r);
      ASSERT_EQ(std::set<int64_t>(got.begin(), got.end()), want) << "rank " << r;
      for (int64_t s = 0; s < world; ++s) {
        if (s == r) continue;
        std::set<int64_t> rows;  // global keys the runs carry, from s's shard rows
        int64_t offset = 0;
        for (const KeyRun& run : plan.runs(r, s)) {
          ASSERT_EQ(run.offset, offset) << "runs are laid out back to back";
          offset += run.length;
          int64_t shard_row = 0;  // the run's source rows are its global keys in s's shard
          for (const Chunk& k : layout.pieces(s)) {
            for (int64_t j = k.start; j < k.end; ++j, ++shard_row) {
              if (shard_row >= run.source && shard_row < run.source + run.length) {
                ASSERT_EQ(j - run.start, shard_row - run.source) << "run source and keys disagree";
              }
            }
          }
          for (int64_t j = run.start; j < run.start + run.length; ++j) rows.insert(j);
        }
        std::set<int64_t> expected;
        for (const Chunk& k : layout.pieces(s))
          for (int64_t j = k.start; j < k.end; ++j)
            if (want.count(j / block)) expected.insert(j);
        ASSERT_EQ(rows, expected) << "rank " << r << " from rank " << s;
        EXPECT_EQ(plan.rows_received(r, s), static_cast<int64_t>(expected.size()));
      }
    }
    ++checked;
  }
  EXPECT_EQ(checked, 60);
}

}  // namespace
}  // namespace spattn::testing
