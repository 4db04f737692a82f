// tests/cpp/test_varlen.cpp - packed batches of variable-length sequences on
// the host backends: attention_varlen equals each sequence run alone (dense
// fp64 oracle at the sequence's own lengths) for every prefix-stable pattern,
// with empty, one-token and ragged sequences and GQA; which patterns are
// prefix stable; and bad cu_seqlens, masks and tensors rejected with messages
// that name them; the backward equals each sequence's dense fp64 gradients.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "spattn/backward.hpp"
#include "varlen_support.hpp"

namespace spattn::testing {
namespace {

struct NamedPattern {
  std::string name;
  Pattern pattern;
};

std::vector<NamedPattern> stable_patterns() {
  return {
      {"dense", Pattern::dense()},
      {"causal", Pattern::causal()},
      {"block_diagonal", Pattern::block_diagonal(24, true)},
      {"sliding_window", Pattern::sliding_window(20, 5)},
      {"streaming", Pattern::streaming(4, 16)},
      {"strided", Pattern::strided(8)},
      {"fixed", Pattern::fixed(16, 4)},
      {"dilated", Pattern::dilated({32, 64}, {1, 2}, true)},
      // Global token 100 lies beyond the shorter sequences (within_length drops it there).
      {"longformer", Pattern::longformer(16, {0, 100})},
      {"window_or_streaming", Pattern::unite(Pattern::sliding_window(8, 8), Pattern::streaming(2, 4))},
  };
}

std::vector<double> values_of(const TensorView& t) {
  std::vector<double> out;
  for (int64_t h = 0; h < t.heads(); ++h)
    for (int64_t l = 0; l < t.seq_len(); ++l)
      for (int64_t d = 0; d < t.head_dim(); ++d) out.push_back(t.load(0, h, l, d));
  return out;
}

// `k_lengths` empty: every sequence has as many keys as queries.
void check_against_sequences(Backend backend, DType dtype, const NamedPattern& np,
                             const std::vector<int64_t>& lengths, int64_t block_q, int64_t block_k,
                             const std::vector<int64_t>& k_lengths = {}) {
  SCOPED_TRACE(np.name + " on " + backend_name(backend) + ", " + dtype_name(dtype));
  std::mt19937_64 rng(1234);
  const int64_t Hq = 4, Hkv = 2, D = 16;
  PackedProblem pp(dtype, lengths, k_lengths.empty() ? lengths : k_lengths, Hq, Hkv, D, rng);
  HostTensor out(DType::F32, 1, Hq, pp.total, D, Layout::BLHD);
  HostTensor lse(DType::F32, 1, Hq, pp.total, 1);
  out.poison();
  lse.poison();
  const BlockMask mask = varlen_mask(np.pattern, pp.max_len, block_q, block_k, Hq);
  AttentionOptions options;
  options.backend = backend;
  attention_varlen(pp.q.view, pp.k.view, pp.v.view, out.view,
                   pp.batch(pp.cu_seqlens.data(), pp.cu_seqlens_k.data()), mask, options, &lse.view);
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  const DenseResult want = expected_varlen(pp, np.pattern, scale);
  // The reference differs from the oracle only by the fp32 rounding of out and lse.
  const double tolerance = backend == Backend::Reference ? 1e-6 : (dtype == DType::F32 ? 1e-5 : 1e-2);
  EXPECT_LT(relative_error(values_of(out.view), want.out), tolerance);
  EXPECT_LT(max_lse_error(values_of(lse.view), want.lse), backend == Backend::Reference ? 1e-5 : 1e-4);
}

TEST(Varlen, PrefixStablePatterns) {
  for (const NamedPattern& np : stable_patterns()) EXPECT_TRUE(np.pattern.is_prefix_stable()) << np.name;
  const Pattern bigbird = Pattern::bigbird(512, 64);
  const Pattern custom = Pattern::custom({1, 0, 1, 1}, 1, 2, 2, 64, 64);
  EXPECT_FALSE(bigbird.is_prefix_stable());
  EXPECT_FALSE(custom.is_prefix_stable());
  EXPECT_FALSE(Pattern::unite(Pattern::causal(), bigbird).is_prefix_stable());
  EXPECT_FALSE(Pattern::per_head({Pattern::causal(), custom}).is_prefix_stable());
}

// What the CUDA backend relies on: the plan for the longest sequence, read in
// its top-left corner, keeps exactly the pairs of the shorter sequence's plan.
TEST(Varlen, PrefixStableMasksAgreeOnTheCorner) {
  const int64_t Hq = 2, L = 200;
  for (const NamedPattern& np : stable_patterns()) {
    const BlockMask big = varlen_mask(np.pattern, L, 32, 64, Hq);
    for (int64_t len : {1, 17, 64, 130}) {
      const BlockMask own = BlockMask::build(np.pattern.within_length(len), {len, len, 32, 64, Hq});
      int64_t differ = 0;
      for (int64_t h = 0; h < Hq; ++h)
        for (int64_t i = 0; i < len; ++i)
          for (int64_t j = 0; j < len; ++j) differ += big.allowed(h, Hq, i, j) != own.allowed(h, Hq, i, j);
      EXPECT_EQ(differ, 0) << np.name << " at length " << len;
    }
  }
  // BigBird's last global blocks move with the length: the corner differs.
  const BlockMask big = BlockMask::build(Pattern::bigbird(L, 16, 3, 1, 0), {L, L, 16, 16, 1});
  const BlockMask own = BlockMask::build(Pattern::bigbird(100, 16, 3, 1, 0), {100, 100, 16, 16, 1});
  EXPECT_NE(big.allowed(0, 1, 99, 40), own.allowed(0, 1, 99, 40));
}

TEST(Varlen, ReferenceEqualsEachSequenceAlone) {
  // Empty, one-token and ragged sequences; blocks that do not divide them.
  const std::vector<int64_t> lengths = {17, 1, 0, 200, 64, 0, 130, 33};
  for (const NamedPattern& np : stable_patterns())
    check_against_sequences(Backend::Reference, DType::F32, np, lengths, 32, 64);
}

TEST(Varlen, CpuBackendEqualsEachSequenceAlone) {
  const std::vector<int64_t> lengths = {17, 1, 0, 200, 64, 0, 130, 33};
  for (const NamedPattern& np : stable_patterns()) {
    check_against_sequences(Backend::Cpu, DType::F32, np, lengths, 64, 64);
    check_against_sequences(Backend::Cpu, DType::BF16, np, lengths, 16, 128);
  }
}

// Chunks of queries after cached keys (Lq(b) < Lk(b), bottom-right aligned),
// with equal, empty and one-query sequences among them.
TEST(Varlen, QueryChunksAfterCachedKeysEqualEachSequenceAlone) {
  const std::vector<int64_t> q_lengths = {17, 1, 0, 64, 5, 0, 130, 33, 1};
  const std::vector<int64_t> k_lengths = {40, 1, 9, 200, 64, 0, 130, 97, 150};
  for (const NamedPattern& np : stable_patterns()) {
    check_against_sequences(Backend::Reference, DType::F32, np, q_lengths, 32, 64, k_lengths);
    check_against_sequences(Backend::Cpu, DType::F32, np, q_lengths, 64, 64, k_lengths);
    check_against_sequences(Backend::Cpu, DType::BF16, np, q_lengths, 16, 128, k_lengths);
  }
}

// The backward of a packed batch on the host backends, into poisoned
// gradients: each sequence's dq, dk, dv equal the dense fp64 oracle's on the
// sequence's own rows and lengths (output and LSE gradients both given);
// keys of a sequence without queries get exactly 0.
void check_backward_against_sequences(Backend backend, const NamedPattern& np, const std::vector<int64_t>& q_lengths,
                                      const std::vector<int64_t>& k_lengths) {
  SCOPED_TRACE(np.name + " backward on " + backend_name(backend));
  std::mt19937_64 rng(4321);
  const int64_t Hq = 4, Hkv = 2, D = 16;
  PackedProblem pp(DType::F32, q_lengths, k_lengths, Hq, Hkv, D, rng);
  HostTensor out(DType::F32, 1, Hq, pp.total, D, Layout::BLHD), d_out(DType::F32, 1, Hq, pp.total, D, Layout::BLHD);
  HostTensor lse(DType::F32, 1, Hq, pp.total, 1), d_lse(DType::F32, 1, Hq, pp.total, 1);
  HostTensor dq(DType::F32, 1, Hq, pp.total, D, Layout::BLHD), dk(DType::F32, 1, Hkv, pp.total_k, D, Layout::BLHD);
  HostTensor dv(DType::F32, 1, Hkv, pp.total_k, D, Layout::BLHD);
  d_out.fill_random(rng);
  d_lse.fill_random(rng);
  dq.poison();
  dk.poison();
  dv.poison();
  const BlockMask mask = varlen_mask(np.pattern, pp.max_len, 32, 64, Hq);
  const VarlenBatch batch = pp.batch(pp.cu_seqlens.data(), pp.cu_seqlens_k.data());
  AttentionOptions options;
  options.backend = backend;
  attention_varlen(pp.q.view, pp.k.view, pp.v.view, out.view, batch, mask, options, &lse.view);
  attention_varlen_backward(pp.q.view, pp.k.view, pp.v.view, out.view, lse.view, d_out.view,
                            {dq.view, dk.view, dv.view}, batch, mask, options, &d_lse.view);
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  for (size_t b = 0; b < q_lengths.size(); ++b) {
    const int64_t q0 = pp.cu_seqlens[b], lq = q_lengths[b], k0 = pp.cu_seqlens_k[b], lk = k_lengths[b];
    if (lq == 0) {
      for (const double x : values_of(seq_slice(dk.view, k0, lk))) ASSERT_EQ(x, 0.0) << "dk of sequence " << b;
      for (const double x : values_of(seq_slice(dv.view, k0, lk))) ASSERT_EQ(x, 0.0) << "dv of sequence " << b;
      continue;
    }
    const TensorView d_lse_b = seq_slice(d_lse.view, q0, lq);
    const DenseGrads want = dense_masked_attention_backward(
        seq_slice(pp.q.view, q0, lq), seq_slice(pp.k.view, k0, lk), seq_slice(pp.v.view, k0, lk),
        seq_slice(d_out.view, q0, lq), &d_lse_b, np.pattern.within_length(lk), scale);
    EXPECT_LT(relative_error(values_of(seq_slice(dq.view, q0, lq)), want.dq), 1e-4) << "dq of sequence " << b;
    EXPECT_LT(relative_error(values_of(seq_slice(dk.view, k0, lk)), want.dk), 1e-4) << "dk of sequence " << b;
    EXPECT_LT(relative_error(values_of(seq_slice(dv.view, k0, lk)), want.dv), 1e-4) << "dv of sequence " << b;
  }
}

TEST(Varlen, BackwardEqualsEachSequenceAlone) {
  const std::vector<int64_t> q_lengths = {17, 1, 0, 64, 5, 130, 33};
  const std::vector<int64_t> k_lengths = {40, 1, 9, 64, 70, 130, 97};
  for (const NamedPattern& np : stable_patterns())
    for (const Backend backend : {Backend::Reference, Backend::Cpu})
      check_backward_against_sequences(backend, np, q_lengths, k_lengths);
}

TEST(Varlen, BackwardRejectsTheCudaBackendAndBadGradients) {
  std::mt19937_64 rng(7);
  PackedProblem pp(DType::F32, {6, 10}, 2, 1, 8, rng);
  HostTensor out(DType::F32, 1, 2, pp.total, 8, Layout::BLHD), lse(DType::F32, 1, 2, pp.total, 1);
  HostTensor short_dq(DType::F32, 1, 2, pp.total - 1, 8, Layout::BLHD);
  const BlockMask mask = varlen_mask(Pattern::causal(), pp.max_len, 16, 16, 2);
  const VarlenBatch batch = pp.batch(pp.cu_seqlens.data(), pp.cu_seqlens_k.data());
  attention_varlen(pp.q.view, pp.k.view, pp.v.view, out.view, batch, mask, {}, &lse.view);
  const auto message = [&](const AttentionGrads& g, Backend backend) {
    AttentionOptions options;
    options.backend = backend;
    try {
      attention_varlen_backward(pp.q.view, pp.k.view, pp.v.view, out.view, lse.view, out.view, g, batch, mask,
                                options);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const AttentionGrads good{out.view, pp.k.view, pp.v.view};
  EXPECT_NE(message({short_dq.view, pp.k.view, pp.v.view}, Backend::Cpu).find("dq shape"), std::string::npos);
  const std::string cuda = message(good, Backend::Cuda);
  EXPECT_TRUE(cuda.find("backend 'cuda' is not available") != std::string::npos ||
              cuda.find("has no varlen backward yet") != std::string::npos)
      << cuda;
}

TEST(Varlen, SingleSequenceEqualsAttention) {
  std::mt19937_64 rng(7);
  PackedProblem pp(DType::F32, {150}, 2, 1, 8, rng);
  HostTensor a(DType::F32, 1, 2, 150, 8, Layout::BLHD), b(DType::F32, 1, 2, 150, 8, Layout::BLHD);
  const Pattern pattern = Pattern::sliding_window(30, 0);
  AttentionOptions options;
  options.backend = Backend::Reference;
  attention_varlen(pp.q.view, pp.k.view, pp.v.view, a.view, pp.batch(pp.cu_seqlens.data(), pp.cu_seqlens.data()),
                   varlen_mask(pattern, 150, 64, 64), options);
  attention(pp.q.view, pp.k.view, pp.v.view, b.view, BlockMask::build(pattern, {150, 150, 64, 64, 1}), options);
  EXPECT_EQ(a.to_double(), b.to_double());
}

// ---- errors ----

void expect_error(const std::function<void()>& body, const std::string& needle) {
  try {
    body();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
        << "message \"" << e.what() << "\" does not mention \"" << needle << "\"";
    return;
  }
  ADD_FAILURE() << "no spattn::Error mentioning \"" << needle << "\"";
}

struct ErrorFixture {
  std::mt19937_64 rng{3};
  PackedProblem pp{DType::F32, {5, 0, 9}, 2, 1, 8, rng};
  HostTensor out{DType::F32, 1, 2, 14, 8, Layout::BLHD};
  BlockMask mask = varlen_mask(Pattern::causal(), 9, 16, 16);
  std::vector<int32_t> cu_q = pp.cu_seqlens, cu_k = pp.cu_seqlens;

  void run(VarlenBatch batch, Backend backend = Backend::Reference) {
    AttentionOptions options;
    options.backend = backend;
    attention_varlen(pp.q.view, pp.k.view, pp.v.view, out.view, batch, mask, options);
  }
  void run() { run(pp.batch(cu_q.data(), cu_k.data())); }
};

TEST(Varlen, RejectsBadCuSeqlens) {
  {
    ErrorFixture f;
    f.cu_q = {1, 5, 5, 14};
    expect_error([&] { f.run(); }, "cu_seqlens_q[0] must be 0, got 1");
  }
  {
    ErrorFixture f;
    f.cu_k = {0, 6, 5, 14};
    expect_error([&] { f.run(); }, "cu_seqlens_k must not decrease");
  }
  {
    ErrorFixture f;
    f.cu_q = {0, 5, 5, 13};
    expect_error([&] { f.run(); }, "cu_seqlens_q[3] must equal the number of rows (14), got 13");
  }
  {
    ErrorFixture f;
    f.cu_q = f.cu_k = {0, 2, 2, 14};  // a sequence of 12 > max_seqlen 9
    expect_error([&] { f.run(); }, "sequence 2 has length 12 (cu_seqlens_q) but max_seqlen_q=9");
  }
  {
    ErrorFixture f;
    f.cu_k = {0, 4, 5, 14};
    expect_error([&] { f.run(); }, "sequence 0 has 5 queries but 4 keys");
  }
  {
    ErrorFixture f;
    VarlenBatch batch = f.pp.batch(nullptr, f.cu_k.data());
    expect_error([&] { f.run(batch); }, "cu_seqlens_q is a null pointer");
    batch = f.pp.batch(f.cu_q.data(), f.cu_k.data());
    batch.num_seqs = 0;
    expect_error([&] { f.run(batch); }, "a batch of no sequences (num_seqs=0) has no rows, got total_q=14");
    batch = f.pp.batch(f.cu_q.data(), f.cu_k.data());
    batch.max_seqlen_k = 10;
    expect_error([&] { f.run(batch); }, "the mask was built for sequences up to 9 but max_seqlen_q=9 max_seqlen_k=10");
  }
}

TEST(Varlen, RejectsMasksThatCannotServeEverySequence) {
  ErrorFixture f;
  expect_error([] { varlen_mask(Pattern::bigbird(512, 64), 512); }, "depends on the sequence lengths");
  f.mask = BlockMask::build(Pattern::bigbird(9, 4), {9, 9, 4, 4, 1});
  expect_error([&] { f.run(); }, "bigbird");
  f.mask = BlockMask::build(Pattern::causal(), {9, 12, 16, 16, 1});
  expect_error([&] { f.run(); }, "the mask must be square");
  f.mask = BlockMask(9, 9, 16, 16, 1, {0, 1}, {0}, {1});
  expect_error([&] { f.run(); }, "the mask must be built from a pattern");
  f.mask = varlen_mask(Pattern::dilated({4}, {2}), 9, 16, 16, 2);
  f.run();  // a head-dependent pattern with one mask head per query head is fine
  f.mask = varlen_mask(Pattern::dilated({4}, {2}), 9, 16, 16, 1);
  expect_error([&] { f.run(); }, "the mask's pattern depends on the head");
}

TEST(Varlen, RejectsTensorsThatAreNotPacked) {
  ErrorFixture f;
  HostTensor q2(DType::F32, 2, 2, 7, 8), k2(DType::F32, 2, 1, 7, 8), v2(DType::F32, 2, 1, 7, 8),
      o2(DType::F32, 2, 2, 7, 8);
  expect_error([&] { attention_varlen(q2.view, k2.view, v2.view, o2.view, f.pp.batch(f.cu_q.data(), f.cu_k.data()),
                                      f.mask); },
               "q must hold the packed sequences in batch 1, got batch 2");
  HostTensor lse(DType::F32, 1, 2, 13, 1);
  expect_error([&] { attention_varlen(f.pp.q.view, f.pp.k.view, f.pp.v.view, f.out.view,
                                      f.pp.batch(f.cu_q.data(), f.cu_k.data()), f.mask, {}, &lse.view); },
               "lse shape must be (1, 2, 14)");
}

}  // namespace
}  // namespace spattn::testing
