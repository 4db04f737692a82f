// tests/cpp/test_reference.cpp - the fp64 reference backend against the
// independent dense oracle.
//
// attention(..., Backend::Reference) walks the BlockMask; the oracle
// (dense_masked_attention in test_support) loops over every pair and asks
// Pattern::allowed. Both accumulate in fp64 from the same rounded inputs, so
// with fp64 output they agree to ~1e-15; the tolerance only reflects the
// output dtype's rounding. Covered: odd lengths (1, 7, 127, 1000, one 4099),
// Lq != Lk both ways, GQA, BHLD/BLHD and mixed layouts, every input dtype,
// fp32/fp64 (and fp16/bf16) outputs, empty rows (output exactly 0, LSE -inf),
// custom scales, head-dependent patterns. Outputs are poisoned first, so an
// element the backend forgets stays NaN. The naive dense baseline is checked
// against the reference on small shapes. Random patterns come from
// pattern_cases.hpp.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <optional>
#include <sstream>

#include "pattern_cases.hpp"
#include "test_support.hpp"

namespace spattn::testing {
namespace {

struct Problem {
  int64_t batch = 1, q_heads = 2, kv_heads = 2, q_len = 7, k_len = 7, head_dim = 8;
  DType in = DType::F32, out = DType::F64;
  Layout q_layout = Layout::BHLD, kv_layout = Layout::BHLD, v_layout = Layout::BHLD,
         out_layout = Layout::BHLD;
  int64_t block_q = 16, block_k = 16;
  std::optional<double> scale;
};

std::string describe(const Problem& p, const Pattern& pattern) {
  std::ostringstream os;
  os << pattern.describe() << " B=" << p.batch << " Hq=" << p.q_heads << " Hkv=" << p.kv_heads
     << " Lq=" << p.q_len << " Lk=" << p.k_len << " D=" << p.head_dim << " in=" << dtype_name(p.in)
     << " out=" << dtype_name(p.out) << " layouts q/k/v/out=" << int(p.q_layout) << int(p.kv_layout)
     << int(p.v_layout) << int(p.out_layout) << " blocks " << p.block_q << "x" << p.block_k;
  if (p.scale) os << " scale=" << *p.scale;
  return os.str();
}

// Relative rounding unit of an output dtype (half an ulp, with slack for the
// two fp64 summation orders landing on either side of a rounding boundary).
double output_tolerance(DType t) {
  switch (t) {
    case DType::F64:
      return 1e-12;
    case DType::F32:
      return 1.2e-7;
    case DType::F16:
      return 1e-3;
    case DType::BF16:
      return 8e-3;
  }
  return 0.0;
}

// Runs the reference on fresh random inputs and checks every output element
// and every LSE against the oracle; counts the oracle's empty rows into
// `empty_rows` when given.
void expect_reference_matches(const Problem& p, const Pattern& pattern, uint64_t seed,
                              int64_t* empty_rows = nullptr) {
  SCOPED_TRACE(describe(p, pattern));
  std::mt19937_64 rng(seed);
  HostTensor q(p.in, p.batch, p.q_heads, p.q_len, p.head_dim, p.q_layout);
  HostTensor k(p.in, p.batch, p.kv_heads, p.k_len, p.head_dim, p.kv_layout);
  HostTensor v(p.in, p.batch, p.kv_heads, p.k_len, p.head_dim, p.v_layout);
  HostTensor out(p.out, p.batch, p.q_heads, p.q_len, p.head_dim, p.out_layout);
  q.fill_random(rng);
  k.fill_random(rng);
  v.fill_random(rng);
  out.poison();
  std::vector<float> lse_data(static_cast<size_t>(p.batch * p.q_heads * p.q_len),
                              std::numeric_limits<float>::quiet_NaN());
  const TensorView lse = make_lse(lse_data.data(), p.batch, p.q_heads, p.q_len);

  const BlockMask mask =
      BlockMask::build(pattern, {p.q_len, p.k_len, p.block_q, p.block_k, p.q_heads});
  AttentionOptions options;
  options.backend = Backend::Reference;
  options.scale = p.scale;
  attention(q.view, k.view, v.view, out.view, mask, options, &lse);

  const double scale = p.scale ? *p.scale : 1.0 / std::sqrt(static_cast<double>(p.head_dim));
  const DenseResult want = dense_masked_attention(q.view, k.view, v.view, pattern, scale);
  const std::vector<double> got = out.to_double();
  const double tol = output_tolerance(p.out);
  const double floor = p.out == DType::F16 ? 0x1p-25 : 1e-300;  // fp16 subnormal spacing
  if (empty_rows) *empty_rows = 0;
  for (int64_t row = 0; row < p.batch * p.q_heads * p.q_len; ++row) {
    const double want_lse = want.lse[row], got_lse = lse_data[row];
    if (std::isinf(want_lse)) {
      if (empty_rows) ++*empty_rows;
      EXPECT_TRUE(std::isinf(got_lse) && got_lse < 0)
          << "row " << row << ": LSE " << got_lse << ", want -inf";
    } else {
      EXPECT_LE(std::abs(got_lse - want_lse), 1.2e-7 * std::abs(want_lse) + 1e-12)
          << "row " << row << ": LSE " << got_lse << ", want " << want_lse;
    }
    double row_norm = 0.0;
    for (int64_t d = 0; d < p.head_dim; ++d)
      row_norm = std::max(row_norm, std::abs(want.out[row * p.head_dim + d]));
    for (int64_t d = 0; d < p.head_dim; ++d) {
      const size_t at = static_cast<size_t>(row * p.head_dim + d);
      ASSERT_FALSE(std::isnan(got[at])) << "row " << row << " d " << d << " was never written";
      if (std::isinf(want_lse)) {
        ASSERT_EQ(got[at], 0.0) << "empty row " << row << " d " << d;
        continue;
      }
      // Elementwise: the dtype's rounding of the value, plus a row-relative
      // floor for values far below the row's largest entry.
      ASSERT_LE(std::abs(got[at] - want.out[at]),
                tol * std::abs(want.out[at]) + 1e-13 * row_norm + floor)
          << "row " << row << " d " << d << ": got " << got[at] << ", want " << want.out[at];
    }
  }
  if (p.out == DType::F64) {
    EXPECT_LT(relative_error(got, want.out), 1e-12);
  }
}

const Pattern& pattern_for(int n) {
  static const std::vector<Pattern> patterns = {
      Pattern::dense(),
      Pattern::causal(),
      Pattern::sliding_window(5),
      Pattern::sliding_window(3, 4, false),
      Pattern::streaming(2, 9),
      Pattern::strided(5),
      Pattern::fixed(6, 2),
      Pattern::block_diagonal(10, true),
      Pattern::longformer(6, {0}),
      Pattern::unite(Pattern::dilated({16, 32}, {2, 4}, true), Pattern::sliding_window(4)),
  };
  return patterns[static_cast<size_t>(n) % patterns.size()];
}

TEST(ReferenceBackend, OddLengthsBothWays) {
  const int64_t lengths[] = {1, 7, 127, 1000};
  int n = 0;
  for (int64_t lq : lengths)
    for (int64_t lk : lengths) {
      Problem p;
      p.q_len = lq;
      p.k_len = lk;
      p.head_dim = lq * lk >= 127 * 1000 ? 4 : 8;
      p.q_heads = p.kv_heads = lq * lk >= 127 * 1000 ? 1 : 2;
      p.block_q = 16 + n % 3 * 24;
      p.block_k = 64 - n % 4 * 16;
      for (int repeat = 0; repeat < 2; ++repeat, ++n)
        expect_reference_matches(p, pattern_for(n), 100 + n);
      if (HasFatalFailure()) return;
    }
}

TEST(ReferenceBackend, LongSparseSequence) {
  Problem p;
  p.q_len = p.k_len = 4099;
  p.q_heads = p.kv_heads = 1;
  p.head_dim = 4;
  p.block_q = p.block_k = 128;
  expect_reference_matches(p, Pattern::streaming(4, 33), 1);
}

TEST(ReferenceBackend, GroupedQueryHeadsAndBatch) {
  for (int64_t kv_heads : {2, 1}) {
    Problem p;
    p.batch = 2;
    p.q_heads = 4;
    p.kv_heads = kv_heads;
    p.q_len = 37;
    p.k_len = 53;
    p.block_q = 8;
    p.block_k = 16;
    expect_reference_matches(p, Pattern::causal(), 2);
    expect_reference_matches(p, Pattern::dilated({12, 24}, {2, 3}), 3);  // reads the head index
    expect_reference_matches(p,
                             Pattern::per_head({Pattern::causal(), Pattern::sliding_window(4),
                                                Pattern::dense(), Pattern::strided(3)}),
                             4);
    expect_reference_matches(
        p, Pattern::per_head({Pattern::streaming(1, 4), Pattern::block_diagonal(9)}), 5);
  }
}

TEST(ReferenceBackend, LayoutsAndMixedLayouts) {
  const Layout both[] = {Layout::BHLD, Layout::BLHD};
  int n = 0;
  for (Layout lq : both)
    for (Layout lk : both)
      for (Layout lv : both)
        for (Layout lo : both) {
          Problem p;
          p.batch = 2;
          p.q_heads = 4;
          p.kv_heads = 2;
          p.q_len = 29;
          p.k_len = 41;
          p.q_layout = lq;
          p.kv_layout = lk;
          p.v_layout = lv;
          p.out_layout = lo;
          expect_reference_matches(p, pattern_for(n), 10 + n);
          ++n;
        }
}

TEST(ReferenceBackend, EveryInputAndOutputDtype) {
  const DType all[] = {DType::F32, DType::F16, DType::BF16, DType::F64};
  int n = 0;
  for (DType in : all)
    for (DType out : all) {
      Problem p;
      p.in = in;
      p.out = out;
      p.q_len = 33;
      p.k_len = 50;
      p.q_heads = 2;
      p.kv_heads = 1;
      p.out_layout = n % 2 ? Layout::BLHD : Layout::BHLD;
      expect_reference_matches(p, pattern_for(n), 30 + n);
      ++n;
    }
}

TEST(ReferenceBackend, EmptyRowsGiveZeroAndMinusInfinity) {
  Problem p;
  int64_t empty = 0;
  // Causal with Lq > Lk: the first 25 rows of every head see no key.
  p.q_len = 40;
  p.k_len = 15;
  expect_reference_matches(p, Pattern::causal(), 40, &empty);
  EXPECT_EQ(empty, 2 * 25);
  // A custom mask with an empty block row (rows 8..15 of each head).
  p.q_len = p.k_len = 24;
  expect_reference_matches(p, Pattern::custom({1, 0, 1, 0, 0, 0, 0, 1, 1}, 1, 3, 3, 8, 8), 41,
                           &empty);
  EXPECT_EQ(empty, 2 * 8);
  // Intersections can empty rows that each operand keeps.
  p.q_len = p.k_len = 30;
  expect_reference_matches(
      p, Pattern::intersect(Pattern::sliding_window(2, 0, false), Pattern::dilated({30}, {4})), 42,
      &empty);
  EXPECT_GT(empty, 0);
  // fp16 and bf16 outputs of empty rows are exact zeros too.
  p.out = DType::F16;
  p.q_len = 20;
  p.k_len = 12;
  expect_reference_matches(p, Pattern::sliding_window(3), 43, &empty);
  EXPECT_EQ(empty, 2 * 8);
  p.out = DType::BF16;
  expect_reference_matches(p, Pattern::streaming(1, 2), 44, &empty);
  EXPECT_EQ(empty, 2 * 8);
}

TEST(ReferenceBackend, CustomScale) {
  for (double scale : {0.01, 0.7, 3.0, -1.5}) {
    Problem p;
    p.q_len = 21;
    p.k_len = 34;
    p.scale = scale;
    expect_reference_matches(p, Pattern::longformer(4, {2}, true), 50);
    expect_reference_matches(p, Pattern::dense(), 51);
  }
  // Large scores: the max subtraction keeps the softmax finite.
  Problem p;
  p.q_len = p.k_len = 17;
  p.scale = 400.0;
  expect_reference_matches(p, Pattern::causal(), 52);
}

TEST(ReferenceBackend, RandomPatternsAndShapes) {
  std::mt19937_64 rng(99);
  for (int n = 0; n < 60; ++n) {
    Problem p;
    p.q_len = draw(rng, 1, 90);
    p.k_len = draw(rng, 0, 2) ? draw(rng, 1, 90) : p.q_len;
    p.q_heads = draw(rng, 1, 4);
    p.kv_heads = p.q_heads % 2 == 0 && draw(rng, 0, 1) ? p.q_heads / 2 : p.q_heads;
    p.head_dim = draw(rng, 1, 12);
    p.block_q = draw(rng, 1, 40);
    p.block_k = draw(rng, 1, 40);
    p.kv_layout = draw(rng, 0, 1) ? Layout::BLHD : Layout::BHLD;
    expect_reference_matches(p, random_case(rng, p.q_len, p.k_len, p.q_heads).pattern, 200 + n);
    if (HasFatalFailure()) return;
  }
}

// A head-dependent mask built for fewer heads than q has must not be used as
// if it fitted: either rejected, or (if accepted) exactly right.
TEST(ReferenceBackend, HeadDependentMaskForOtherHeadCount) {
  const Pattern p = Pattern::dilated({8}, {2});
  const BlockMask mask = BlockMask::build(p, {16, 16, 1, 1, 2});
  std::mt19937_64 rng(60);
  HostTensor q(DType::F64, 1, 4, 16, 4), k(DType::F64, 1, 4, 16, 4), v(DType::F64, 1, 4, 16, 4);
  HostTensor out(DType::F64, 1, 4, 16, 4);
  q.fill_random(rng);
  k.fill_random(rng);
  v.fill_random(rng);
  out.poison();
  AttentionOptions options;
  options.backend = Backend::Reference;
  try {
    attention(q.view, k.view, v.view, out.view, mask, options);
  } catch (const Error&) {
    return;
  }
  const DenseResult want = dense_masked_attention(q.view, k.view, v.view, p, 0.5);
  EXPECT_LT(relative_error(out.to_double(), want.out), 1e-12)
      << "a dilated mask built for 2 heads silently gives wrong results for 4 query heads";
}

TEST(NaiveDenseBaseline, AgreesWithTheReference) {
  int n = 0;
  for (const auto& [lq, lk] :
       std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {7, 19}, {33, 20}, {64, 64}})
    for (int k = 0; k < 5; ++k, ++n) {
      const Pattern& pattern = pattern_for(n);
      std::mt19937_64 rng(70 + n);
      HostTensor q(DType::F32, 1, 4, lq, 16), kk(DType::F32, 1, 2, lk, 16),
          v(DType::F32, 1, 2, lk, 16);
      q.fill_random(rng);
      kk.fill_random(rng);
      v.fill_random(rng);
      HostTensor ref(DType::F64, 1, 4, lq, 16), naive(DType::F32, 1, 4, lq, 16, Layout::BLHD);
      ref.poison();
      naive.poison();
      std::vector<float> ref_lse(static_cast<size_t>(4 * lq)),
          naive_lse(static_cast<size_t>(4 * lq), NAN);
      const TensorView ref_lse_view = make_lse(ref_lse.data(), 1, 4, lq);
      const TensorView naive_lse_view = make_lse(naive_lse.data(), 1, 4, lq);
      const BlockMask mask = BlockMask::build(pattern, {lq, lk, 8, 8, 4});
      reference_attention(q.view, kk.view, v.view, ref.view, mask, 0.25, &ref_lse_view);
      naive_dense_attention(q.view, kk.view, v.view, naive.view, mask, 0.25, &naive_lse_view);
      const std::vector<double> got = naive.to_double(), want = ref.to_double();
      for (double x : got) ASSERT_FALSE(std::isnan(x)) << pattern.describe();
      EXPECT_LT(relative_error(got, want), 1e-5)
          << pattern.describe() << " Lq=" << lq << " Lk=" << lk;
      EXPECT_LT(max_lse_error(std::vector<double>(naive_lse.begin(), naive_lse.end()),
                              std::vector<double>(ref_lse.begin(), ref_lse.end())),
                1e-5)
          << pattern.describe() << " Lq=" << lq << " Lk=" << lk;
    }
}

}  // namespace
}  // namespace spattn::testing
