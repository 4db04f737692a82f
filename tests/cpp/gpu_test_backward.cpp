// tests/cpp/gpu_test_backward.cpp - the CUDA backward pass
// (cuda_attention_backward) against the fp64 reference backward, on the
// device (each test skips without one; gpu_test_backward_plan.cpp checks the
// plan and the kernels' tile rule on the host).
//
// Fresh random inputs (never zeros), the forward's out and LSE from the fp64
// reference, gradients poisoned with NaN before the call and every element
// compared with reference_attention_backward: norm-wise ||g - ref|| / ||ref||
// and elementwise |g - ref| <= bound * max |ref|, bounds for the input
// dtype; rows the reference leaves at exactly zero (no allowed key, keys no
// row reads) must be exactly zero. Every pattern kind, a random custom mask
// with empty rows, unions, dilated per-head, GQA, batch 2, Lq != Lk, odd
// lengths, both layouts, head dims 64 and 128, fp16 and bf16, fp32 gradients
// and output, with and without an LSE gradient, a NaN LSE row, and three runs
// bitwise equal. GpuSanitizerSmall.Backward*: small problems over each path
// for compute-sanitizer (scripts/gpu_check.sh).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gpu_test_support.hpp"
#include "pattern_cases.hpp"

namespace spattn::testing {
namespace {

// ---- on the device -----------------------------------------------------------

struct BwdProblem {
  Pattern pattern = Pattern::causal();
  std::optional<BlockMask> mask;  // instead of the pattern's plan
  DType dtype = DType::BF16;
  std::optional<DType> out_dtype, grad_dtype;  // default: dtype
  int64_t batch = 1, q_heads = 2, kv_heads = 2, q_len = 256, k_len = 256, head_dim = 64;
  int64_t block_q = 128, block_k = 128;
  Layout layout = Layout::BHLD;
  bool with_d_lse = false;
  // Query row whose LSE is set to NaN before the backward (-1: none).
  int64_t nan_lse_row = -1;

  DType out_type() const { return out_dtype.value_or(dtype); }
  DType grad_type() const { return grad_dtype.value_or(dtype); }
  std::string describe() const {
    return std::string(dtype_name(dtype)) + " B" + std::to_string(batch) + " Hq" + std::to_string(q_heads) + " Hkv" +
           std::to_string(kv_heads) + " Lq" + std::to_string(q_len) + " Lk" + std::to_string(k_len) + " D" +
           std::to_string(head_dim) + " blocks " + std::to_string(block_q) + "x" + std::to_string(block_k) +
           (layout == Layout::BLHD ? " blhd" : " bhld") + " out " + dtype_name(out_type()) + " grads " +
           dtype_name(grad_type()) + (with_d_lse ? " d_lse" : "") + (mask ? " mask from arrays" : "") + " " +
           pattern.describe();
  }
};

struct GradSet {
  std::vector<double> dq, dk, dv;
};

struct BwdOutcome {
  GradSet got, ref;
  std::vector<GradSet> reruns;  // the same call again, when asked
  // Rows with no allowed pair, in logical (B, H, L) order: query rows with
  // no key (their dq row is exactly 0) and key rows that no query of their kv
  // head's query heads reaches (their dk and dv rows are exactly 0).
  std::vector<bool> q_rows_alone, k_rows_alone;
};

// Fills r's rows with no allowed pair from the mask (the same in every batch).
void find_rows_without_pairs(const BlockMask& mask, const BwdProblem& pr, BwdOutcome& r) {
  const int64_t group = pr.q_heads / pr.kv_heads;
  std::vector<bool> q(static_cast<size_t>(pr.q_heads * pr.q_len), true);
  std::vector<bool> k(static_cast<size_t>(pr.kv_heads * pr.k_len), true);
  for (int64_t h = 0; h < pr.q_heads; ++h)
    for (int64_t i = 0; i < pr.q_len; ++i)
      for (int64_t j = 0; j < pr.k_len; ++j)
        if (mask.allowed(h, pr.q_heads, i, j)) {
          q[static_cast<size_t>(h * pr.q_len + i)] = false;
          k[static_cast<size_t>((h / group) * pr.k_len + j)] = false;
        }
  for (int64_t b = 0; b < pr.batch; ++b) {
    r.q_rows_alone.insert(r.q_rows_alone.end(), q.begin(), q.end());
    r.k_rows_alone.insert(r.k_rows_alone.end(), k.begin(), k.end());
  }
}

// Fresh inputs, the forward on the host reference, the backward on the
// device into poisoned gradients (`runs` times), the reference backward
// (unless `with_reference` is false).
BwdOutcome run_backward(const BwdProblem& pr, uint64_t seed, int runs = 1, bool with_reference = true) {
  std::mt19937_64 rng(seed);
  const BlockMask mask = pr.mask ? *pr.mask
                                 : BlockMask::build(pr.pattern, MaskShape{pr.q_len, pr.k_len, pr.block_q, pr.block_k,
                                                                          pr.q_heads});
  const int64_t B = pr.batch, Hq = pr.q_heads, Hkv = pr.kv_heads, D = pr.head_dim;
  HostTensor q(pr.dtype, B, Hq, pr.q_len, D, pr.layout), k(pr.dtype, B, Hkv, pr.k_len, D, pr.layout);
  HostTensor v(pr.dtype, B, Hkv, pr.k_len, D, pr.layout), d_out(pr.dtype, B, Hq, pr.q_len, D, pr.layout);
  HostTensor d_lse(DType::F32, B, Hq, pr.q_len, 1);
  q.fill_random(rng, 1.5);
  k.fill_random(rng, 1.5);
  v.fill_random(rng);
  d_out.fill_random(rng);
  d_lse.fill_random(rng);
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  HostTensor out(pr.out_type(), B, Hq, pr.q_len, D, pr.layout), lse(DType::F32, B, Hq, pr.q_len, 1);
  reference_attention(q.view, k.view, v.view, out.view, mask, scale, &lse.view);
  if (pr.nan_lse_row >= 0) lse.view.store(B - 1, Hq - 1, pr.nan_lse_row, 0, std::nan(""));

  DeviceTensor dev_q(q), dev_k(k), dev_v(v), dev_out(out), dev_lse(lse), dev_d_out(d_out), dev_d_lse(d_lse);
  HostTensor dq(pr.grad_type(), B, Hq, pr.q_len, D, pr.layout), dk(pr.grad_type(), B, Hkv, pr.k_len, D, pr.layout);
  HostTensor dv(pr.grad_type(), B, Hkv, pr.k_len, D, pr.layout);
  DeviceTensor dev_dq(dq), dev_dk(dk), dev_dv(dv);
  const TensorView* g_lse = pr.with_d_lse ? &dev_d_lse.view() : nullptr;
  BwdOutcome r;
  for (int run = 0; run < runs; ++run) {
    dev_dq.poison();
    dev_dk.poison();
    dev_dv.poison();
    TestStream s;
    cuda_attention_backward(dev_q.view(), dev_k.view(), dev_v.view(), dev_out.view(), dev_lse.view(),
                            dev_d_out.view(), {dev_dq.view(), dev_dk.view(), dev_dv.view()}, mask, scale, g_lse,
                            s.stream);
    cuda_ok(cudaDeviceSynchronize(), "backward kernels");
    dev_dq.copy_to(dq);
    dev_dk.copy_to(dk);
    dev_dv.copy_to(dv);
    GradSet g{dq.to_double(), dk.to_double(), dv.to_double()};
    if (run == 0)
      r.got = std::move(g);
    else
      r.reruns.push_back(std::move(g));
  }
  if (!with_reference) return r;
  find_rows_without_pairs(mask, pr, r);
  HostTensor ref_dq(DType::F64, B, Hq, pr.q_len, D), ref_dk(DType::F64, B, Hkv, pr.k_len, D);
  HostTensor ref_dv(DType::F64, B, Hkv, pr.k_len, D);
  reference_attention_backward(q.view, k.view, v.view, out.view, lse.view, d_out.view,
                               {ref_dq.view, ref_dk.view, ref_dv.view}, mask, scale,
                               pr.with_d_lse ? &d_lse.view : nullptr);
  r.ref = GradSet{ref_dq.to_double(), ref_dk.to_double(), ref_dv.to_double()};
  return r;
}

// Norm-wise and elementwise (relative to the largest reference element)
// bounds: the products round P and dS to the input dtype (unit roundoff 2^-9
// in bf16, 2^-12 in fp16) and the gradients are rounded to their dtype;
// measured errors sit several times below these.
struct GradBounds {
  double norm, elem;
};
GradBounds grad_bounds(DType dtype) { return dtype == DType::BF16 ? GradBounds{2e-2, 4e-2} : GradBounds{4e-3, 8e-3}; }

// One gradient (logical (B, H, L, D) order, rows of D) against its reference.
void expect_gradient_matches(const std::vector<double>& got, const std::vector<double>& ref,
                             const std::vector<bool>& rows_alone, int64_t D, GradBounds bounds, const char* name) {
  ASSERT_EQ(got.size(), ref.size()) << name;
  ASSERT_EQ(rows_alone.size() * static_cast<size_t>(D), ref.size()) << name;
  double largest = 0.0;
  for (const double x : ref) largest = std::max(largest, std::fabs(x));
  EXPECT_LT(relative_error(got, ref), bounds.norm) << name;
  int reported = 0;
  for (size_t row = 0; row * D < ref.size(); ++row) {
    bool got_zero = true;
    for (int64_t d = 0; d < D; ++d) {
      const size_t e = row * D + static_cast<size_t>(d);
      got_zero = got_zero && got[e] == 0.0;
      if (!(std::fabs(got[e] - ref[e]) <= bounds.elem * largest) && reported < 5) {
        ADD_FAILURE() << name << " element " << e << " (row " << row << ", d " << d << "): " << got[e]
                      << " against " << ref[e] << " (largest " << largest << ")";
        ++reported;
      }
    }
    if (rows_alone[row] && !got_zero && reported < 5) {
      ADD_FAILURE() << name << " row " << row << " must be exactly zero (no allowed pair)";
      ++reported;
    }
  }
}

void expect_backward_matches(const BwdProblem& pr, uint64_t seed) {
  SCOPED_TRACE(pr.describe());
  const BwdOutcome r = run_backward(pr, seed);
  const GradBounds bounds = grad_bounds(pr.dtype);
  expect_gradient_matches(r.got.dq, r.ref.dq, r.q_rows_alone, pr.head_dim, bounds, "dq");
  expect_gradient_matches(r.got.dk, r.ref.dk, r.k_rows_alone, pr.head_dim, bounds, "dk");
  expect_gradient_matches(r.got.dv, r.ref.dv, r.k_rows_alone, pr.head_dim, bounds, "dv");
}

TEST(GpuBackward, EveryPatternBothDtypes) {
  SPATTN_REQUIRE_GPU();
  std::mt19937_64 rng(4801);
  const int64_t L = 520;
  std::vector<Case> cases = {
      dense_case(false), causal_case(), block_diagonal_case(100, false), sliding_window_case(64, 32, false),
      window_case(200), streaming_case(16, 100), strided_case(37), fixed_case(64, 8),
      bigbird_case(L, 64, 3, 1, 3, 7, false), longformer_case(64, {0, 260, 519}, false),
      custom_case(rng, L, L, 4, 64, 64, 0.3, false, false),
      per_head_case({streaming_case(8, 50), dense_case(true)}, 4),
      dilated_case({128, 256}, {2, 4}, false),
      unite_case(dilated_case({256}, {4}, true), window_case(64)),
      intersect_case(window_case(300), strided_case(3))};
  uint64_t seed = 1;
  for (const Case& c : cases)
    for (DType dtype : {DType::BF16, DType::F16}) {
      BwdProblem pr;
      pr.pattern = c.pattern;
      pr.dtype = dtype;
      pr.q_heads = pr.kv_heads = 4;
      pr.q_len = pr.k_len = L;
      pr.head_dim = dtype == DType::BF16 ? 128 : 64;
      pr.block_q = pr.block_k = c.name.rfind("bigbird", 0) == 0 ? 64 : 128;
      pr.with_d_lse = seed % 2 == 0;
      expect_backward_matches(pr, seed++);
    }
}

// A custom block mask whose rows 1 and 3 of 64-token blocks keep nothing, as
// a pattern (query rows without a key: zero dq) and as arrays without a
// pattern (every block full).
TEST(GpuBackward, CustomMasksWithEmptyRows) {
  SPATTN_REQUIRE_GPU();
  const std::vector<uint8_t> blocks = {1, 0, 1, 0, 0, 0, 0, 0, 0, 1, 1, 1, 0, 0, 0, 0};
  BwdProblem pr;
  pr.pattern = Pattern::custom(blocks, 1, 4, 4, 64, 64);
  pr.q_len = pr.k_len = 250;
  pr.block_q = pr.block_k = 64;
  expect_backward_matches(pr, 900);
  pr.dtype = DType::F16;
  pr.head_dim = 128;
  pr.with_d_lse = true;
  expect_backward_matches(pr, 901);
  std::mt19937_64 rng(902);
  pr.pattern = custom_case(rng, 700, 700, 2, 32, 32, 0.15, false, true).pattern;
  pr.q_len = pr.k_len = 700;
  pr.block_q = pr.block_k = 32;
  expect_backward_matches(pr, 903);

  const int64_t L = 300, n = ceil_div(L, 64);
  std::vector<int64_t> offsets{0};
  std::vector<int32_t> indices;
  for (int64_t r = 0; r < n; ++r) {
    if (r != 2)
      for (int64_t c = 0; c < n; ++c)
        if ((r + c) % 3 != 0) indices.push_back(static_cast<int32_t>(c));
    offsets.push_back(static_cast<int64_t>(indices.size()));
  }
  pr = BwdProblem{};
  pr.mask = BlockMask(L, L, 64, 64, 1, offsets, indices, std::vector<uint8_t>(indices.size(), 1));
  pr.q_len = pr.k_len = L;
  pr.block_q = pr.block_k = 64;
  expect_backward_matches(pr, 904);
}

TEST(GpuBackward, OddLengths) {
  SPATTN_REQUIRE_GPU();
  uint64_t seed = 1000;
  for (int64_t L : {1, 17, 257, 1000})
    for (const Pattern& pattern : {Pattern::causal(), Pattern::sliding_window(100), Pattern::dense()}) {
      BwdProblem pr;
      pr.pattern = pattern;
      pr.q_heads = pr.kv_heads = 1;
      pr.q_len = pr.k_len = L;
      pr.head_dim = seed % 2 ? 64 : 128;
      pr.dtype = seed % 3 ? DType::BF16 : DType::F16;
      pr.with_d_lse = seed % 2 == 0;
      expect_backward_matches(pr, seed++);
    }
}

// Lq < Lk (a chunk after cached keys) and Lq > Lk (causal rows before
// position 0 have no allowed key: LSE -inf, zero dq).
TEST(GpuBackward, QueryAndKeyLengthsDiffer) {
  SPATTN_REQUIRE_GPU();
  uint64_t seed = 1100;
  for (auto [lq, lk] : {std::pair<int64_t, int64_t>{300, 1000}, {1000, 300}, {65, 129}, {129, 65}, {1, 700}})
    for (const Pattern& pattern : {Pattern::causal(), Pattern::streaming(4, 64), Pattern::dense()}) {
      BwdProblem pr;
      pr.pattern = pattern;
      pr.q_len = lq;
      pr.k_len = lk;
      pr.head_dim = 128;
      pr.dtype = seed % 2 ? DType::F16 : DType::BF16;
      pr.with_d_lse = seed % 3 == 0;
      expect_backward_matches(pr, seed++);
    }
}

// Eight query heads over 8, 2 and 1 kv heads, batch 2, both layouts: a
// head-dependent pattern (one mask head per query head) and causal (one
// mask head for all).
TEST(GpuBackward, GroupedQueryHeadsBatchesAndLayouts) {
  SPATTN_REQUIRE_GPU();
  uint64_t seed = 1200;
  for (int64_t kv_heads : {2, 8, 1})
    for (Layout layout : {Layout::BHLD, Layout::BLHD}) {
      BwdProblem pr;
      pr.pattern = Pattern::dilated({128}, {2}, true);
      pr.batch = 2;
      pr.q_heads = 8;
      pr.kv_heads = kv_heads;
      pr.q_len = pr.k_len = 390;
      pr.layout = layout;
      pr.head_dim = kv_heads == 2 ? 128 : 64;
      pr.with_d_lse = layout == Layout::BLHD;
      expect_backward_matches(pr, seed++);
      pr.pattern = Pattern::causal();
      pr.dtype = DType::F16;
      expect_backward_matches(pr, seed++);
    }
}

// Mask blocks from 16 to 256 on either side: walked directly (multiples of
// 64) or through 64 x 64 tiles with sub-block bits.
TEST(GpuBackward, MaskBlockSizes) {
  SPATTN_REQUIRE_GPU();
  std::mt19937_64 rng(1300);
  uint64_t seed = 1300;
  for (auto [bq, bk] : {std::pair<int64_t, int64_t>{16, 16}, {32, 32}, {64, 64}, {256, 256}, {16, 128}, {128, 32},
                        {256, 64}})
    for (int kind = 0; kind < 3; ++kind) {
      BwdProblem pr;
      pr.q_len = pr.k_len = 600;
      pr.block_q = bq;
      pr.block_k = bk;
      pr.pattern = kind == 0   ? Pattern::sliding_window(150, 40)
                   : kind == 1 ? custom_case(rng, 600, 600, 1, 48, 80, 0.3, true, false).pattern
                               : Pattern::fixed(100, 8);
      pr.head_dim = kind == 1 ? 128 : 64;
      pr.dtype = seed % 2 ? DType::F16 : DType::BF16;
      expect_backward_matches(pr, seed++);
    }
}

TEST(GpuBackward, Fp32GradientsAndOutput) {
  SPATTN_REQUIRE_GPU();
  uint64_t seed = 1400;
  for (DType dtype : {DType::BF16, DType::F16}) {
    BwdProblem pr;
    pr.pattern = Pattern::sliding_window(100, 20);
    pr.dtype = dtype;
    pr.grad_dtype = DType::F32;
    pr.q_len = pr.k_len = 333;
    pr.with_d_lse = true;
    expect_backward_matches(pr, seed++);
    pr.out_dtype = DType::F32;
    pr.layout = Layout::BLHD;
    pr.head_dim = 128;
    expect_backward_matches(pr, seed++);
  }
}

// A NaN LSE makes its row's weights NaN: dq of the row and dk, dv of the
// keys it keeps are NaN, everything else as without it (the host backends'
// rule).
TEST(GpuBackward, NanLseSpreadsToWhatTheRowReads) {
  SPATTN_REQUIRE_GPU();
  BwdProblem pr;
  pr.pattern = Pattern::sliding_window(50);
  pr.q_len = pr.k_len = 300;
  pr.nan_lse_row = 200;
  const BwdOutcome r = run_backward(pr, 1500);
  const auto same_nans = [](const std::vector<double>& a, const std::vector<double>& b) {
    size_t nans = 0;
    for (size_t e = 0; e < a.size(); ++e) {
      if (std::isnan(a[e]) != std::isnan(b[e])) return size_t{0};
      nans += std::isnan(b[e]) ? 1 : 0;
    }
    return nans;
  };
  EXPECT_GT(same_nans(r.got.dq, r.ref.dq), 0u);
  EXPECT_GT(same_nans(r.got.dk, r.ref.dk), 0u);
  EXPECT_GT(same_nans(r.got.dv, r.ref.dv), 0u);
}

TEST(GpuBackward, BitwiseDeterministic) {
  SPATTN_REQUIRE_GPU();
  for (const Pattern& pattern : {Pattern::causal(), Pattern::bigbird(1500, 64, 3, 1, 3, 5)}) {
    BwdProblem pr;
    pr.pattern = pattern;
    pr.batch = 2;
    pr.q_heads = 8;
    pr.kv_heads = 2;
    pr.q_len = pr.k_len = 1500;
    pr.block_q = pr.block_k = 64;
    pr.head_dim = 128;
    pr.with_d_lse = true;
    SCOPED_TRACE(pr.describe());
    const BwdOutcome r = run_backward(pr, 1600, 3, false);
    for (const GradSet& again : r.reruns) {
      EXPECT_TRUE(std::memcmp(again.dq.data(), r.got.dq.data(), r.got.dq.size() * sizeof(double)) == 0) << "dq";
      EXPECT_TRUE(std::memcmp(again.dk.data(), r.got.dk.data(), r.got.dk.size() * sizeof(double)) == 0) << "dk";
      EXPECT_TRUE(std::memcmp(again.dv.data(), r.got.dv.data(), r.got.dv.size() * sizeof(double)) == 0) << "dv";
    }
  }
}

// attention_backward on device tensors takes the CUDA backend (Auto).
TEST(GpuBackward, AttentionBackwardDispatchesToCuda) {
  SPATTN_REQUIRE_GPU();
  const int64_t L = 200, D = 64;
  std::mt19937_64 rng(1700);
  HostTensor q(DType::BF16, 1, 2, L, D), k(DType::BF16, 1, 2, L, D), v(DType::BF16, 1, 2, L, D);
  HostTensor d_out(DType::BF16, 1, 2, L, D), out(DType::BF16, 1, 2, L, D), lse(DType::F32, 1, 2, L, 1);
  for (HostTensor* t : {&q, &k, &v, &d_out}) t->fill_random(rng);
  const BlockMask mask = BlockMask::build(Pattern::causal(), {L, L, 64, 64, 2});
  reference_attention(q.view, k.view, v.view, out.view, mask, 0.125, &lse.view);
  DeviceTensor dev_q(q), dev_k(k), dev_v(v), dev_out(out), dev_lse(lse), dev_d_out(d_out);
  HostTensor dq(DType::BF16, 1, 2, L, D), dk(DType::BF16, 1, 2, L, D), dv(DType::BF16, 1, 2, L, D);
  DeviceTensor dev_dq(dq), dev_dk(dk), dev_dv(dv);
  dev_dq.poison();
  dev_dk.poison();
  dev_dv.poison();
  AttentionOptions options;
  options.scale = 0.125;
  attention_backward(dev_q.view(), dev_k.view(), dev_v.view(), dev_out.view(), dev_lse.view(), dev_d_out.view(),
                     {dev_dq.view(), dev_dk.view(), dev_dv.view()}, mask, options);
  cuda_ok(cudaDeviceSynchronize(), "attention_backward");
  dev_dq.copy_to(dq);
  dev_dk.copy_to(dk);
  dev_dv.copy_to(dv);
  HostTensor ref_dq(DType::F64, 1, 2, L, D), ref_dk(DType::F64, 1, 2, L, D), ref_dv(DType::F64, 1, 2, L, D);
  reference_attention_backward(q.view, k.view, v.view, out.view, lse.view, d_out.view,
                               {ref_dq.view, ref_dk.view, ref_dv.view}, mask, 0.125, nullptr);
  EXPECT_LT(relative_error(dq.to_double(), ref_dq.to_double()), grad_bounds(DType::BF16).norm);
  EXPECT_LT(relative_error(dk.to_double(), ref_dk.to_double()), grad_bounds(DType::BF16).norm);
  EXPECT_LT(relative_error(dv.to_double(), ref_dv.to_double()), grad_bounds(DType::BF16).norm);
}

// Small problems covering each path of the backward kernels, for
// compute-sanitizer (scripts/gpu_check.sh): blocks walked directly with a
// ragged last tile on both sides, derived 64 x 64 tiles with sub-block bits
// and a predicate without a span form, GQA with an LSE gradient, a mask
// from arrays with empty rows, Lq > Lk with rows without keys.
TEST(GpuSanitizerSmall, BackwardDirectBlocks) {
  SPATTN_REQUIRE_GPU();
  BwdProblem pr;
  pr.q_len = 150;
  pr.k_len = 190;
  pr.pattern = Pattern::causal();
  expect_backward_matches(pr, 1);
  pr.head_dim = 128;
  pr.dtype = DType::F16;
  pr.pattern = Pattern::sliding_window(40, 10);
  expect_backward_matches(pr, 2);
}

TEST(GpuSanitizerSmall, BackwardDerivedTiles) {
  SPATTN_REQUIRE_GPU();
  BwdProblem pr;
  pr.q_len = pr.k_len = 200;
  pr.block_q = pr.block_k = 32;
  pr.pattern = Pattern::fixed(40, 4);
  pr.head_dim = 128;
  expect_backward_matches(pr, 3);
  pr.block_q = 16;
  pr.block_k = 128;
  pr.pattern = Pattern::bigbird(200, 16, 3, 1, 2, 3);
  pr.head_dim = 64;
  pr.dtype = DType::F16;
  expect_backward_matches(pr, 4);
}

TEST(GpuSanitizerSmall, BackwardGroupedHeadsAndEmptyRows) {
  SPATTN_REQUIRE_GPU();
  BwdProblem pr;
  pr.pattern = Pattern::streaming(8, 40);
  pr.q_heads = 4;
  pr.kv_heads = 2;
  pr.batch = 2;
  pr.q_len = 180;
  pr.k_len = 100;
  pr.with_d_lse = true;
  pr.grad_dtype = DType::F32;
  pr.layout = Layout::BLHD;
  expect_backward_matches(pr, 5);
  const std::vector<uint8_t> blocks = {1, 0, 0, 0, 0, 1, 1, 0, 1};
  pr = BwdProblem{};
  pr.pattern = Pattern::custom(blocks, 1, 3, 3, 64, 64);
  pr.q_len = pr.k_len = 150;
  pr.block_q = pr.block_k = 64;
  expect_backward_matches(pr, 6);
}

}  // namespace
}  // namespace spattn::testing
