// tests/cpp/test_nonfinite.cpp - NaN and infinite inputs on the host backends.
//
// attention.hpp defines what non-finite inputs give, the same on every
// backend: a NaN or +inf score of an allowed pair makes its row NaN, a -inf
// score weighs 0 (a row of only -inf scores gives 0 and LSE -inf), masked
// pairs are never read, and a NaN value reaches the rows that weigh its key.
// Each case here (test_support.hpp: nonfinite_cases) writes a few such
// entries into fresh random inputs and compares every element of the
// output and the LSE with the independent dense fp64 oracle, on the
// reference, the naive dense baseline and the fast CPU backend with each
// SIMD kernel this CPU runs, for fp32 and bf16 inputs and for full and
// partial blocks (dense, causal, a sliding window).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include "cpu/fast/isa.hpp"
#include "test_support.hpp"

namespace spattn::testing {
namespace {

using Backend = std::function<void(const TensorView&, const TensorView&, const TensorView&, const TensorView&,
                                   const BlockMask&, double, const TensorView*)>;

struct NamedPattern {
  const char* name;
  Pattern pattern;
};

std::vector<NamedPattern> patterns() {
  return {{"dense", Pattern::dense()}, {"causal", Pattern::causal()}, {"window 20", Pattern::sliding_window(20)}};
}

// Runs `backend` on every case, pattern and dtype and checks it against the oracle.
void expect_oracle_semantics(const Backend& backend, double fp32_tolerance, const std::string& label) {
  constexpr int64_t B = 1, Hq = 2, Hkv = 1, L = 100, D = 32;
  uint64_t seed = 7100;
  for (const NonFiniteCase& c : nonfinite_cases()) {
    for (const NamedPattern& p : patterns()) {
      for (DType dtype : {DType::F32, DType::BF16}) {
        SCOPED_TRACE(label + ", " + c.name + ", " + p.name + ", " + dtype_name(dtype));
        std::mt19937_64 rng(seed++);
        HostTensor q(dtype, B, Hq, L, D), k(dtype, B, Hkv, L, D), v(dtype, B, Hkv, L, D);
        q.fill_random(rng, 1.5);
        k.fill_random(rng, 1.5);
        v.fill_random(rng);
        c.inject(q, k, v);
        const double scale = 1.0 / std::sqrt(static_cast<double>(D));
        const BlockMask mask = BlockMask::build(p.pattern, MaskShape{L, L, 16, 16, Hq});
        HostTensor out(DType::F32, B, Hq, L, D), lse(DType::F32, B, Hq, L, 1);
        out.poison();
        lse.poison();
        backend(q.view, k.view, v.view, out.view, mask, scale, &lse.view);
        const DenseResult oracle = dense_masked_attention(q.view, k.view, v.view, p.pattern, scale);
        const double tolerance = dtype == DType::F32 ? fp32_tolerance : 1e-2;
        EXPECT_EQ(compare_nonfinite(out.to_double(), lse.to_double(), oracle, D, tolerance, 1e-3, c.nan_value_column),
                  "");
      }
    }
  }
}

TEST(NonFiniteInputs, Reference) { expect_oracle_semantics(reference_attention, 1e-6, "reference"); }

TEST(NonFiniteInputs, NaiveDenseBaseline) { expect_oracle_semantics(naive_dense_attention, 1e-4, "naive dense"); }

TEST(NonFiniteInputs, FastCpuBackendEverySimdKernel) {
  for (cpu_fast::CpuIsa isa : {cpu_fast::CpuIsa::Portable, cpu_fast::CpuIsa::Avx2, cpu_fast::CpuIsa::Avx512}) {
    if (!cpu_fast::cpu_isa_supported(isa)) continue;
    cpu_fast::force_cpu_isa(isa);
    expect_oracle_semantics(cpu_attention, 1e-4, std::string("cpu ") + cpu_fast::cpu_isa_name(isa));
    cpu_fast::clear_forced_cpu_isa();
  }
}

// The public entry point on the host (Backend::Auto): the same semantics.
TEST(NonFiniteInputs, AttentionEntryPoint) {
  expect_oracle_semantics(
      [](const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out, const BlockMask& mask,
         double scale, const TensorView* lse) {
        AttentionOptions options;
        options.scale = scale;
        attention(q, k, v, out, mask, options, lse);
      },
      1e-4, "attention()");
}

}  // namespace
}  // namespace spattn::testing
