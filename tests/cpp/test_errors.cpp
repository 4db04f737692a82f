// tests/cpp/test_errors.cpp - every class of bad input raises spattn::Error
// with a message that names the parameter and the offending value.
//
// One test per error class: pattern parameters (sizes, windows, strides,
// segments and rates, sinks, summaries, BigBird and Longformer settings,
// custom block matrices and BSR arrays), composition limits, BlockMask build
// shapes (lengths, heads, 32-bit block counts, int64 overflow), and the
// attention call (q/k/v/out/lse shapes and dtypes, GQA, masks built for other
// lengths or heads, tensors too large for 64-bit offsets, scale, backend).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "test_support.hpp"

namespace spattn::testing {
namespace {

// Runs `body` and expects spattn::Error whose message contains every needle.
void expect_error(const std::function<void()>& body, const std::vector<std::string>& needles,
                  const char* what, int line) {
  SCOPED_TRACE(::testing::Message() << "line " << line << ": " << what);
  try {
    body();
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const std::string& n : needles)
      EXPECT_NE(msg.find(n), std::string::npos)
          << "message \"" << msg << "\" does not mention \"" << n << "\"";
    return;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw a non-spattn exception: " << e.what();
    return;
  }
  ADD_FAILURE() << "no spattn::Error was thrown";
}
#define EXPECT_SPATTN_ERROR(statement, ...) \
  expect_error([&] { statement; }, {__VA_ARGS__}, #statement, __LINE__)

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

TEST(Errors, NonPositiveSizes) {
  EXPECT_SPATTN_ERROR(Pattern::block_diagonal(0), "block", "0");
  EXPECT_SPATTN_ERROR(Pattern::block_diagonal(-5, true), "block", "-5");
  EXPECT_SPATTN_ERROR(Pattern::sliding_window(0), "window", "0");
  EXPECT_SPATTN_ERROR(Pattern::sliding_window(-2), "window", "-2");
  EXPECT_SPATTN_ERROR(Pattern::streaming(4, 0), "window", "0");
  EXPECT_SPATTN_ERROR(Pattern::streaming(-1, 8), "sink", "-1");
  EXPECT_SPATTN_ERROR(Pattern::strided(0), "stride", "0");
  EXPECT_SPATTN_ERROR(Pattern::strided(-7), "stride", "-7");
  EXPECT_SPATTN_ERROR(Pattern::fixed(0, 0), "stride", "0");
  EXPECT_SPATTN_ERROR(Pattern::fixed(8, -1), "summary", "-1");
  EXPECT_SPATTN_ERROR(Pattern::longformer(-4, {}), "window", "-4");
}

TEST(Errors, NegativeWindowBounds) {
  EXPECT_SPATTN_ERROR(Pattern::sliding_window(-3, 0), "window_left", "-3");
  EXPECT_SPATTN_ERROR(Pattern::sliding_window(2, -1, true), "window_right", "-1");
}

TEST(Errors, SummaryLargerThanStride) {
  EXPECT_SPATTN_ERROR(Pattern::fixed(4, 5), "summary", "5", "4");
}

TEST(Errors, DilatedSegmentsAndRates) {
  EXPECT_SPATTN_ERROR(Pattern::dilated({8, 16}, {1}), "segments", "rates", "2", "1");
  EXPECT_SPATTN_ERROR(Pattern::dilated({}, {}), "segments");
  EXPECT_SPATTN_ERROR(Pattern::dilated({8, 0}, {1, 2}), "segments[1]", "0");
  EXPECT_SPATTN_ERROR(Pattern::dilated({8}, {-2}), "rates[0]", "-2");
  EXPECT_SPATTN_ERROR(Pattern::dilated(std::vector<int64_t>(9, 4), std::vector<int64_t>(9, 1)),
                      "9");
}

TEST(Errors, BigBirdParameters) {
  EXPECT_SPATTN_ERROR(Pattern::bigbird(-1, 16), "seq_len_k", "-1");
  EXPECT_SPATTN_ERROR(Pattern::bigbird(256, 0), "block", "0");
  EXPECT_SPATTN_ERROR(Pattern::bigbird(256, 16, 0), "window_blocks", "0");
  EXPECT_SPATTN_ERROR(Pattern::bigbird(256, 16, 3, -1), "global_blocks", "-1");
  EXPECT_SPATTN_ERROR(Pattern::bigbird(256, 16, 3, 1, -2), "random_blocks", "-2");
  EXPECT_SPATTN_ERROR(Pattern::bigbird(64, 16, 3, 1, 5), "random_blocks", "5", "4");
}

TEST(Errors, BigBirdBuiltForAnotherKeyLength) {
  const Pattern p = Pattern::bigbird(256, 16);
  EXPECT_SPATTN_ERROR(BlockMask::build(p, {300, 300, 16, 16, 1}), "bigbird", "Lk=300");
  EXPECT_NO_THROW(BlockMask::build(p, {100, 256, 16, 16, 1}));
  EXPECT_NO_THROW(BlockMask::build(p, {300, 250, 16, 16, 1}));  // same 16 key blocks
}

TEST(Errors, LongformerGlobalTokens) {
  EXPECT_SPATTN_ERROR(Pattern::longformer(8, {3, 5, 3}), "global_tokens", "3");
  EXPECT_SPATTN_ERROR(Pattern::longformer(8, {0, -2}), "global_tokens[1]", "-2");
  EXPECT_SPATTN_ERROR(BlockMask::build(Pattern::longformer(8, {2, 40}), {32, 32, 16, 16, 1}),
                      "global_tokens", "40", "32");
}

TEST(Errors, CustomBlockMatrix) {
  EXPECT_SPATTN_ERROR(Pattern::custom({1, 0, 1}, 1, 2, 2, 4, 4), "blocks", "4", "3");
  EXPECT_SPATTN_ERROR(Pattern::custom({1, 0, 2, 1}, 1, 2, 2, 4, 4), "blocks", "2");
  EXPECT_SPATTN_ERROR(Pattern::custom({1}, 0, 1, 1, 4, 4), "heads", "0");
  EXPECT_SPATTN_ERROR(Pattern::custom({}, 1, -2, 1, 4, 4), "rows", "-2");
  EXPECT_SPATTN_ERROR(Pattern::custom({}, 1, 1, -1, 4, 4), "cols", "-1");
  EXPECT_SPATTN_ERROR(Pattern::custom({1}, 1, 1, 1, 0, 4), "block_q", "0");
  EXPECT_SPATTN_ERROR(Pattern::custom({1}, 1, 1, 1, 4, -4), "block_k", "-4");
}

TEST(Errors, CustomBsrIndicesOutOfRange) {
  EXPECT_SPATTN_ERROR(Pattern::custom_bsr({0, 1, 2}, {0, 3}, 1, 2, 3, 4, 4), "indices[1]", "3");
  EXPECT_SPATTN_ERROR(Pattern::custom_bsr({0, 1, 2}, {-1, 0}, 1, 2, 3, 4, 4), "indices[0]", "-1");
}

TEST(Errors, CustomBsrUnsortedOrDuplicateIndices) {
  EXPECT_SPATTN_ERROR(Pattern::custom_bsr({0, 2, 2}, {2, 1}, 1, 2, 3, 4, 4), "sorted", "2 then 1");
  EXPECT_SPATTN_ERROR(Pattern::custom_bsr({0, 0, 2}, {1, 1}, 1, 2, 3, 4, 4), "unique", "1 then 1");
}

TEST(Errors, CustomBsrBadOffsets) {
  EXPECT_SPATTN_ERROR(Pattern::custom_bsr({0, 1}, {0}, 1, 2, 3, 4, 4), "offsets", "3", "2");
  EXPECT_SPATTN_ERROR(Pattern::custom_bsr({1, 1, 2}, {0, 1}, 1, 2, 3, 4, 4), "offsets[0]", "1");
  EXPECT_SPATTN_ERROR(Pattern::custom_bsr({0, 1, 3}, {0, 1}, 1, 2, 3, 4, 4), "offsets[last]", "3");
  EXPECT_SPATTN_ERROR(Pattern::custom_bsr({0, 2, 1, 2}, {0, 1}, 1, 3, 3, 4, 4), "non-decreasing",
                      "2", "1");
}

TEST(Errors, CustomMaskForOtherLengthsOrHeads) {
  const Pattern p = Pattern::custom(std::vector<uint8_t>(2 * 3 * 4, 1), 2, 3, 4, 8, 8);
  EXPECT_SPATTN_ERROR(BlockMask::build(p, {40, 32, 8, 8, 2}), "Lq=40", "3");
  EXPECT_SPATTN_ERROR(BlockMask::build(p, {24, 40, 8, 8, 2}), "Lk=40", "4");
  EXPECT_SPATTN_ERROR(BlockMask::build(p, {24, 32, 8, 8, 4}), "2 heads", "num_heads=4");
}

TEST(Errors, Composition) {
  EXPECT_SPATTN_ERROR(Pattern::per_head({}), "per_head", "none");
  const Pattern two = Pattern::per_head({Pattern::causal(), Pattern::dense()});
  EXPECT_SPATTN_ERROR(Pattern::per_head({two}), "heads[0]", "2");
  EXPECT_SPATTN_ERROR(Pattern::unite(two, Pattern::per_head({Pattern::causal(), Pattern::dense(),
                                                             Pattern::causal()})),
                      "2", "3");
  const Pattern u = Pattern::unite(Pattern::causal(), Pattern::strided(4));
  EXPECT_SPATTN_ERROR(Pattern::intersect(u, Pattern::sliding_window(8)), "union", "intersection");
  EXPECT_SPATTN_ERROR(BlockMask::build(two, {16, 16, 8, 8, 3}), "num_heads", "3", "2");
  EXPECT_SPATTN_ERROR(two.allowed(0, 1, 8, 8, 0, 0), "num_heads", "1", "2");
  EXPECT_SPATTN_ERROR(two.allowed(4, 4, 8, 8, 0, 0), "head 4", "4");
}

TEST(Errors, TooManyUnionTerms) {
  Pattern p = Pattern::sliding_window(1);
  for (int n = 2; n <= kMaxTerms; ++n) p = Pattern::unite(p, Pattern::sliding_window(n));
  EXPECT_SPATTN_ERROR(Pattern::unite(p, Pattern::causal()), std::to_string(kMaxTerms),
                      std::to_string(kMaxTerms + 1));
  EXPECT_SPATTN_ERROR(Pattern::unite(Pattern::dilated({4, 8, 16, 32, 64}, {1, 2, 1, 2, 1}),
                                     Pattern::dilated({4, 8, 16, 32}, {1, 1, 1, 1})),
                      std::to_string(kMaxTerms), std::to_string(9));
}

TEST(Errors, MaskShapes) {
  const Pattern p = Pattern::causal();
  EXPECT_SPATTN_ERROR(BlockMask::build(p, {-1, 16, 8, 8, 1}), "q_len", "-1");
  EXPECT_SPATTN_ERROR(BlockMask::build(p, {16, -3, 8, 8, 1}), "k_len", "-3");
  EXPECT_SPATTN_ERROR(BlockMask::build(p, {16, 16, 0, 8, 1}), "block_q", "0");
  EXPECT_SPATTN_ERROR(BlockMask::build(p, {16, 16, 8, -8, 1}), "block_k", "-8");
  EXPECT_SPATTN_ERROR(BlockMask::build(p, {16, 16, 8, 8, 0}), "num_heads", "0");
  EXPECT_SPATTN_ERROR(BlockMask::build(p, {16, 16, 8, 8, 1}).kept_pairs(0), "query_heads", "0");
}

TEST(Errors, SizesThatWouldOverflow) {
  EXPECT_SPATTN_ERROR(BlockMask::build(Pattern::dense(), {kMax, kMax, 64, 64, 1}), "q_len",
                      "k_len");
  EXPECT_SPATTN_ERROR(BlockMask::build(Pattern::dense(), {1, int64_t{1} << 40, 1, 1, 1}),
                      "key blocks", std::to_string(int64_t{1} << 40));
  EXPECT_SPATTN_ERROR(Pattern::custom({}, kMax, kMax, 2, 4, 4), "overflow");
  EXPECT_SPATTN_ERROR(Pattern::custom_bsr({0}, {}, kMax, 2, 2, 4, 4), "overflow");
  // A tensor whose extent does not fit 64-bit offsets is rejected before any access.
  HostTensor small(DType::F32, 1, 1, 4, 4);
  TensorView huge = small.view;
  huge.shape = {int64_t{1} << 20, int64_t{1} << 20, int64_t{1} << 20, 4};
  huge.stride = {int64_t{1} << 42, int64_t{1} << 22, 4, 1};
  const BlockMask mask =
      BlockMask::build(Pattern::dense(), {int64_t{1} << 20, int64_t{1} << 20, 1 << 16, 1 << 16, 1});
  EXPECT_SPATTN_ERROR(attention(huge, huge, huge, huge, mask), "q", "overflow");
}

// ---- the attention call ----

struct Inputs {
  HostTensor q, k, v, out;
  BlockMask mask;
  Inputs(int64_t hq = 4, int64_t hkv = 2, int64_t lq = 12, int64_t lk = 20, int64_t d = 8)
      : q(DType::F32, 1, hq, lq, d),
        k(DType::F32, 1, hkv, lk, d),
        v(DType::F32, 1, hkv, lk, d),
        out(DType::F32, 1, hq, lq, d),
        mask(BlockMask::build(Pattern::causal(), {lq, lk, 8, 8, hq})) {
    std::mt19937_64 rng(1);
    q.fill_random(rng);
    k.fill_random(rng);
    v.fill_random(rng);
  }
  void run(const TensorView* lse = nullptr, AttentionOptions options = {}) {
    options.backend = Backend::Reference;
    attention(q.view, k.view, v.view, out.view, mask, options, lse);
  }
};

TEST(Errors, AttentionAcceptsTheBaseline) {
  Inputs in;
  std::vector<float> lse(4 * 12);
  const TensorView lse_view = make_lse(lse.data(), 1, 4, 12);
  EXPECT_NO_THROW(in.run(&lse_view));
}

TEST(Errors, QkvShapeMismatch) {
  Inputs in;
  HostTensor k_batch(DType::F32, 2, 2, 20, 8), k_dim(DType::F32, 1, 2, 20, 16),
      v_len(DType::F32, 1, 2, 19, 8);
  HostTensor v_heads(DType::F32, 1, 1, 20, 8), v_dim(DType::F32, 1, 2, 20, 4);
  EXPECT_SPATTN_ERROR(attention(in.q.view, k_batch.view, in.v.view, in.out.view, in.mask), "batch",
                      "2", "1");
  EXPECT_SPATTN_ERROR(attention(in.q.view, k_dim.view, in.v.view, in.out.view, in.mask), "head_dim",
                      "16", "8");
  EXPECT_SPATTN_ERROR(attention(in.q.view, in.k.view, v_len.view, in.out.view, in.mask), "seq_len",
                      "19", "20");
  EXPECT_SPATTN_ERROR(attention(in.q.view, in.k.view, v_heads.view, in.out.view, in.mask), "heads",
                      "1", "2");
  EXPECT_SPATTN_ERROR(attention(in.q.view, in.k.view, v_dim.view, in.out.view, in.mask), "head_dim",
                      "4", "8");
  TensorView empty = in.q.view;
  empty.shape[3] = 0;
  EXPECT_SPATTN_ERROR(attention(empty, in.k.view, in.v.view, in.out.view, in.mask), "head_dim",
                      "0");
  TensorView null = in.k.view;
  null.data = nullptr;
  EXPECT_SPATTN_ERROR(attention(in.q.view, null, in.v.view, in.out.view, in.mask), "k", "null");
}

TEST(Errors, DtypeMismatch) {
  Inputs in;
  HostTensor k16(DType::F16, 1, 2, 20, 8), vbf(DType::BF16, 1, 2, 20, 8);
  EXPECT_SPATTN_ERROR(attention(in.q.view, k16.view, in.v.view, in.out.view, in.mask), "k dtype",
                      "fp16", "fp32");
  EXPECT_SPATTN_ERROR(attention(in.q.view, in.k.view, vbf.view, in.out.view, in.mask), "v dtype",
                      "bf16", "fp32");
}

TEST(Errors, QueryHeadsNotAMultipleOfKvHeads) {
  Inputs in(3, 2);
  EXPECT_SPATTN_ERROR(in.run(), "q heads", "3", "2");
}

TEST(Errors, MaskBuiltForOtherLengths) {
  Inputs in;
  in.mask = BlockMask::build(Pattern::causal(), {13, 20, 8, 8, 4});
  EXPECT_SPATTN_ERROR(in.run(), "Lq=13", "12");
  in.mask = BlockMask::build(Pattern::causal(), {12, 21, 8, 8, 4});
  EXPECT_SPATTN_ERROR(in.run(), "Lk=21", "20");
}

TEST(Errors, MaskHeadsMustFitQueryHeads) {
  Inputs in;
  in.mask = BlockMask::build(Pattern::dilated({8}, {3}), {12, 20, 8, 8, 3});
  EXPECT_SPATTN_ERROR(in.run(), "3", "4");
  // A head-dependent mask for 2 heads used with 4 query heads.
  in.mask = BlockMask::build(Pattern::dilated({8}, {2}), {12, 20, 8, 8, 2});
  EXPECT_SPATTN_ERROR(in.run(), "2", "4");
  // A per-head custom table for 2 heads must not be read for heads 2 and 3.
  in.mask = BlockMask::build(Pattern::custom(std::vector<uint8_t>(2 * 2 * 3, 1), 2, 2, 3, 8, 8),
                             {12, 20, 8, 8, 2});
  EXPECT_SPATTN_ERROR(in.run(), "2", "4");
  in.mask =
      BlockMask::build(Pattern::per_head({Pattern::causal(), Pattern::dense(), Pattern::causal()}),
                       {12, 20, 8, 8, 3});
  EXPECT_SPATTN_ERROR(in.run(), "3", "4");
}

TEST(Errors, OutShapeWrong) {
  Inputs in;
  HostTensor out_len(DType::F32, 1, 4, 11, 8), out_heads(DType::F32, 1, 2, 12, 8);
  EXPECT_SPATTN_ERROR(attention(in.q.view, in.k.view, in.v.view, out_len.view, in.mask),
                      "out shape", "11");
  EXPECT_SPATTN_ERROR(attention(in.q.view, in.k.view, in.v.view, out_heads.view, in.mask),
                      "out shape", "2");
}

TEST(Errors, LseDtypeOrShapeWrong) {
  Inputs in;
  std::vector<float> lse(4 * 12), short_lse(4 * 11);
  std::vector<double> lse64(4 * 12);
  TensorView wrong_dtype = make_lse(lse.data(), 1, 4, 12);
  wrong_dtype.data = lse64.data();
  wrong_dtype.dtype = DType::F64;
  EXPECT_SPATTN_ERROR(in.run(&wrong_dtype), "lse dtype", "fp64");
  const TensorView wrong_len = make_lse(short_lse.data(), 1, 4, 11);
  EXPECT_SPATTN_ERROR(in.run(&wrong_len), "lse shape", "11");
  const TensorView wrong_heads = make_lse(lse.data(), 1, 2, 12);
  EXPECT_SPATTN_ERROR(in.run(&wrong_heads), "lse shape", "2");
}

TEST(Errors, ScaleAndBackend) {
  Inputs in;
  AttentionOptions options;
  options.scale = std::numeric_limits<double>::quiet_NaN();
  EXPECT_SPATTN_ERROR(in.run(nullptr, options), "scale", "nan");
  options.scale = std::numeric_limits<double>::infinity();
  EXPECT_SPATTN_ERROR(in.run(nullptr, options), "scale", "inf");
  EXPECT_SPATTN_ERROR(parse_backend("gpu"), "backend", "'gpu'");
}

}  // namespace
}  // namespace spattn::testing
