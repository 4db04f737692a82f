// tests/cpp/gpu_test_attention.cpp - the fused CUDA kernel against the fp64
// reference: every pattern, both dtypes, every head dim, odd lengths,
// Lq != Lk, GQA, both layouts, rows with no allowed key, empty shapes, and
// mask block sizes from 16 to 256 on both sides (independent of the kernel tile).
#include <gtest/gtest.h>

#include <limits>
#include <random>
#include <vector>

#include "gpu_test_problems.hpp"
#include "gpu_test_support.hpp"
#include "pattern_cases.hpp"

namespace spattn::testing {
namespace {

TEST(GpuAttention, EveryPatternBothDtypes) {
  SPATTN_REQUIRE_GPU();
  std::mt19937_64 rng(101);
  std::vector<Case> cases = every_pattern_cases(rng);
  cases.push_back(dilated_case({128, 256}, {2, 4}, false));
  cases.push_back(unite_case(dilated_case({256}, {4}, true), window_case(64)));
  uint64_t seed = 1;
  for (GpuProblem pr : pattern_problems(cases)) {
    pr.head_dim = pr.dtype == DType::BF16 ? 128 : 64;
    expect_matches_reference(pr, seed++);
  }
}

TEST(GpuAttention, RandomCompositions) {
  SPATTN_REQUIRE_GPU();
  std::mt19937_64 rng(202);
  for (int n = 0; n < 16; ++n) {
    GpuProblem pr;
    pr.q_len = draw(rng, 1, 700);
    pr.k_len = draw(rng, 1, 700);
    pr.q_heads = 4;
    pr.kv_heads = draw(rng, 0, 1) ? 4 : 2;
    pr.pattern = random_case(rng, pr.q_len, pr.k_len, pr.q_heads).pattern;
    pr.dtype = pr.out_dtype = n % 2 ? DType::F16 : DType::BF16;
    pr.head_dim = n % 3 ? 64 : 128;
    const int64_t blocks[] = {16, 32, 64, 128, 256};
    pr.block_q = blocks[draw(rng, 0, 4)];
    pr.block_k = blocks[draw(rng, 0, 4)];
    expect_matches_reference(pr, 1000 + n);
  }
}

TEST(GpuAttention, EveryHeadDim) {
  SPATTN_REQUIRE_GPU();
  uint64_t seed = 300;
  for (int64_t d : {32, 64, 96, 128, 256})
    for (DType dtype : {DType::BF16, DType::F16})
      for (const Pattern& pattern : {Pattern::causal(), Pattern::sliding_window(100, 20)}) {
        GpuProblem pr;
        pr.pattern = pattern;
        pr.dtype = pr.out_dtype = dtype;
        pr.head_dim = d;
        pr.q_len = pr.k_len = 333;
        expect_matches_reference(pr, seed++);
      }
}

TEST(GpuAttention, OddLengths) {
  SPATTN_REQUIRE_GPU();
  uint64_t seed = 400;
  for (int64_t L : {1, 17, 1000, 4099})
    for (const Pattern& pattern : {Pattern::causal(), Pattern::sliding_window(257)}) {
      GpuProblem pr;
      pr.pattern = pattern;
      pr.q_heads = pr.kv_heads = 1;
      pr.q_len = pr.k_len = L;
      expect_matches_reference(pr, seed++);
    }
}

TEST(GpuAttention, QueryAndKeyLengthsDiffer) {
  SPATTN_REQUIRE_GPU();
  uint64_t seed = 500;
  // Lq > Lk gives causal rows before position 0: no allowed key, O = 0, LSE = -inf.
  for (auto [lq, lk] : {std::pair<int64_t, int64_t>{300, 1000}, {1000, 300}, {129, 65}, {65, 129}})
    for (const Pattern& pattern : {Pattern::causal(), Pattern::streaming(4, 64), Pattern::dense()}) {
      GpuProblem pr;
      pr.pattern = pattern;
      pr.q_len = lq;
      pr.k_len = lk;
      expect_matches_reference(pr, seed++);
    }
}

TEST(GpuAttention, GroupedQueryHeadsBatchesAndLayouts) {
  SPATTN_REQUIRE_GPU();
  uint64_t seed = 600;
  for (int64_t kv_heads : {8, 2, 1})
    for (Layout layout : {Layout::BHLD, Layout::BLHD}) {
      GpuProblem pr;
      pr.pattern = Pattern::dilated({128}, {2}, true);  // head-dependent: one mask head per query head
      pr.batch = 2;
      pr.q_heads = 8;
      pr.kv_heads = kv_heads;
      pr.q_len = pr.k_len = 390;
      pr.layout = layout;
      expect_matches_reference(pr, seed++);
      pr.pattern = Pattern::causal();  // one mask head shared by all query heads
      expect_matches_reference(pr, seed++);
    }
}

TEST(GpuAttention, RowsWithoutKeysAndFp32Output) {
  SPATTN_REQUIRE_GPU();
  GpuProblem pr = rows_without_keys_problem();
  expect_matches_reference(pr, 700);
  pr.out_dtype = DType::F32;
  expect_matches_reference(pr, 701);
  pr.dtype = DType::F16;
  expect_matches_reference(pr, 702);
}

// Output rows 4-byte but not 16-byte aligned (the output starts 2 elements
// past a 16-byte boundary): the kernels store them 4 bytes at a time; a
// length that is not a multiple of the tile leaves rows of the last tile
// outside the sequence.
TEST(GpuAttention, OutputRowsNotSixteenByteAligned) {
  SPATTN_REQUIRE_GPU();
  uint64_t seed = 720;
  for (DType dtype : {DType::BF16, DType::F16})
    for (Layout layout : {Layout::BHLD, Layout::BLHD}) {
      GpuProblem pr;
      pr.pattern = Pattern::causal();
      pr.dtype = pr.out_dtype = dtype;
      pr.layout = layout;
      pr.q_len = pr.k_len = 1000;
      pr.head_dim = 128;
      pr.out_offset = 2;
      expect_matches_reference(pr, seed++);
    }
}

TEST(GpuAttention, MaskBlockSizesIndependentOfTile) {
  SPATTN_REQUIRE_GPU();
  std::mt19937_64 rng(800);
  uint64_t seed = 800;
  for (int64_t bq : {16, 32, 64, 128, 256})
    for (int64_t bk : {16, 32, 64, 128, 256})
      for (const GpuProblem& pr : mask_block_problems(bq, bk, rng)) expect_matches_reference(pr, seed++);
}

TEST(GpuAttention, SplitLongRows) {
  SPATTN_REQUIRE_GPU();
  uint64_t seed = 1100;
  for (const Pattern& pattern : split_row_patterns())
    for (DType dtype : {DType::BF16, DType::F16}) {
      GpuProblem pr = split_rows_problem(pattern, dtype);
      expect_matches_reference(pr, seed++);
      pr.out_dtype = DType::F32;
      pr.layout = Layout::BLHD;
      expect_matches_reference(pr, seed++);
    }
}

// Small problems covering each kernel path (mask read directly and through a
// derived tile plan, both warp layouts, partial and ragged tiles, the naive
// kernel); scripts/gpu_check.sh runs these under compute-sanitizer.
TEST(GpuSanitizerSmall, EachKernelPath) {
  SPATTN_REQUIRE_GPU();
  // The sm80 kernel's 128 x 128 tile wherever the blocks fit it (D <= 64);
  // its 128 x 64 tile at D = 64 last.
  const ForcedTile sm80_wide(cuda_detail::force_sm80_wide_tile, true);
  GpuProblem pr;
  pr.q_len = 150;
  pr.k_len = 190;
  pr.pattern = Pattern::causal();
  expect_matches_reference(pr, 1);
  pr.pattern = Pattern::sliding_window(40, 10);
  pr.block_q = pr.block_k = 32;
  pr.dtype = pr.out_dtype = DType::F16;
  expect_matches_reference(pr, 2);
  pr.head_dim = 256;
  expect_matches_reference(pr, 3);
  pr.naive = true;
  pr.head_dim = 96;
  expect_matches_reference(pr, 4);
  // The query tile holding token 0 sees all 35 key tiles: split and merged.
  pr = GpuProblem{};
  pr.pattern = Pattern::longformer(64, {0});
  pr.q_heads = pr.kv_heads = 1;
  pr.q_len = pr.k_len = 2200;
  expect_matches_reference(pr, 5);
  // A dilated split: rest pass with exclusion, permuted pass reading q, k, v
  // in place and merging into out.
  pr = GpuProblem{};
  pr.pattern = Pattern::unite(Pattern::dilated({256}, {4}, true), Pattern::sliding_window(64));
  pr.q_heads = pr.kv_heads = 4;
  pr.q_len = 500;
  pr.k_len = 600;
  expect_matches_reference(pr, 6);
  // Eight heads over the rest's one mask head: the table of keep bits holds
  // four head classes (h % 4), each shared by two heads.
  pr.q_heads = pr.kv_heads = 8;
  expect_matches_reference(pr, 62);
  pr.q_heads = pr.kv_heads = 4;
  // One whose rest keeps no block: the permuted pass writes without reading
  // the rest's rows (zeros and -inf LSEs).
  pr.pattern = Pattern::dilated({256}, {4}, true);
  pr.q_len = pr.k_len = 1024;
  expect_matches_reference(pr, 61);
  // A decoding step: four query heads packed into each kv head's tile rows,
  // its row split into pieces to fill the device.
  pr = GpuProblem{};
  pr.pattern = Pattern::sliding_window(1000);
  pr.q_heads = 8;
  pr.kv_heads = 2;
  pr.q_len = 1;
  pr.k_len = 3000;
  expect_matches_reference(pr, 7);
  // Three query positions of the same heads: copied into packed rows and back.
  pr.q_len = 3;
  expect_matches_reference(pr, 8);
  const ForcedTile sm80_narrow(cuda_detail::force_sm80_wide_tile, false);
  expect_matches_reference(bigbird_on_blocks_of_64(64), 9);
}

// Empty shapes through attention() on the CUDA backend (attention.hpp): an
// empty out is left alone; with no key (Lk = 0, k and v null) every row of a
// poisoned out is 0 and its LSE -inf, in a (B, L, H, D) layout and fp32 out.
TEST(GpuAttention, EmptyShapes) {
  SPATTN_REQUIRE_GPU();
  AttentionOptions options;
  options.backend = Backend::Cuda;
  const TensorView none = make_bhld(nullptr, DType::BF16, 2, 2, 0, 64);
  EXPECT_NO_THROW(attention(none, none, none, none, BlockMask::build(Pattern::causal(), {0, 0, 64, 64, 1}), options));
  for (const DType out_dtype : {DType::BF16, DType::F32}) {
    HostTensor q(DType::BF16, 2, 4, 37, 64, Layout::BLHD), out(out_dtype, 2, 4, 37, 64, Layout::BLHD);
    HostTensor lse(DType::F32, 2, 4, 37, 1);
    std::mt19937_64 rng(950);
    q.fill_random(rng);
    DeviceTensor dq(q), dout(out), dlse(lse);
    dout.poison();
    dlse.poison();
    const TensorView no_keys = make_bhld(nullptr, DType::BF16, 2, 2, 0, 64);
    attention(dq.view(), no_keys, no_keys, dout.view(), BlockMask::build(Pattern::dense(), {37, 0, 64, 64, 1}),
              options, &dlse.view());
    cuda_ok(cudaDeviceSynchronize(), "rows without keys");
    dout.copy_to(out);
    dlse.copy_to(lse);
    for (const double x : out.to_double()) ASSERT_EQ(x, 0.0);
    for (const double x : lse.to_double()) ASSERT_EQ(x, -std::numeric_limits<double>::infinity());
  }
}

TEST(GpuAttention, NaiveBaseline) {
  SPATTN_REQUIRE_GPU();
  uint64_t seed = 900;
  for (const Pattern& pattern :
       {Pattern::dense(), Pattern::streaming(16, 64), Pattern::block_diagonal(16), Pattern::dilated({64}, {2})}) {
    GpuProblem pr;
    pr.pattern = pattern;
    pr.naive = true;
    pr.q_len = 300;
    pr.k_len = 333;
    pr.q_heads = 4;
    pr.kv_heads = 2;
    pr.dtype = pr.out_dtype = seed % 2 ? DType::F16 : DType::BF16;
    expect_matches_reference(pr, seed++);
  }
}

}  // namespace
}  // namespace spattn::testing
