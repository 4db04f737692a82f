// tests/cpp/gpu_test_nonfinite.cpp - NaN and infinite inputs on the CUDA kernels.
//
// The semantics of attention.hpp ("Non-finite inputs"), the same as on the
// host (test_nonfinite.cpp): each case of test_support.hpp's nonfinite_cases
// writes a few non-finite entries into fresh random inputs; every element of
// the output and the LSE is compared with the dense fp64 oracle. Each fused
// kernel, forced, on full and partial tiles, on rows split into pieces that
// merge by their LSE (Longformer's global rows over 3000 keys), and on a
// dilated pattern (its permuted pass merged into the rest); and the naive
// kernel.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "gpu_test_support.hpp"

namespace spattn::testing {
namespace {

struct NonFiniteProblem {
  const char* name;
  Pattern pattern;
  int64_t len;
  int64_t q_heads;
};

std::vector<NonFiniteProblem> problems() {
  return {{"dense", Pattern::dense(), 300, 2},
          {"causal", Pattern::causal(), 300, 2},
          {"window 20", Pattern::sliding_window(20), 300, 2},
          {"longformer, split global rows", Pattern::longformer(128, {0, 1}), 3000, 1},
          {"dilated with a window", Pattern::unite(Pattern::dilated({512}, {4}, true), Pattern::sliding_window(128)),
           2048, 1}};
}

// Runs every case of every problem on the device (the fused kernel forced by
// the caller, or the naive one) and compares it with the oracle.
void expect_oracle_semantics(bool naive) {
  constexpr int64_t D = 64;
  uint64_t seed = 7300;
  for (const NonFiniteCase& c : nonfinite_cases())
    for (const NonFiniteProblem& p : problems())
      for (DType dtype : {DType::BF16, DType::F16}) {
        if (p.len > 300 && dtype == DType::F16) continue;  // the long problems once, their oracle is slow
        SCOPED_TRACE(std::string(c.name) + ", " + p.name + ", " + dtype_name(dtype));
        std::mt19937_64 rng(seed++);
        HostTensor q(dtype, 1, p.q_heads, p.len, D), k(dtype, 1, 1, p.len, D), v(dtype, 1, 1, p.len, D);
        q.fill_random(rng, 1.5);
        k.fill_random(rng, 1.5);
        v.fill_random(rng);
        c.inject(q, k, v);
        const BlockMask mask = BlockMask::build(p.pattern, MaskShape{p.len, p.len, 64, 64, p.q_heads});
        HostTensor out(DType::F32, 1, p.q_heads, p.len, D), lse(DType::F32, 1, p.q_heads, p.len, 1);
        DeviceTensor dq(q), dk(k), dv(v), dout(out), dlse(lse);
        dout.poison();
        dlse.poison();
        const double scale = 1.0 / std::sqrt(static_cast<double>(D));
        if (naive)
          cuda_naive_attention(dq.view(), dk.view(), dv.view(), dout.view(), mask, scale, &dlse.view());
        else
          cuda_attention(dq.view(), dk.view(), dv.view(), dout.view(), mask, scale, &dlse.view());
        cuda_ok(cudaDeviceSynchronize(), "attention kernel");
        dout.copy_to(out);
        dlse.copy_to(lse);
        const DenseResult oracle = dense_masked_attention(q.view, k.view, v.view, p.pattern, scale);
        EXPECT_EQ(compare_nonfinite(out.to_double(), lse.to_double(), oracle, D, 2e-2, 1e-2, c.nan_value_column),
                  "");
      }
}

class GpuNonFinite : public ForcedKernelTest {};

TEST_P(GpuNonFinite, EveryCaseOnFullPartialSplitAndDilatedRows) { expect_oracle_semantics(false); }

INSTANTIATE_TEST_SUITE_P(Forced, GpuNonFinite, ::testing::Values(CudaKernel::Sm80, CudaKernel::Sm90),
                         forced_kernel_name);

TEST(GpuNonFiniteNaive, EveryCase) {
  SPATTN_REQUIRE_GPU();
  expect_oracle_semantics(true);
}

}  // namespace
}  // namespace spattn::testing
