// tests/cpp/test_pattern_codec.cpp - encode_pattern / decode_pattern.
//
// Round trips: every random pattern of pattern_cases.hpp (leaves, unions,
// intersections, per-head mixes, causal variants) over odd shapes is encoded,
// decoded and compared pair by pair with the original's predicate and the
// independent spec; re-encoding gives the same arrays; shared tables are
// stored once. Decoding rejects malformed input (bad version, truncated code,
// unknown kinds, table offsets out of range, invalid parameters) with
// spattn::Error naming what is wrong.
#include <gtest/gtest.h>

#include <string>

#include "pattern_cases.hpp"
#include "spattn/error.hpp"
#include "spattn/pattern_codec.hpp"

namespace spattn::testing {
namespace {

struct Shape {
  int64_t q_len, k_len, heads;
};

void expect_same_pairs(const Case& c, const Pattern& decoded, const Shape& s) {
  for (int64_t h = 0; h < s.heads; ++h)
    for (int64_t i = 0; i < s.q_len; ++i)
      for (int64_t j = 0; j < s.k_len; ++j) {
        const bool want = c.spec(h, i, i + s.k_len - s.q_len, j);
        ASSERT_EQ(decoded.allowed(h, s.heads, s.q_len, s.k_len, i, j), want)
            << c.name << " h=" << h << " i=" << i << " j=" << j << " Lq=" << s.q_len
            << " Lk=" << s.k_len;
      }
}

TEST(PatternCodec, RandomPatternsRoundTrip) {
  std::mt19937_64 rng(20240607);
  const Shape shapes[] = {{1, 1, 1}, {7, 7, 2}, {37, 53, 4}, {61, 29, 3}, {96, 96, 6}};
  for (const Shape& s : shapes) {
    for (int trial = 0; trial < 60; ++trial) {
      const Case c = random_case(rng, s.q_len, s.k_len, s.heads);
      const EncodedPattern encoded = encode_pattern(c.pattern);
      ASSERT_EQ(encoded.code[0], kPatternCodeVersion);
      ASSERT_EQ(encoded.code[1], c.pattern.num_exprs());
      const Pattern decoded = decode_pattern(encoded);
      EXPECT_EQ(decoded.num_exprs(), c.pattern.num_exprs()) << c.name;
      EXPECT_EQ(decoded.head_dependent(), c.pattern.head_dependent()) << c.name;
      EXPECT_EQ(decoded.describe(), c.pattern.describe()) << c.name;
      expect_same_pairs(c, decoded, s);
      const EncodedPattern again = encode_pattern(decoded);
      EXPECT_EQ(again.code, encoded.code) << c.name;
      EXPECT_EQ(again.table_i32, encoded.table_i32) << c.name;
      EXPECT_EQ(again.table_i64, encoded.table_i64) << c.name;
    }
  }
}

TEST(PatternCodec, LayoutOfASlidingWindow) {
  const EncodedPattern e = encode_pattern(Pattern::sliding_window(5, 2, true));
  const std::vector<int64_t> want = {kPatternCodeVersion, 1, 0, 0, 0, 0, 0, 0, 1,
                                     static_cast<int64_t>(TermKind::SlidingWindow), 1, 5, 2, 0,
                                     0, 0, 0, 0, -1, -1, -1};
  EXPECT_EQ(e.code, want);
  EXPECT_TRUE(e.table_i32.empty());
  EXPECT_TRUE(e.table_i64.empty());
}

TEST(PatternCodec, SharedTablesAreStoredOnce) {
  const Pattern bigbird = Pattern::bigbird(300, 16, 3, 1, 2, 7);
  const Pattern longformer = Pattern::longformer(8, {0, 5, 100});
  const Pattern mixed = Pattern::per_head({bigbird, bigbird, Pattern::unite(longformer, bigbird), longformer});
  const EncodedPattern e = encode_pattern(mixed);
  const int64_t blocks = (300 + 15) / 16;
  EXPECT_EQ(static_cast<int64_t>(e.table_i32.size()), blocks * 2);
  EXPECT_EQ(e.table_i64, (std::vector<int64_t>{0, 5, 100}));
  const Pattern decoded = decode_pattern(e);
  for (int64_t h = 0; h < 4; ++h)
    for (int64_t i = 0; i < 300; i += 7)
      for (int64_t j = 0; j < 300; j += 3)
        ASSERT_EQ(decoded.allowed(h, 4, 300, 300, i, j), mixed.allowed(h, 4, 300, 300, i, j));
  EXPECT_THROW(decoded.check_lengths(300, 320), Error);  // the BigBird table keeps its length
}

// Expects decode to throw an Error whose message contains `needle`.
void expect_rejected(const EncodedPattern& e, const std::string& needle) {
  try {
    decode_pattern(e);
    ADD_FAILURE() << "decode accepted a malformed code; expected an error mentioning '" << needle << "'";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find(needle), std::string::npos)
        << "message '" << error.what() << "' does not mention '" << needle << "'";
  }
}

constexpr int64_t kExprAt = 7;                 // after the header (version, E, the frame)
constexpr int64_t kFirstTerm = kExprAt + 2;  // after the expression's op and term count

TEST(PatternCodec, RejectsMalformedCode) {
  const EncodedPattern good = encode_pattern(Pattern::sliding_window(4, 1));

  EncodedPattern e = good;
  e.code[0] = 99;
  expect_rejected(e, "version");

  e = good;
  e.code.pop_back();
  expect_rejected(e, "ends inside expression 0");

  e = good;
  e.code.push_back(0);
  expect_rejected(e, "words after its last expression");

  e = good;
  e.code[1] = 0;
  expect_rejected(e, "expression count");

  e = good;
  e.code[kExprAt] = 2;
  expect_rejected(e, "op must be 0 (or) or 1 (and)");

  e = good;
  e.code[kExprAt + 1] = kMaxTerms + 1;
  expect_rejected(e, "term count");

  e = good;
  e.code[kFirstTerm] = 42;
  expect_rejected(e, "kind must be in");

  e = good;
  e.code[kFirstTerm + 1] = 3;
  expect_rejected(e, "causal must be 0 or 1");

  e = good;
  e.code[kFirstTerm + 2] = -1;
  expect_rejected(e, "window_left must be >= 0, got -1");

  e = encode_pattern(Pattern::streaming(4, 16));
  e.code[kFirstTerm + 1] = 0;
  expect_rejected(e, "streaming terms are always causal");

  e = encode_pattern(Pattern::block_diagonal(8));
  e.code[kFirstTerm + 2] = 0;
  expect_rejected(e, "block must be > 0, got 0");

  e = encode_pattern(Pattern::fixed(8, 2));
  e.code[kFirstTerm + 3] = 9;
  expect_rejected(e, "summary must be <= stride");
}

TEST(PatternCodec, RejectsBadTables) {
  const EncodedPattern bigbird = encode_pattern(Pattern::bigbird(200, 16, 3, 1, 3, 1));
  EncodedPattern e = bigbird;
  e.table_i32.pop_back();
  expect_rejected(e, "lies outside table_i32");

  e = bigbird;
  e.table_i32[0] = 1000;
  expect_rejected(e, "bigbird random block 0 must be in [-1, 13)");

  e = bigbird;
  e.table_i32.clear();
  expect_rejected(e, "lies outside table_i32 of 0 entries");

  const EncodedPattern longformer = encode_pattern(Pattern::longformer(6, {3, 9}));
  e = longformer;
  e.code[kFirstTerm + 11] = 1;  // tokens_at: [1, 3) runs past the 2 entries
  expect_rejected(e, "lies outside table_i64");

  const EncodedPattern custom =
      encode_pattern(Pattern::custom({1, 0, 1, 1, 0, 1}, 1, 2, 3, 4, 4));
  e = custom;
  e.table_i32[0] = 7;
  expect_rejected(e, "must be in [0, 3), got 7");

  e = custom;
  e.table_i64.back() = 100;
  expect_rejected(e, "lies outside table_i32");
}

TEST(PatternCodec, UnsortedLongformerTokensAreSortedByTheBuilder) {
  EncodedPattern e = encode_pattern(Pattern::longformer(6, {3, 9}));
  e.table_i64 = {9, 3};
  const Pattern decoded = decode_pattern(e);
  EXPECT_EQ(encode_pattern(decoded).table_i64, (std::vector<int64_t>{3, 9}));
}

}  // namespace
}  // namespace spattn::testing
