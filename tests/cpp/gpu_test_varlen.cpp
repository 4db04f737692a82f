// tests/cpp/gpu_test_varlen.cpp - the fused CUDA kernels, each forced, on
// packed batches of variable-length sequences against the fp64 reference run
// one sequence at a time (attention_varlen on the host, itself checked against
// the dense oracle in test_varlen.cpp): both dtypes, head dims 64 and 128,
// GQA, empty, one-token and ragged sequences, chunks of queries after cached
// keys (Lq(b) < Lk(b)), mask blocks other than the kernel tile, split rows, a
// head-dependent dilated pattern (run without the permutation), calls
// captured in a graph, the sm90 kernel's tall tile forced; outputs poisoned
// with NaN before every run. Skips without a device; the sm90 cases skip
// without an sm90 kernel.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "cuda/fwd_sm80/fwd_sm80.hpp"
#include "cuda/fwd_sm90/fwd_sm90.hpp"
#include "cuda/plan/tile_plan.hpp"
#include "gpu_test_support.hpp"
#include "varlen_support.hpp"

namespace spattn::testing {
namespace {

struct VarlenCase {
  Pattern pattern = Pattern::causal();
  DType dtype = DType::BF16;
  DType out_dtype = DType::BF16;
  int64_t head_dim = 64, q_heads = 4, kv_heads = 2, block_q = 128, block_k = 128;
  std::vector<int64_t> lengths = {300, 1, 17, 0, 1000, 128, 0, 513, 64};
  std::vector<int64_t> k_lengths;  // empty: as many keys as queries

  std::string describe() const {
    std::string lens;
    for (int64_t len : lengths) lens += std::to_string(len) + " ";
    if (!k_lengths.empty()) {
      lens += "keys ";
      for (int64_t len : k_lengths) lens += std::to_string(len) + " ";
    }
    return std::string(dtype_name(dtype)) + " D" + std::to_string(head_dim) + " Hq" + std::to_string(q_heads) +
           " Hkv" + std::to_string(kv_heads) + " blocks " + std::to_string(block_q) + "x" + std::to_string(block_k) +
           (out_dtype == DType::F32 ? " out fp32" : "") + " lengths " + lens + pattern.describe();
  }
};

// cu_seqlens in device memory.
class DeviceOffsets {
 public:
  explicit DeviceOffsets(const std::vector<int32_t>& host) {
    cuda_ok(cudaMalloc(&ptr_, host.size() * sizeof(int32_t)), "cudaMalloc");
    cuda_ok(cudaMemcpy(ptr_, host.data(), host.size() * sizeof(int32_t), cudaMemcpyHostToDevice), "cudaMemcpy H2D");
  }
  ~DeviceOffsets() { cudaFree(ptr_); }
  DeviceOffsets(const DeviceOffsets&) = delete;
  DeviceOffsets& operator=(const DeviceOffsets&) = delete;
  const int32_t* get() const { return static_cast<const int32_t*>(ptr_); }

 private:
  void* ptr_ = nullptr;
};

// With `in_graph`, the call's plan is made, the call on it captured in a
// CUDA graph and the graph replayed on the poisoned outputs.
void expect_varlen_matches_reference(const VarlenCase& c, uint64_t seed, bool in_graph = false) {
  SCOPED_TRACE(c.describe());
  std::mt19937_64 rng(seed);
  const PackedProblem pp(c.dtype, c.lengths, c.k_lengths.empty() ? c.lengths : c.k_lengths, c.q_heads, c.kv_heads,
                         c.head_dim, rng);
  const BlockMask mask = varlen_mask(c.pattern, pp.max_len, c.block_q, c.block_k, c.q_heads);
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.head_dim));

  HostTensor out(c.out_dtype, 1, c.q_heads, pp.total, c.head_dim, Layout::BLHD);
  HostTensor lse(DType::F32, 1, c.q_heads, pp.total, 1);
  DeviceTensor dq(pp.q), dk(pp.k), dv(pp.v), dout(out), dlse(lse);
  DeviceOffsets cu_q(pp.cu_seqlens), cu_k(pp.cu_seqlens_k);
  const VarlenBatch batch = pp.batch(cu_q.get(), cu_k.get());
  if (in_graph) {
    PlanOptions plan_options;
    plan_options.device = cuda_pointer_device(dq.view().data);
    const Plan plan = make_plan(mask, varlen_call_shape(dq.view(), dk.view(), batch, mask.q_len()), plan_options);
    replay_captured(
        [&](cudaStream_t stream) {
          AttentionOptions options;
          options.scale = scale;
          options.stream = stream;
          attention_varlen(dq.view(), dk.view(), dv.view(), dout.view(), batch, plan, options, &dlse.view());
        },
        [&] {
          dout.poison();
          dlse.poison();
        });
  } else {
    dout.poison();
    dlse.poison();
    cuda_attention_varlen(dq.view(), dk.view(), dv.view(), dout.view(), batch, mask, scale, &dlse.view());
  }
  cuda_ok(cudaDeviceSynchronize(), "varlen attention kernel");
  dout.copy_to(out);
  dlse.copy_to(lse);

  HostTensor ref(DType::F64, 1, c.q_heads, pp.total, c.head_dim, Layout::BLHD);
  HostTensor ref_lse(DType::F32, 1, c.q_heads, pp.total, 1);  // attention_varlen writes fp32 LSEs
  AttentionOptions options;
  options.backend = Backend::Reference;
  attention_varlen(pp.q.view, pp.k.view, pp.v.view, ref.view, pp.batch(pp.cu_seqlens.data(), pp.cu_seqlens_k.data()),
                   mask, options, &ref_lse.view);
  EXPECT_LT(relative_error(out.to_double(), ref.to_double()), out_tolerance(c.dtype));
  EXPECT_LT(max_lse_error(lse.to_double(), ref_lse.to_double()), kLseTolerance);
}

std::vector<Pattern> varlen_patterns() {
  return {Pattern::causal(),
          Pattern::dense(),
          Pattern::sliding_window(100, 0),
          Pattern::sliding_window(40, 40),
          Pattern::streaming(16, 128),
          Pattern::block_diagonal(96, true),
          Pattern::longformer(64, {0}),
          Pattern::dilated({128, 256}, {1, 2}, true),
          Pattern::unite(Pattern::sliding_window(33), Pattern::strided(50))};
}

// `base` (its lengths) with every varlen pattern, both dtypes, head dims 64
// and 128; seeds from `seed` on.
void expect_every_pattern_matches(const VarlenCase& base, uint64_t seed) {
  for (DType dtype : {DType::BF16, DType::F16})
    for (int64_t head_dim : {64, 128})
      for (const Pattern& pattern : varlen_patterns()) {
        VarlenCase c = base;
        c.pattern = pattern;
        c.dtype = c.out_dtype = dtype;
        c.head_dim = head_dim;
        expect_varlen_matches_reference(c, seed++);
      }
}

class GpuVarlen : public ForcedKernelTest {};

TEST_P(GpuVarlen, MatchesEachSequenceAlone) { expect_every_pattern_matches(VarlenCase{}, 100); }

// Chunks of queries after cached keys: query i of sequence b at position
// i + Lk(b) - Lq(b), so tiles of mask rows start before a sequence's first
// query (shifts that are and are not multiples of the tile), and a chunk of
// one query (decoding).
TEST_P(GpuVarlen, QueryChunksAfterCachedKeys) {
  VarlenCase chunks;
  chunks.lengths = {100, 1, 17, 0, 1000, 128, 0, 200, 64, 1};
  chunks.k_lengths = {300, 530, 530, 5, 1000, 256, 0, 713, 1000, 1};
  expect_every_pattern_matches(chunks, 150);
  uint64_t seed = 186;  // next after the 2 x 2 x 9 cases above
  // Mask blocks smaller and larger than the tile, fp32 out, and split rows
  // under a shift: the global row at position 4300 lies in a chunk of 300
  // queries over 4500 keys (shift 4200) and is split into several pieces.
  VarlenCase blocks;
  blocks.pattern = Pattern::longformer(64, {0, 4300});
  blocks.lengths = {300, 0, 1, 40};
  blocks.k_lengths = {4500, 10, 4450, 301};
  blocks.out_dtype = DType::F32;
  for (const auto& [block_q, block_k] : std::vector<std::pair<int64_t, int64_t>>{{32, 64}, {256, 128}, {64, 64}}) {
    blocks.block_q = block_q;
    blocks.block_k = block_k;
    const BlockMask mask = varlen_mask(blocks.pattern, 4500, block_q, block_k, blocks.q_heads);
    ASSERT_FALSE(cuda_detail::make_tile_plan(mask, cuda_detail::kSm80WideTile).split_rows.empty());
    expect_varlen_matches_reference(blocks, seed++);
  }
  VarlenCase wide;  // head dim 256 (the sm90 kernel's 128 x 64 tile)
  wide.head_dim = 256;
  wide.pattern = Pattern::sliding_window(300, 0);
  wide.lengths = {100, 1, 600};
  wide.k_lengths = {333, 900, 600};
  expect_varlen_matches_reference(wide, seed++);
}

TEST_P(GpuVarlen, MaskBlocksOtherThanTheTile) {
  uint64_t seed = 200;
  const std::vector<std::pair<int64_t, int64_t>> blocks = {{64, 32}, {16, 128}, {256, 256}, {32, 16}};
  for (const auto& [block_q, block_k] : blocks)
    for (const Pattern& pattern : {Pattern::causal(), Pattern::sliding_window(70, 10)}) {
      VarlenCase c;
      c.pattern = pattern;
      c.block_q = block_q;
      c.block_k = block_k;
      c.dtype = c.out_dtype = seed % 2 ? DType::F16 : DType::BF16;
      expect_varlen_matches_reference(c, seed++);
    }
}

TEST_P(GpuVarlen, OutputInFp32AndMultiQueryHeads) {
  VarlenCase c;
  c.out_dtype = DType::F32;
  c.q_heads = 8;
  c.kv_heads = 1;
  c.head_dim = 128;
  c.pattern = Pattern::streaming(4, 200);
  expect_varlen_matches_reference(c, 300);
}

TEST_P(GpuVarlen, SplitLongRows) {
  // Token 0 of the longest sequences sees every key: its query tile's row is
  // split into pieces, merged per sequence; shorter sequences stop early.
  VarlenCase c;
  c.pattern = Pattern::longformer(128, {0});
  c.lengths = {4500, 300, 0, 4100, 17, 2000};
  c.block_q = c.block_k = 64;
  const BlockMask mask = varlen_mask(c.pattern, 4500, c.block_q, c.block_k, c.q_heads);
  ASSERT_FALSE(cuda_detail::make_tile_plan(mask, cuda_detail::kSm80WideTile).split_rows.empty());
  uint64_t seed = 400;
  for (DType dtype : {DType::BF16, DType::F16}) {
    c.dtype = c.out_dtype = dtype;
    expect_varlen_matches_reference(c, seed++);
    c.out_dtype = DType::F32;
    expect_varlen_matches_reference(c, seed++);
  }
}

TEST_P(GpuVarlen, DilatedWithoutThePermutation) {
  // attention() runs this pattern through the token permutation; varlen runs
  // it on the plain kernel.
  VarlenCase c;
  c.pattern = Pattern::unite(Pattern::dilated({256}, {4}, true), Pattern::sliding_window(64));
  c.q_heads = c.kv_heads = 4;
  c.lengths = {600, 0, 257, 1, 999};
  expect_varlen_matches_reference(c, 500);
}

INSTANTIATE_TEST_SUITE_P(Forced, GpuVarlen, ::testing::Values(CudaKernel::Sm80, CudaKernel::Sm90),
                         forced_kernel_name);

TEST(GpuVarlenChecks, RejectsHostCuSeqlens) {
  SPATTN_REQUIRE_GPU();
  std::mt19937_64 rng(1);
  const PackedProblem pp(DType::BF16, {10, 20}, 2, 2, 64, rng);
  HostTensor out(DType::BF16, 1, 2, 30, 64, Layout::BLHD);
  DeviceTensor dq(pp.q), dk(pp.k), dv(pp.v), dout(out);
  const BlockMask mask = varlen_mask(Pattern::causal(), 20);
  try {
    cuda_attention_varlen(dq.view(), dk.view(), dv.view(), dout.view(),
                          pp.batch(pp.cu_seqlens.data(), pp.cu_seqlens.data()), mask, 0.125);
    ADD_FAILURE() << "host cu_seqlens were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cu_seqlens_q must point to device memory"), std::string::npos) << e.what();
  }
}

// Calls captured in a CUDA graph on their plans: a dilated union (varlen
// runs it without the token permutation) and split rows.
TEST_P(GpuVarlen, CapturedInAGraphAfterPrepare) {
  VarlenCase c;
  c.pattern = Pattern::unite(Pattern::dilated({256}, {4}, true), Pattern::sliding_window(64));
  c.lengths = {700, 1, 300};
  expect_varlen_matches_reference(c, 650, true);
  c.pattern = Pattern::longformer(64, {0});
  c.lengths = {2200, 5};
  c.block_q = c.block_k = 64;
  expect_varlen_matches_reference(c, 651, true);
}

// The sm90 kernel's tall tile (192 x 128, three consumer warpgroups) forced
// at head dim 64: every varlen pattern in both dtypes on 64- and 128-row
// blocks, chunks of queries after cached keys (one of 193 queries: a row into
// a second 192-row tile), split rows, and calls captured in a graph on
// their plans, which must take the tall tile.
TEST(GpuVarlenTallTile, PatternsChunksSplitRowsAndGraphs) {
  SPATTN_REQUIRE_GPU();
  if (!cuda_sm90_kernel_available() || !cuda_detail::fwd_sm90_supports_head_dim(64))
    GTEST_SKIP() << "no sm90 kernel for head dim 64 on this device and build";
  const ForcedKernel kernel(CudaKernel::Sm90);
  const ForcedTallTile tall(true);
  uint64_t seed = 900;
  for (int64_t block : {64, 128})
    for (DType dtype : {DType::BF16, DType::F16})
      for (const Pattern& pattern : varlen_patterns()) {
        VarlenCase c;
        c.pattern = pattern;
        c.dtype = c.out_dtype = dtype;
        c.block_q = c.block_k = block;
        expect_varlen_matches_reference(c, seed++);
      }
  VarlenCase chunks;
  chunks.lengths = {100, 1, 17, 0, 1000, 193, 0, 200, 64, 1};
  chunks.k_lengths = {300, 530, 530, 5, 1000, 256, 0, 713, 1000, 1};
  for (const Pattern& pattern : varlen_patterns()) {
    chunks.pattern = pattern;
    expect_varlen_matches_reference(chunks, seed++);
  }
  VarlenCase split;
  split.pattern = Pattern::longformer(128, {0});
  split.lengths = {4500, 300, 0, 4100, 17, 2000};
  split.block_q = split.block_k = 64;
  split.out_dtype = DType::F32;
  expect_varlen_matches_reference(split, seed++);
  VarlenCase graph;
  graph.pattern = Pattern::unite(Pattern::dilated({256}, {4}, true), Pattern::sliding_window(64));
  graph.lengths = {700, 1, 300};
  expect_varlen_matches_reference(graph, seed++, true);
  graph.pattern = Pattern::longformer(64, {0});
  graph.lengths = {2200, 5};
  graph.block_q = graph.block_k = 64;
  expect_varlen_matches_reference(graph, seed++, true);
}

// Small enough for compute-sanitizer (scripts/gpu_check.sh, sanitize stage):
// empty and one-token sequences, a ragged tile, partial tiles, a split row,
// on each kernel (sm90 where it runs).
TEST(GpuSanitizerSmall, Varlen) {
  SPATTN_REQUIRE_GPU();
  for (CudaKernel kernel : {CudaKernel::Sm80, CudaKernel::Sm90}) {
    if (kernel == CudaKernel::Sm90 && !cuda_sm90_kernel_available()) continue;
    SCOPED_TRACE(kernel == CudaKernel::Sm80 ? "sm80" : "sm90");
    const ForcedKernel forced(kernel);
    VarlenCase c;
    c.lengths = {0, 1, 150, 0, 70};
    c.q_heads = c.kv_heads = 2;
    expect_varlen_matches_reference(c, 600);
    c.pattern = Pattern::longformer(64, {0});
    c.lengths = {2200, 5};
    c.q_heads = c.kv_heads = 1;
    c.block_q = c.block_k = 64;
    expect_varlen_matches_reference(c, 601);
    c.pattern = Pattern::causal();
    c.lengths = {30, 1, 0};  // query chunks after cached keys
    c.k_lengths = {200, 77, 3};
    expect_varlen_matches_reference(c, 602);
  }
}

}  // namespace
}  // namespace spattn::testing
