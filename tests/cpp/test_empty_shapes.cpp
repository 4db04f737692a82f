// tests/cpp/test_empty_shapes.cpp - zero lengths, batches and heads are valid
// everywhere and give empty results.
//
// The rule (attention.hpp, "Empty shapes"): Lq, Lk, B and Hq may be 0. A mask
// for Lq == 0 has no rows, one for Lk == 0 rows that keep no block; every
// pattern builder accepts such lengths. attention() writes nothing when out is
// empty and, with Lk == 0, gives every row output 0 and LSE -inf (outputs are
// poisoned first, so an unwritten row fails). attention_varlen accepts a batch
// without rows or sequences, and the backward pass gives zero gradients to
// keys no query reads (Lq == 0) and to queries with no key (Lk == 0).
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "spattn/backward.hpp"
#include "test_support.hpp"

namespace spattn::testing {
namespace {

constexpr double kMinusInf = -std::numeric_limits<double>::infinity();

// One pattern of every builder; bigbird and custom are made for `k_len`
// keys and `q_len` queries in blocks of 8.
std::vector<std::pair<std::string, Pattern>> every_pattern(int64_t q_len, int64_t k_len) {
  const int64_t rows = (q_len + 7) / 8, cols = (k_len + 7) / 8;
  return {
      {"dense", Pattern::dense()},
      {"causal", Pattern::causal()},
      {"block_diagonal", Pattern::block_diagonal(5, true)},
      {"sliding_window", Pattern::sliding_window(3, 2)},
      {"window", Pattern::sliding_window(4)},
      {"streaming", Pattern::streaming(2, 3)},
      {"strided", Pattern::strided(3)},
      {"fixed", Pattern::fixed(4, 1)},
      {"dilated", Pattern::dilated({8, 16}, {1, 2})},
      {"bigbird", Pattern::bigbird(k_len, 8, 3, 1, 0)},
      {"longformer", Pattern::longformer(4, {})},
      {"custom", Pattern::custom(std::vector<uint8_t>(static_cast<size_t>(rows * cols), 1), 1, rows, cols, 8, 8)},
      {"union", Pattern::unite(Pattern::causal(), Pattern::strided(3))},
      {"intersection", Pattern::intersect(Pattern::causal(), Pattern::sliding_window(4))},
      {"per_head", Pattern::per_head({Pattern::causal(), Pattern::dense()})},
  };
}

TEST(EmptyShapes, MasksOfZeroLengthsHaveNoRowsOrNoBlocks) {
  for (const auto& [q_len, k_len] : std::vector<std::pair<int64_t, int64_t>>{{0, 0}, {0, 13}, {13, 0}}) {
    for (const auto& [name, pattern] : every_pattern(q_len, k_len)) {
      SCOPED_TRACE(name + " Lq=" + std::to_string(q_len) + " Lk=" + std::to_string(k_len));
      const MaskShape shape{q_len, k_len, 8, 8, 2};
      EXPECT_GT(BlockMask::build_bytes(pattern, shape), 0);  // the row offsets' one entry at least
      const BlockMask mask = BlockMask::build(pattern, shape);
      EXPECT_EQ(mask.q_len(), q_len);
      EXPECT_EQ(mask.k_len(), k_len);
      EXPECT_EQ(mask.num_q_blocks(), (q_len + 7) / 8);
      EXPECT_EQ(mask.num_k_blocks(), (k_len + 7) / 8);
      EXPECT_EQ(mask.row_offsets().size(), static_cast<size_t>(mask.num_heads() * mask.num_q_blocks() + 1));
      EXPECT_EQ(mask.num_blocks(), 0);
      EXPECT_EQ(mask.kept_pairs(2), 0);
      EXPECT_EQ(mask.density(2), 0.0);
    }
  }
}

TEST(EmptyShapes, MasksFromArraysOfZeroLengths) {
  const BlockMask no_rows(0, 16, 8, 8, 1, {0}, {}, {});
  EXPECT_EQ(no_rows.num_q_blocks(), 0);
  EXPECT_EQ(no_rows.density(1), 0.0);
  const BlockMask no_keys(16, 0, 8, 8, 1, {0, 0, 0}, {}, {});
  EXPECT_EQ(no_keys.num_k_blocks(), 0);
  EXPECT_EQ(no_keys.kept_pairs(1), 0);
}

TEST(EmptyShapes, BuildersTakeZeroLengthsAndKeepTheirOtherRules) {
  // BigBird over no keys has no blocks, so it can draw no random block.
  EXPECT_NO_THROW(Pattern::bigbird(0, 16, 3, 1, 0));
  try {
    Pattern::bigbird(0, 16, 3, 1, 3);
    ADD_FAILURE() << "random_blocks=3 over 0 blocks was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("random_blocks"), std::string::npos) << e.what();
  }
  // A custom mask of no rows (Lq = 0) or no columns (Lk = 0).
  const Pattern no_rows = Pattern::custom({}, 1, 0, 3, 8, 8);
  EXPECT_EQ(BlockMask::build(no_rows, {0, 20, 8, 8, 1}).num_blocks(), 0);
  const Pattern no_cols = Pattern::custom_bsr({0, 0, 0}, {}, 1, 2, 0, 8, 8);
  EXPECT_EQ(BlockMask::build(no_cols, {10, 0, 8, 8, 1}).num_blocks(), 0);
}

struct Problem {
  int64_t batch = 1, q_heads = 2, kv_heads = 1, q_len = 9, k_len = 9, head_dim = 8;
};

// Runs attention on `backend` into a poisoned out and LSE; returns them.
std::pair<std::vector<double>, std::vector<double>> run(const Problem& p, const Pattern& pattern, Backend backend) {
  std::mt19937_64 rng(7);
  HostTensor q(DType::F32, p.batch, p.q_heads, p.q_len, p.head_dim);
  HostTensor k(DType::F32, p.batch, p.kv_heads, p.k_len, p.head_dim, Layout::BLHD);
  HostTensor v(DType::F32, p.batch, p.kv_heads, p.k_len, p.head_dim);
  HostTensor out(DType::F32, p.batch, p.q_heads, p.q_len, p.head_dim);
  HostTensor lse(DType::F32, p.batch, p.q_heads, p.q_len, 1);
  q.fill_random(rng);
  k.fill_random(rng);
  v.fill_random(rng);
  out.poison();
  lse.poison();
  const BlockMask mask = BlockMask::build(pattern, {p.q_len, p.k_len, 8, 8, std::max<int64_t>(p.q_heads, 1)});
  AttentionOptions options;
  options.backend = backend;
  attention(q.view, k.view, v.view, out.view, mask, options, &lse.view);
  return {out.to_double(), lse.to_double()};
}

TEST(EmptyShapes, AttentionOnEmptyOutputsWritesNothing) {
  for (const Backend backend : {Backend::Reference, Backend::Cpu}) {
    SCOPED_TRACE(backend_name(backend));
    for (const Problem& p : {Problem{0, 2, 1, 9, 9, 8}, Problem{1, 0, 1, 9, 9, 8}, Problem{2, 2, 1, 0, 9, 8},
                             Problem{2, 2, 1, 0, 0, 8}}) {
      const auto [out, lse] = run(p, Pattern::causal(), backend);
      EXPECT_TRUE(out.empty());
      EXPECT_TRUE(lse.empty());
    }
  }
}

TEST(EmptyShapes, NoKeysGiveZeroRowsAndMinusInfinity) {
  for (const Backend backend : {Backend::Reference, Backend::Cpu}) {
    for (const auto& [name, pattern] : every_pattern(9, 0)) {
      SCOPED_TRACE(name + " on " + backend_name(backend));
      const Problem p{2, 2, 1, 9, 0, 8};
      const auto [out, lse] = run(p, pattern, backend);
      ASSERT_EQ(out.size(), static_cast<size_t>(2 * 2 * 9 * 8));
      for (const double x : out) ASSERT_EQ(x, 0.0);
      ASSERT_EQ(lse.size(), static_cast<size_t>(2 * 2 * 9));
      for (const double x : lse) ASSERT_EQ(x, kMinusInf);
    }
  }
}

TEST(EmptyShapes, NullDataIsAcceptedOnlyForEmptyViews) {
  HostTensor q(DType::F32, 1, 1, 4, 8), out(DType::F32, 1, 1, 4, 8);
  out.poison();
  const TensorView no_keys = make_bhld(nullptr, DType::F32, 1, 1, 0, 8);
  attention(q.view, no_keys, no_keys, out.view, BlockMask::build(Pattern::dense(), {4, 0, 8, 8, 1}));
  for (const double x : out.to_double()) EXPECT_EQ(x, 0.0);
  const TensorView no_data = make_bhld(nullptr, DType::F32, 1, 1, 4, 8);
  EXPECT_THROW(attention(q.view, no_data, no_data, out.view, BlockMask::build(Pattern::dense(), {4, 4, 8, 8, 1})),
               Error);
}

TEST(EmptyShapes, HeadDimAndKeyHeadsMustStayPositive) {
  const TensorView q = make_bhld(nullptr, DType::F32, 1, 2, 0, 8);
  const TensorView no_dim = make_bhld(nullptr, DType::F32, 1, 2, 0, 0);
  const TensorView no_heads = make_bhld(nullptr, DType::F32, 1, 0, 0, 8);
  const BlockMask mask = BlockMask::build(Pattern::dense(), {0, 0, 8, 8, 1});
  const auto message = [&](const TensorView& qq, const TensorView& kv) {
    try {
      attention(qq, kv, kv, qq, mask);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message(no_dim, no_dim).find("head_dim must be > 0, got 0"), std::string::npos);
  EXPECT_NE(message(q, no_heads).find("k heads must be > 0"), std::string::npos);
}

TEST(EmptyShapes, VarlenBatchesWithoutRowsOrSequences) {
  for (const Backend backend : {Backend::Reference, Backend::Cpu}) {
    SCOPED_TRACE(backend_name(backend));
    AttentionOptions options;
    options.backend = backend;
    // Three empty sequences: no rows at all.
    const std::vector<int32_t> zeros{0, 0, 0, 0};
    const TensorView none = make_blhd(nullptr, DType::F32, 1, 0, 2, 8);
    VarlenBatch batch{zeros.data(), zeros.data(), 3, 0, 0};
    const BlockMask mask = varlen_mask(Pattern::causal(), 0);
    EXPECT_NO_THROW(attention_varlen(none, none, none, none, batch, mask, options));
    // No sequences at all (cu_seqlens = {0}).
    batch.num_seqs = 0;
    EXPECT_NO_THROW(attention_varlen(none, none, none, none, batch, mask, options));
    std::mt19937_64 rng(3);
    HostTensor rows(DType::F32, 1, 2, 5, 8, Layout::BLHD);
    rows.fill_random(rng);
    EXPECT_THROW(attention_varlen(rows.view, rows.view, rows.view, rows.view, batch,
                                  varlen_mask(Pattern::causal(), 5), options),
                 Error);
  }
}

// The backward pass of `p` into poisoned gradients: (dq, dk, dv).
std::vector<std::vector<double>> grads(const Problem& p, Backend backend) {
  std::mt19937_64 rng(11);
  HostTensor q(DType::F32, p.batch, p.q_heads, p.q_len, p.head_dim);
  HostTensor k(DType::F32, p.batch, p.kv_heads, p.k_len, p.head_dim);
  HostTensor v(DType::F32, p.batch, p.kv_heads, p.k_len, p.head_dim);
  HostTensor out(DType::F32, p.batch, p.q_heads, p.q_len, p.head_dim);
  HostTensor lse(DType::F32, p.batch, p.q_heads, p.q_len, 1);
  HostTensor d_out(DType::F32, p.batch, p.q_heads, p.q_len, p.head_dim);
  for (HostTensor* t : {&q, &k, &v, &d_out}) t->fill_random(rng);
  const BlockMask mask = BlockMask::build(Pattern::causal(), {p.q_len, p.k_len, 8, 8, p.q_heads});
  AttentionOptions options;
  options.backend = backend;
  attention(q.view, k.view, v.view, out.view, mask, options, &lse.view);
  HostTensor dq(DType::F32, p.batch, p.q_heads, p.q_len, p.head_dim);
  HostTensor dk(DType::F32, p.batch, p.kv_heads, p.k_len, p.head_dim);
  HostTensor dv(DType::F32, p.batch, p.kv_heads, p.k_len, p.head_dim);
  for (HostTensor* t : {&dq, &dk, &dv}) t->poison();
  attention_backward(q.view, k.view, v.view, out.view, lse.view, d_out.view, {dq.view, dk.view, dv.view}, mask,
                     options);
  return {dq.to_double(), dk.to_double(), dv.to_double()};
}

TEST(EmptyShapes, BackwardGivesZeroGradientsWhereNothingIsRead) {
  for (const Backend backend : {Backend::Reference, Backend::Cpu}) {
    SCOPED_TRACE(backend_name(backend));
    const auto no_queries = grads(Problem{2, 2, 1, 0, 12, 8}, backend);
    EXPECT_TRUE(no_queries[0].empty());
    ASSERT_EQ(no_queries[1].size(), static_cast<size_t>(2 * 12 * 8));
    for (const auto* g : {&no_queries[1], &no_queries[2]})
      for (const double x : *g) ASSERT_EQ(x, 0.0);
    const auto no_keys = grads(Problem{2, 2, 1, 12, 0, 8}, backend);
    ASSERT_EQ(no_keys[0].size(), static_cast<size_t>(2 * 2 * 12 * 8));
    for (const double x : no_keys[0]) ASSERT_EQ(x, 0.0);
    EXPECT_TRUE(no_keys[1].empty() && no_keys[2].empty());
    const auto no_batch = grads(Problem{0, 2, 1, 12, 12, 8}, backend);
    EXPECT_TRUE(no_batch[0].empty() && no_batch[1].empty() && no_batch[2].empty());
  }
}

}  // namespace
}  // namespace spattn::testing
