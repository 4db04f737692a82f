// tests/cpp/test_block_mask.cpp - BlockMask::build against brute force.
//
// For every pattern family, composites and many random parameter draws and
// shapes (lengths 1, 7, 127, 300, Lq < Lk and Lq > Lk, block sizes 1, 3, 16,
// 64 and unequal), the predicate Pattern::allowed is first checked pair by
// pair against the independent Spec of pattern_cases.hpp; then the plan is
// checked against a brute-force pass over every (head, query, key): a block
// is listed iff some pair in it is allowed and marked full iff all are; rows
// are sorted and unique; the mask has 1 head for head-independent patterns
// and H otherwise; kept_pairs, density and BlockMask::allowed agree with the
// pair count. The BSR constructor's validation is checked at the end.
#include <gtest/gtest.h>

#include <functional>
#include <limits>
#include <memory>
#include <sstream>

#include "expect_error.hpp"
#include "pattern_cases.hpp"
#include "test_support.hpp"

namespace spattn::testing {
namespace {

std::string shape_text(const MaskShape& s) {
  std::ostringstream os;
  os << "Lq=" << s.q_len << " Lk=" << s.k_len << " block " << s.block_q << "x" << s.block_k
     << " H=" << s.num_heads;
  return os.str();
}

// Checks Pattern::allowed against the spec for every pair; fills `allowed`
// (H, Lq, Lk) with the spec. Returns false after reporting the first mismatch.
bool predicate_matches_spec(const Case& c, const MaskShape& s, std::vector<uint8_t>& allowed) {
  const int64_t H = s.num_heads, Lq = s.q_len, Lk = s.k_len;
  allowed.assign(static_cast<size_t>(H * Lq * Lk), 0);
  for (int64_t h = 0; h < H; ++h)
    for (int64_t i = 0; i < Lq; ++i)
      for (int64_t j = 0; j < Lk; ++j) {
        const bool want = c.spec(h, i, i + Lk - Lq, j);
        const bool got = c.pattern.allowed(h, H, Lq, Lk, i, j);
        if (want != got) {
          ADD_FAILURE() << c.name << " " << shape_text(s) << ": Pattern::allowed(h=" << h
                        << ", i=" << i << ", j=" << j << ") = " << got << ", spec says " << want;
          return false;
        }
        allowed[(h * Lq + i) * Lk + j] = want ? 1 : 0;
      }
  return true;
}

void expect_plan_matches(const Case& c, const MaskShape& s) {
  SCOPED_TRACE(c.name + " " + shape_text(s));
  std::vector<uint8_t> allowed;
  if (!predicate_matches_spec(c, s, allowed)) return;
  const int64_t H = s.num_heads, Lq = s.q_len, Lk = s.k_len;
  const BlockMask mask = BlockMask::build(c.pattern, s);

  // Head count: one shared plan unless the pattern reads the head index.
  bool differs_by_head = false;
  for (int64_t h = 1; h < H && !differs_by_head; ++h)
    differs_by_head =
        !std::equal(allowed.begin(), allowed.begin() + Lq * Lk, allowed.begin() + h * Lq * Lk);
  if (differs_by_head) {
    ASSERT_TRUE(c.pattern.head_dependent()) << "heads differ but head_dependent() is false";
  }
  const int64_t G = c.pattern.head_dependent() ? H : 1;
  ASSERT_EQ(mask.num_heads(), G);

  // Shape and BSR structure.
  const int64_t nqb = ceil_div(Lq, s.block_q), nkb = ceil_div(Lk, s.block_k);
  ASSERT_EQ(mask.q_len(), Lq);
  ASSERT_EQ(mask.k_len(), Lk);
  ASSERT_EQ(mask.block_q(), s.block_q);
  ASSERT_EQ(mask.block_k(), s.block_k);
  ASSERT_EQ(mask.num_q_blocks(), nqb);
  ASSERT_EQ(mask.num_k_blocks(), nkb);
  const auto& offsets = mask.row_offsets();
  const auto& indices = mask.kv_indices();
  const auto& full = mask.kv_full();
  ASSERT_EQ(static_cast<int64_t>(offsets.size()), G * nqb + 1);
  ASSERT_EQ(offsets.front(), 0);
  ASSERT_EQ(offsets.back(), static_cast<int64_t>(indices.size()));
  ASSERT_EQ(full.size(), indices.size());
  for (int64_t r = 0; r < G * nqb; ++r) {
    ASSERT_LE(offsets[r], offsets[r + 1]);
    for (int64_t at = offsets[r]; at < offsets[r + 1]; ++at) {
      ASSERT_GE(indices[at], 0);
      ASSERT_LT(indices[at], nkb);
      if (at > offsets[r]) {
        ASSERT_LT(indices[at - 1], indices[at]) << "row " << r << " not sorted/unique";
      }
      ASSERT_LE(full[at], 1);
    }
  }

  // Every block of every query head against the pairs it covers.
  const BlockMaskView v = mask.view();
  int64_t total_allowed = 0;
  for (int64_t h = 0; h < H; ++h) {
    const int64_t r_head = v.mask_head(h, H);
    for (int64_t qb = 0; qb < nqb; ++qb) {
      std::vector<std::pair<int32_t, uint8_t>> want, got;
      for (int64_t kb = 0; kb < nkb; ++kb) {
        int64_t count = 0;
        for (int64_t i = v.q_first(qb); i < v.q_last(qb); ++i)
          for (int64_t j = v.k_first(kb); j < v.k_last(kb); ++j)
            count += allowed[(h * Lq + i) * Lk + j];
        total_allowed += count;
        const int64_t pairs = (v.q_last(qb) - v.q_first(qb)) * (v.k_last(kb) - v.k_first(kb));
        if (count > 0) want.emplace_back(static_cast<int32_t>(kb), count == pairs ? 1 : 0);
      }
      const int64_t r = v.row(r_head, qb);
      for (int64_t at = v.row_begin(r); at < v.row_end(r); ++at)
        got.emplace_back(v.kv_indices[at], v.kv_full[at]);
      ASSERT_EQ(got, want) << "query head " << h << ", query block " << qb
                           << " (pairs: key block, full)";
    }
  }
  ASSERT_EQ(mask.kept_pairs(H), total_allowed);
  EXPECT_DOUBLE_EQ(mask.density(H),
                   static_cast<double>(total_allowed) / (static_cast<double>(H) * Lq * Lk));
  for (int64_t h = 0; h < H; ++h)
    for (int64_t i = 0; i < Lq; ++i)
      for (int64_t j = 0; j < Lk; ++j)
        ASSERT_EQ(mask.allowed(h, H, i, j), allowed[(h * Lq + i) * Lk + j] != 0)
            << "BlockMask::allowed(h=" << h << ", i=" << i << ", j=" << j << ")";
}

const int64_t kLengths[] = {1, 2, 7, 16, 33, 64, 127, 130, 300};
const int64_t kBlocks[] = {1, 3, 16, 64};

MaskShape random_shape(std::mt19937_64& rng) {
  MaskShape s;
  auto length = [&] { return draw(rng, 0, 2) ? kLengths[draw(rng, 0, 8)] : draw(rng, 1, 160); };
  auto block = [&] { return draw(rng, 0, 2) ? kBlocks[draw(rng, 0, 3)] : draw(rng, 1, 70); };
  s.q_len = length();
  s.k_len = draw(rng, 0, 3) ? length() : s.q_len;
  s.block_q = block();
  s.block_k = draw(rng, 0, 2) ? block() : s.block_q;
  s.num_heads = draw(rng, 1, 4);
  if (s.q_len * s.k_len > 40000) s.num_heads = std::min<int64_t>(s.num_heads, 2);
  return s;
}

TEST(BlockMaskBuild, EveryPatternKindRandomDraws) {
  std::mt19937_64 rng(2024);
  for (int kind = 0; kind < kNumLeafKinds; ++kind)
    for (int n = 0; n < 40; ++n) {
      const MaskShape s = random_shape(rng);
      expect_plan_matches(random_leaf(rng, kind, s.q_len, s.k_len, s.num_heads), s);
      if (HasFatalFailure()) return;
    }
}

TEST(BlockMaskBuild, CompositesRandomDraws) {
  std::mt19937_64 rng(77);
  for (int n = 0; n < 400; ++n) {
    const MaskShape s = random_shape(rng);
    expect_plan_matches(random_case(rng, s.q_len, s.k_len, s.num_heads), s);
    if (HasFatalFailure()) return;
  }
}

// A framed pattern on a random rectangle of a random problem plans exactly
// the pairs the whole pattern allows there: the spec asked at the larger
// problem's rows, positions and keys.
TEST(BlockMaskBuild, FramedPatternsPlanTheirRectangle) {
  std::mt19937_64 rng(5151);
  int checked = 0;
  for (int n = 0; n < 400; ++n) {
    const MaskShape whole = random_shape(rng);
    if (whole.q_len == 0 || whole.k_len == 0) continue;
    const Case c = random_case(rng, whole.q_len, whole.k_len, whole.num_heads);
    const int64_t row = draw(rng, 0, whole.q_len - 1), key = draw(rng, 0, whole.k_len - 1);
    MaskShape s = whole;
    s.q_len = draw(rng, 1, whole.q_len - row);
    s.k_len = draw(rng, 1, whole.k_len - key);
    const int64_t shift = whole.k_len - whole.q_len;
    const Case framed{c.name + " framed at row " + std::to_string(row) + ", key " + std::to_string(key) + " of " +
                          std::to_string(whole.q_len) + "x" + std::to_string(whole.k_len),
                      c.pattern.framed(row, key, whole.q_len, whole.k_len),
                      [spec = c.spec, row, key, shift](int64_t h, int64_t i, int64_t, int64_t j) {
                        return spec(h, row + i, row + i + shift, key + j);
                      }};
    expect_plan_matches(framed, s);
    if (HasFatalFailure()) return;
    ++checked;
  }
  EXPECT_GT(checked, 300);
}

TEST(BlockMaskBuild, FramedPatternsCheckTheirRectangle) {
  const Pattern framed = Pattern::sliding_window(8).framed(100, 60, 300, 200);
  EXPECT_NO_THROW(BlockMask::build(framed, MaskShape{200, 140, 16, 16, 1}));
  expect_error([&] { BlockMask::build(framed, MaskShape{201, 140, 16, 16, 1}); }, "Lq must be <= 200");
  expect_error([&] { BlockMask::build(framed, MaskShape{200, 141, 16, 16, 1}); }, "Lk must be <= 140");
  expect_error([&] { framed.framed(0, 0, 300, 200); }, "already framed");
  expect_error([&] { Pattern::unite(framed, Pattern::causal()); }, "cannot combine a pattern with the frame");
  expect_error([&] { Pattern::causal().framed(301, 0, 300, 200); }, "first_row must be in [0, q_len=300]");
  expect_error([&] { Pattern::bigbird(256, 16).framed(0, 0, 256, 300); }, "bigbird pattern was built for");
  EXPECT_FALSE(framed.is_prefix_stable());
  EXPECT_NE(framed.describe().find("framed at row 100, key 60 of 300x200"), std::string::npos) << framed.describe();
}

TEST(BlockMaskBuild, OddShapesEveryKind) {
  const std::pair<int64_t, int64_t> lengths[] = {{1, 1},     {1, 7},     {7, 1},
                                                 {127, 300}, {300, 127}, {300, 300}};
  const std::pair<int64_t, int64_t> blocks[] = {{1, 1}, {3, 16}, {16, 3}, {64, 64}};
  std::mt19937_64 rng(5);
  for (const auto& [lq, lk] : lengths)
    for (const auto& [bq, bk] : blocks)
      for (int kind = 0; kind < kNumLeafKinds; ++kind) {
        const MaskShape s{lq, lk, bq, bk, kind == 8 ? 3 : 1};
        expect_plan_matches(random_leaf(rng, kind, lq, lk, s.num_heads), s);
        if (HasFatalFailure()) return;
      }
}

TEST(BlockMaskBuild, DilatedBranchesAndHeads) {
  for (bool causal : {false, true})
    for (int64_t heads : {1, 3, 4}) {
      expect_plan_matches(dilated_case({8}, {1}, causal), {50, 50, 4, 4, heads});
      expect_plan_matches(dilated_case({16}, {4}, causal), {77, 77, 8, 8, heads});
      expect_plan_matches(dilated_case({8, 16, 32}, {1, 2, 4}, causal), {100, 130, 16, 8, heads});
      expect_plan_matches(dilated_case({5, 9}, {3, 2}, causal), {130, 100, 7, 3, heads});
      if (HasFatalFailure()) return;
    }
  // Rate 1 reads no head: one shared plan.
  EXPECT_FALSE(Pattern::dilated({8}, {1}).head_dependent());
  EXPECT_EQ(BlockMask::build(Pattern::dilated({8, 4}, {1, 1}), {64, 64, 16, 16, 4}).num_heads(), 1);
  EXPECT_EQ(BlockMask::build(Pattern::dilated({8}, {2}), {64, 64, 16, 16, 4}).num_heads(), 4);
}

TEST(BlockMaskBuild, BigBirdAndLongformerVariants) {
  std::mt19937_64 rng(8);
  for (bool causal : {false, true}) {
    for (uint64_t seed : {0ull, 1ull, 99ull}) {
      expect_plan_matches(bigbird_case(300, 16, 3, 1, 3, seed, causal), {300, 300, 16, 16, 1});
      expect_plan_matches(bigbird_case(300, 7, 5, 2, 2, seed, causal), {200, 300, 16, 64, 1});
      expect_plan_matches(bigbird_case(127, 8, 1, 0, 4, seed, causal), {300, 127, 3, 16, 1});
    }
    expect_plan_matches(longformer_case(10, {}, causal), {127, 127, 16, 16, 1});
    expect_plan_matches(longformer_case(9, {0, 5, 126}, causal), {127, 127, 16, 3, 1});
    expect_plan_matches(longformer_case(4, {50, 3}, causal), {60, 130, 7, 16, 1});
    expect_plan_matches(longformer_case(0, {129}, causal), {200, 130, 16, 16, 1});
    if (HasFatalFailure()) return;
  }
}

TEST(BlockMaskBuild, CustomSharedPerHeadAndBsr) {
  std::mt19937_64 rng(9);
  for (bool causal : {false, true})
    for (bool bsr : {false, true})
      for (int64_t heads : {1, 4}) {
        expect_plan_matches(custom_case(rng, 100, 100, heads, 16, 16, 0.3, causal, bsr),
                            {100, 100, 16, 16, 4});
        expect_plan_matches(custom_case(rng, 127, 300, heads, 8, 32, 0.2, causal, bsr),
                            {127, 300, 16, 16, 4});
        expect_plan_matches(custom_case(rng, 300, 127, heads, 5, 3, 0.5, causal, bsr),
                            {300, 127, 64, 1, 4});
        if (HasFatalFailure()) return;
      }
  // A custom row with no blocks gives an empty plan row.
  const Pattern empty_row = Pattern::custom({1, 1, 0, 0, 1, 0}, 1, 3, 2, 4, 4);
  const BlockMask m = BlockMask::build(empty_row, {12, 8, 4, 4, 1});
  EXPECT_EQ(m.row_offsets(), (std::vector<int64_t>{0, 2, 2, 3}));
  EXPECT_EQ(m.kv_indices(), (std::vector<int32_t>{0, 1, 0}));
  EXPECT_EQ(m.kv_full(), (std::vector<uint8_t>{1, 1, 1}));
}

TEST(BlockMaskBuild, PerHeadGroupsAndCausalVariants) {
  std::mt19937_64 rng(10);
  const Case a = sliding_window_case(5, 2, false), b = strided_case(4),
             c = dilated_case({12}, {3}, false);
  const Case d = longformer_case(6, {0}, false);
  expect_plan_matches(per_head_case({a, b, c, d}, 4), {90, 90, 8, 8, 4});
  expect_plan_matches(per_head_case({a, c}, 4), {90, 70, 8, 16, 4});  // two heads per pattern
  expect_plan_matches(per_head_case({d}, 3), {50, 90, 8, 8, 3});
  expect_plan_matches(with_causal_case(per_head_case({a, c}, 2)), {70, 90, 8, 8, 2});
  expect_plan_matches(with_causal_case(unite_case(a, d)), {90, 70, 16, 8, 1});
  expect_plan_matches(with_causal_case(block_diagonal_case(10, false)), {90, 90, 16, 16, 1});
  expect_plan_matches(intersect_case(streaming_case(4, 20), dilated_case({30}, {2}, false)),
                      {120, 120, 16, 16, 2});
  expect_plan_matches(
      unite_case(dilated_case({64, 32}, {4, 2}, true), sliding_window_case(15, 0, true)),
      {200, 200, 16, 16, 4});
}

// Parameters far beyond the sequence (up to INT64_MAX, as a user may write
// for "unbounded") either give the exact plan or are rejected with
// spattn::Error; they must never overflow into a wrong mask.
void expect_plan_or_rejected(const std::function<Case()>& make, const MaskShape& s) {
  try {
    expect_plan_matches(make(), s);
  } catch (const Error&) {
  }
}

TEST(BlockMaskBuild, HugeParametersActUnboundedOrAreRejected) {
  const int64_t big = std::numeric_limits<int64_t>::max();
  for (const auto& [lq, lk] :
       std::vector<std::pair<int64_t, int64_t>>{{40, 40}, {60, 25}, {25, 60}}) {
    const MaskShape s{lq, lk, 16, 8, 1};
    const std::function<Case()> makers[] = {
        [&] { return sliding_window_case(big, big, false); },
        [&] { return sliding_window_case(big, 0, false); },
        [&] { return sliding_window_case(0, big, true); },
        [&] { return window_case(big); },
        [&] { return streaming_case(big, big); },
        [&] { return streaming_case(0, big); },
        [&] { return strided_case(big); },
        [&] { return fixed_case(big, big); },
        [&] { return fixed_case(big, 1); },
        [&] { return fixed_case(big, big - 1); },
        [&] { return block_diagonal_case(big, false); },
        [&] { return longformer_case(big, {3}, false); },
        [&] { return dilated_case({big}, {1}, false); },
        [&] { return bigbird_case(lk, big, 3, 1, 0, 1, false); },
        [&] { return bigbird_case(lk, big, 3, 0, 0, 1, false); },
        [&] { return bigbird_case(lk, 4, big, 1, 1, 1, false); },
        [&] { return bigbird_case(lk, 4, 3, big, 0, 1, false); },
        [&] {
          return custom_case(*std::make_unique<std::mt19937_64>(3).get(), lq, lk, 1, big, big, 0.9,
                             false, true);
        },
    };
    for (const auto& make : makers) {
      expect_plan_or_rejected(make, s);
      expect_plan_or_rejected(make, {lq, lk, big, big, 1});
    }
    expect_plan_or_rejected(
        [&] {
          return dilated_case({big, 4}, {big, 2}, true);
        },
        {lq, lk, 16, 8, 3});
  }
}

// A mask assembled from BSR arrays behaves like the built one.
TEST(BlockMaskBsr, RoundTripsTheBuiltPlan) {
  const Pattern p = Pattern::unite(Pattern::streaming(3, 9), Pattern::dilated({16}, {2}));
  const BlockMask built = BlockMask::build(p, {70, 90, 8, 16, 2});
  const BlockMask copy(70, 90, 8, 16, built.num_heads(), built.row_offsets(), built.kv_indices(),
                       built.kv_full(), std::make_shared<Pattern>(p));
  EXPECT_EQ(copy.kept_pairs(2), built.kept_pairs(2));
  EXPECT_EQ(copy.num_full_blocks(), built.num_full_blocks());
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t i = 0; i < 70; ++i)
      for (int64_t j = 0; j < 90; ++j)
        ASSERT_EQ(copy.allowed(h, 2, i, j), p.allowed(h, 2, 70, 90, i, j));
  // Only build() vouches that the blocks are the pattern's plan; copies keep it.
  EXPECT_TRUE(built.is_pattern_plan());
  EXPECT_FALSE(copy.is_pattern_plan());
  const BlockMask copy_of_built = built;
  EXPECT_TRUE(copy_of_built.is_pattern_plan());
  // All-full blocks need no pattern.
  const BlockMask plain(10, 10, 4, 4, 1, {0, 1, 2, 3}, {0, 1, 2}, {1, 1, 1});
  EXPECT_FALSE(plain.is_pattern_plan());
  EXPECT_EQ(plain.kept_pairs(1), 16 + 16 + 4);
  EXPECT_TRUE(plain.allowed(0, 1, 9, 9));
  EXPECT_FALSE(plain.allowed(0, 1, 9, 0));
}

// Constructs a 10 x 10 mask with 4 x 4 blocks (3 x 3 grid, one head) from the
// given arrays and expects spattn::Error mentioning every `needles` entry.
void expect_bsr_rejected(std::vector<int64_t> offsets, std::vector<int32_t> indices,
                         std::vector<uint8_t> full, std::vector<std::string> needles,
                         bool with_pattern = true, int64_t block = 4) {
  try {
    BlockMask m(10, 10, block, 4, 1, std::move(offsets), std::move(indices), std::move(full),
                with_pattern ? std::make_shared<Pattern>(Pattern::causal()) : nullptr);
    ADD_FAILURE() << "accepted; expected an error naming " << needles.front();
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const std::string& n : needles)
      EXPECT_NE(msg.find(n), std::string::npos) << "message: " << msg;
  }
}

TEST(BlockMaskBsr, RejectsBadArrays) {
  expect_bsr_rejected({0, 1, 2}, {0, 1}, {1, 1}, {"row_offsets", "4", "3"});         // too few rows
  expect_bsr_rejected({1, 1, 2, 3}, {0, 1, 2}, {1, 1, 1}, {"row_offsets[0]", "1"});  // bad start
  expect_bsr_rejected({0, 1, 2, 4}, {0, 1, 2}, {1, 1, 1}, {"row_offsets[last]", "4"});  // bad end
  expect_bsr_rejected({0, 2, 1, 3}, {0, 1, 2}, {1, 1, 1},
                      {"non-decreasing", "2", "1"});                                // decreasing
  expect_bsr_rejected({0, 1, 2, 3}, {0, 3, 2}, {1, 1, 1}, {"kv_indices[1]", "3"});  // out of range
  expect_bsr_rejected({0, 1, 2, 3}, {0, -1, 2}, {1, 1, 1}, {"kv_indices[1]", "-1"});  // negative
  expect_bsr_rejected({0, 2, 2, 3}, {1, 0, 2}, {1, 1, 1}, {"sorted", "1 then 0"});    // unsorted
  expect_bsr_rejected({0, 2, 2, 3}, {1, 1, 2}, {1, 1, 1}, {"unique", "1 then 1"});    // duplicate
  expect_bsr_rejected({0, 1, 2, 3}, {0, 1, 2}, {1, 1}, {"kv_full", "3", "2"});        // size
  expect_bsr_rejected({0, 1, 2, 3}, {0, 1, 2}, {1, 2, 1}, {"kv_full[1]", "2"});       // not 0/1
  expect_bsr_rejected({0, 1, 2, 3}, {0, 1, 2}, {1, 0, 1}, {"kv_full[1]", "partial"}, false);
  expect_bsr_rejected({0, 1}, {0}, {1}, {"block_q", "0"}, true, 0);
  expect_bsr_rejected({0, 1}, {0}, {1}, {"block_q", "-4"}, true, -4);
  try {
    BlockMask(-1, 10, 4, 4, 1, {0}, {}, {});
    ADD_FAILURE() << "q_len -1 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("q_len"), std::string::npos) << e.what();
  }
  try {
    BlockMask(10, 10, 4, 4, 0, {0}, {}, {});
    ADD_FAILURE() << "num_heads 0 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("num_heads"), std::string::npos) << e.what();
  }
  // A bigbird pattern for another key length cannot back the mask.
  try {
    BlockMask(10, 10, 4, 4, 1, {0, 1, 2, 3}, {0, 1, 2}, {0, 0, 0},
              std::make_shared<Pattern>(Pattern::bigbird(64, 4)));
    ADD_FAILURE() << "bigbird for Lk=64 accepted for Lk=10";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Lk=10"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace spattn::testing
