// tests/cpp/gpu_test_device_mask.cpp - plans built on the device
// (cuda_build_mask) against the host builder, array for array, and attention
// through a device-built mask against the fp64 reference.
//
// Equality is exact: the device builder must keep the same blocks with the
// same full flags in the same order as BlockMask::build, for every pattern
// kind, composites and per-head mixes, odd lengths, Lq != Lk both ways, zero
// lengths, and block sizes from 1 to 256 on either side.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "expect_error.hpp"
#include "gpu_test_support.hpp"
#include "pattern_cases.hpp"

namespace spattn::testing {
namespace {

std::string shape_text(const MaskShape& s) {
  return "Lq " + std::to_string(s.q_len) + " Lk " + std::to_string(s.k_len) + " blocks " +
         std::to_string(s.block_q) + "x" + std::to_string(s.block_k) + " heads " + std::to_string(s.num_heads);
}

void expect_same_plan(const Pattern& pattern, const MaskShape& s, const std::string& name) {
  SCOPED_TRACE(name + ", " + shape_text(s));
  const BlockMask host = BlockMask::build(pattern, s);
  const BlockMask device = cuda_build_mask(pattern, s);
  ASSERT_EQ(device.num_heads(), host.num_heads());
  ASSERT_EQ(device.num_q_blocks(), host.num_q_blocks());
  ASSERT_EQ(device.num_k_blocks(), host.num_k_blocks());
  ASSERT_EQ(device.row_offsets(), host.row_offsets());
  ASSERT_EQ(device.kv_indices(), host.kv_indices());
  ASSERT_EQ(device.kv_full(), host.kv_full());
  EXPECT_TRUE(device.is_pattern_plan());
}

const int64_t kPow2Blocks[] = {16, 32, 64, 128, 256};

TEST(DeviceMaskBuild, EveryPatternKindOddLengthsAllBlockSizes) {
  SPATTN_REQUIRE_GPU();
  const std::pair<int64_t, int64_t> lengths[] = {{1, 1}, {17, 17}, {1000, 1000}, {4099, 4099},
                                                 {300, 1000}, {1000, 300}, {4099, 1}};
  std::mt19937_64 rng(11);
  for (const auto& [lq, lk] : lengths)
    for (const int64_t bq : kPow2Blocks)
      for (const int64_t bk : {bq, kPow2Blocks[draw(rng, 0, 4)]})
        for (int kind = 0; kind < kNumLeafKinds; ++kind) {
          const MaskShape s{lq, lk, bq, bk, 4};
          const Case c = random_leaf(rng, kind, lq, lk, s.num_heads);
          expect_same_plan(c.pattern, s, c.name);
          if (HasFatalFailure()) return;
        }
}

TEST(DeviceMaskBuild, CompositesAndPerHeadMixes) {
  SPATTN_REQUIRE_GPU();
  std::mt19937_64 rng(99);
  for (int n = 0; n < 300; ++n) {
    const int64_t lq = draw(rng, 1, 2500), lk = draw(rng, 0, 2) ? lq : draw(rng, 1, 2500);
    const int64_t bq = draw(rng, 0, 3) ? kPow2Blocks[draw(rng, 0, 4)] : draw(rng, 1, 70);
    const int64_t bk = draw(rng, 0, 3) ? kPow2Blocks[draw(rng, 0, 4)] : draw(rng, 1, 70);
    const MaskShape s{lq, lk, bq, bk, draw(rng, 1, 2) * 2};
    const Case c = random_case(rng, lq, lk, s.num_heads);
    expect_same_plan(c.pattern, s, c.name);
    if (HasFatalFailure()) return;
  }
}

// The benchmark's patterns at the length the plan-time target is set for.
TEST(DeviceMaskBuild, LongSequencePatterns) {
  SPATTN_REQUIRE_GPU();
  const int64_t L = 131072;
  const Pattern patterns[] = {
      Pattern::causal(),
      Pattern::sliding_window(4096),
      Pattern::streaming(128, 4096),
      Pattern::strided(4096),
      Pattern::fixed(4096, 128),
      Pattern::dilated({2048, 8192}, {4, 16}),
      Pattern::unite(Pattern::dilated({2048}, {4}, true), Pattern::sliding_window(512)),
      Pattern::bigbird(L, 128, 3, 1, 3, 0),
      Pattern::longformer(4096, {0, 1, 2, 3, 4, 5, 6, 7}),
  };
  for (const Pattern& p : patterns) {
    expect_same_plan(p, MaskShape{L, L, 128, 128, 8}, p.describe());
    if (HasFatalFailure()) return;
    expect_same_plan(p, MaskShape{L - 77, L, 64, 128, 8}, p.describe());
    if (HasFatalFailure()) return;
  }
}

// Attention through a device-built mask (its adopted device copy) against the
// fp64 reference over the host-built mask.
void expect_attention_matches(const Pattern& pattern, int64_t q_len, int64_t k_len, int64_t heads,
                              int64_t block, uint64_t seed) {
  const MaskShape s{q_len, k_len, block, block, heads};
  SCOPED_TRACE(pattern.describe() + ", " + shape_text(s));
  std::mt19937_64 rng(seed);
  const int64_t D = 64;
  HostTensor q(DType::BF16, 1, heads, q_len, D), k(DType::BF16, 1, heads, k_len, D),
      v(DType::BF16, 1, heads, k_len, D);
  q.fill_random(rng);
  k.fill_random(rng);
  v.fill_random(rng);
  HostTensor out(DType::BF16, 1, heads, q_len, D), lse(DType::F32, 1, heads, q_len, 1);
  DeviceTensor dq(q), dk(k), dv(v), dout(out), dlse(lse);
  dout.poison();
  dlse.poison();
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  const BlockMask device_mask = cuda_build_mask(pattern, s);
  cuda_attention(dq.view(), dk.view(), dv.view(), dout.view(), device_mask, scale, &dlse.view());
  cuda_ok(cudaDeviceSynchronize(), "attention kernel");
  dout.copy_to(out);
  dlse.copy_to(lse);
  HostTensor ref(DType::F64, 1, heads, q_len, D), ref_lse(DType::F64, 1, heads, q_len, 1);
  reference_attention(q.view, k.view, v.view, ref.view, BlockMask::build(pattern, s), scale, &ref_lse.view);
  EXPECT_LT(relative_error(out.to_double(), ref.to_double()), out_tolerance(DType::BF16));
  EXPECT_LT(max_lse_error(lse.to_double(), ref_lse.to_double()), kLseTolerance);
}

TEST(DeviceMaskBuild, AttentionWithDeviceBuiltMask) {
  SPATTN_REQUIRE_GPU();
  expect_attention_matches(Pattern::causal(), 1000, 1000, 2, 128, 1);
  expect_attention_matches(Pattern::streaming(16, 300), 777, 1300, 2, 64, 2);
  expect_attention_matches(Pattern::strided(100), 1300, 777, 2, 128, 3);
  expect_attention_matches(Pattern::dilated({256, 512}, {2, 4}), 1024, 1024, 4, 64, 4);
  expect_attention_matches(Pattern::bigbird(1000, 64, 3, 1, 2, 5), 1000, 1000, 2, 64, 5);
  expect_attention_matches(Pattern::per_head({Pattern::sliding_window(200), Pattern::causal()}), 900, 900,
                           2, 128, 6);
}

TEST(DeviceMaskBuild, ZeroLengthsGiveTheHostsEmptyPlans) {
  SPATTN_REQUIRE_GPU();
  const Pattern mix = Pattern::per_head({Pattern::causal(), Pattern::dilated({64}, {2})});
  for (const MaskShape& s : {MaskShape{0, 100, 64, 64, 2}, MaskShape{100, 0, 64, 64, 2}, MaskShape{0, 0, 16, 16, 2}}) {
    expect_same_plan(Pattern::causal(), s, "causal");
    expect_same_plan(mix, s, "per-head mix");
  }
}

TEST(DeviceMaskBuild, ErrorsNameTheParameter) {
  SPATTN_REQUIRE_GPU();
  expect_error([] { cuda_build_mask(Pattern::causal(), MaskShape{100, 100, 0, 64, 1}); },
                          "block_q must be > 0, got 0");
  expect_error([] { cuda_build_mask(Pattern::causal(), MaskShape{100, 100, 64, -3, 1}); },
                          "block_k must be > 0, got -3");
  expect_error([] { cuda_build_mask(Pattern::causal(), MaskShape{-1, 100, 64, 64, 1}); },
                          "q_len must be >= 0, got -1");
  expect_error(
      [] { cuda_build_mask(Pattern::per_head({Pattern::causal(), Pattern::dense()}), MaskShape{64, 64, 16, 16, 3}); },
      "num_heads (3) must be a multiple");
}

}  // namespace
}  // namespace spattn::testing
