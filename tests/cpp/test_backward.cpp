// tests/cpp/test_backward.cpp - the backward pass on the host backends.
//
// The dense fp64 oracle (test_support.hpp: dense_masked_attention_backward,
// which reads only Pattern::allowed) is first checked against central finite
// differences of the dense forward oracle; then the reference backward and the
// fast CPU backward are compared with it on fresh random inputs over random
// patterns of every kind (test_support / pattern_cases.hpp), odd and unequal
// lengths, odd block sizes, GQA, per-head masks, both layouts and every input
// dtype, with and without an LSE gradient, into poisoned gradients. Also: the
// result does not depend on the thread count, rows without keys and keys no
// row reads get zero gradients, the SIMD tile kernels of every instruction set
// at every head dim they take (and the plain loops where they do not), and bad
// arguments are rejected with messages naming them (the key-major lists are
// tested with the plan, test_plan.cpp).
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <string>

#include "cpu/fast/isa.hpp"
#include "pattern_cases.hpp"
#include "test_support.hpp"

namespace spattn::testing {
namespace {

struct GradProblem {
  int64_t batch = 1, q_heads = 2, kv_heads = 1, q_len = 50, k_len = 50, head_dim = 16;
  int64_t block_q = 16, block_k = 16;
  DType dtype = DType::F64;
  Layout layout = Layout::BHLD;
  bool with_d_lse = true;
};

struct GradRun {
  std::vector<double> dq, dk, dv;
  DenseGrads oracle;
};

// Fresh inputs, the forward on `backend` (out in the inputs' dtype), then the
// backward on `backend` into poisoned gradients, and the oracle.
GradRun run_backward(const GradProblem& pr, const Pattern& pattern, Backend backend, uint64_t seed) {
  std::mt19937_64 rng(seed);
  HostTensor q(pr.dtype, pr.batch, pr.q_heads, pr.q_len, pr.head_dim, pr.layout);
  HostTensor k(pr.dtype, pr.batch, pr.kv_heads, pr.k_len, pr.head_dim, pr.layout);
  HostTensor v(pr.dtype, pr.batch, pr.kv_heads, pr.k_len, pr.head_dim, pr.layout);
  HostTensor d_out(pr.dtype, pr.batch, pr.q_heads, pr.q_len, pr.head_dim, pr.layout);
  HostTensor d_lse(DType::F32, pr.batch, pr.q_heads, pr.q_len, 1);
  q.fill_random(rng, 1.5);
  k.fill_random(rng, 1.5);
  v.fill_random(rng);
  d_out.fill_random(rng);
  d_lse.fill_random(rng);
  const BlockMask mask = BlockMask::build(pattern, MaskShape{pr.q_len, pr.k_len, pr.block_q, pr.block_k, pr.q_heads});
  AttentionOptions options;
  options.backend = backend;
  HostTensor out(pr.dtype, pr.batch, pr.q_heads, pr.q_len, pr.head_dim, pr.layout);
  HostTensor lse(DType::F32, pr.batch, pr.q_heads, pr.q_len, 1);
  attention(q.view, k.view, v.view, out.view, mask, options, &lse.view);
  HostTensor dq(pr.dtype, pr.batch, pr.q_heads, pr.q_len, pr.head_dim, pr.layout);
  HostTensor dk(pr.dtype, pr.batch, pr.kv_heads, pr.k_len, pr.head_dim, pr.layout);
  HostTensor dv(pr.dtype, pr.batch, pr.kv_heads, pr.k_len, pr.head_dim, pr.layout);
  dq.poison();
  dk.poison();
  dv.poison();
  const TensorView* g_lse = pr.with_d_lse ? &d_lse.view : nullptr;
  attention_backward(q.view, k.view, v.view, out.view, lse.view, d_out.view, {dq.view, dk.view, dv.view}, mask,
                     options, g_lse);
  const double scale = 1.0 / std::sqrt(static_cast<double>(pr.head_dim));
  return GradRun{dq.to_double(), dk.to_double(), dv.to_double(),
                 dense_masked_attention_backward(q.view, k.view, v.view, d_out.view, g_lse, pattern, scale)};
}

// Each gradient within `tolerance` of the oracle (relative norm; NaN fails).
void expect_grads_match(const GradRun& r, double tolerance) {
  EXPECT_LT(relative_error(r.dq, r.oracle.dq), tolerance) << "dq";
  EXPECT_LT(relative_error(r.dk, r.oracle.dk), tolerance) << "dk";
  EXPECT_LT(relative_error(r.dv, r.oracle.dv), tolerance) << "dv";
}

// Half-precision inputs give gradients (and a forward output) rounded to their dtype.
double tolerance_for(Backend backend, DType dtype) {
  switch (dtype) {
    case DType::F64: return backend == Backend::Reference ? 1e-6 : 1e-4;  // the LSE is fp32
    case DType::F32: return backend == Backend::Reference ? 1e-5 : 1e-4;
    case DType::F16: return 3e-3;
    case DType::BF16: return 2e-2;
  }
  return 0.0;
}

TEST(Backward, DenseOracleMatchesFiniteDifferences) {
  constexpr int64_t B = 1, Hq = 2, Hkv = 1, Lq = 7, Lk = 9, D = 4;
  std::mt19937_64 rng(4700);
  HostTensor q(DType::F64, B, Hq, Lq, D), k(DType::F64, B, Hkv, Lk, D), v(DType::F64, B, Hkv, Lk, D);
  HostTensor d_out(DType::F64, B, Hq, Lq, D), d_lse(DType::F64, B, Hq, Lq, 1);
  for (HostTensor* t : {&q, &k, &v, &d_out, &d_lse}) t->fill_random(rng);
  const Pattern pattern = Pattern::unite(Pattern::sliding_window(2, 1), Pattern::streaming(1, 3));
  const double scale = 0.4;
  // The loss sum(d_out * out) + sum(d_lse * lse), on the dense forward oracle.
  const auto loss = [&] {
    const DenseResult r = dense_masked_attention(q.view, k.view, v.view, pattern, scale);
    const std::vector<double> g = d_out.to_double(), gl = d_lse.to_double();
    double sum = 0.0;
    for (size_t e = 0; e < g.size(); ++e) sum += g[e] * r.out[e];
    for (size_t e = 0; e < gl.size(); ++e) sum += std::isfinite(r.lse[e]) ? gl[e] * r.lse[e] : 0.0;
    return sum;
  };
  const DenseGrads g = dense_masked_attention_backward(q.view, k.view, v.view, d_out.view, &d_lse.view,
                                                       pattern, scale);
  const struct {
    HostTensor* t;
    const std::vector<double>* grad;
    const char* name;
  } inputs[] = {{&q, &g.dq, "dq"}, {&k, &g.dk, "dk"}, {&v, &g.dv, "dv"}};
  for (const auto& in : inputs) {
    const TensorView& t = in.t->view;
    std::vector<double> numeric;
    for (int64_t b = 0; b < t.batch(); ++b)
      for (int64_t h = 0; h < t.heads(); ++h)
        for (int64_t l = 0; l < t.seq_len(); ++l)
          for (int64_t d = 0; d < t.head_dim(); ++d) {
            const double x = t.load(b, h, l, d), eps = 1e-6;
            t.store(b, h, l, d, x + eps);
            const double up = loss();
            t.store(b, h, l, d, x - eps);
            const double down = loss();
            t.store(b, h, l, d, x);
            numeric.push_back((up - down) / (2 * eps));
          }
    EXPECT_LT(relative_error(*in.grad, numeric), 1e-7) << in.name;
  }
}

TEST(Backward, EveryBackendMatchesTheOracleOnRandomPatterns) {
  std::mt19937_64 rng(4701);
  for (Backend backend : {Backend::Reference, Backend::Cpu})
    for (int round = 0; round < 24; ++round) {
      GradProblem pr;
      pr.q_len = draw(rng, 1, 150);
      pr.k_len = draw(rng, 1, 150);
      pr.block_q = draw(rng, 0, 2) ? 16 : draw(rng, 3, 70);
      pr.block_k = draw(rng, 0, 2) ? 16 : draw(rng, 3, 70);
      pr.kv_heads = draw(rng, 1, 2);
      pr.q_heads = pr.kv_heads * draw(rng, 1, 3);
      pr.batch = draw(rng, 1, 2);
      pr.head_dim = draw(rng, 0, 1) ? 16 : draw(rng, 1, 40);
      pr.layout = draw(rng, 0, 1) ? Layout::BLHD : Layout::BHLD;
      const DType dtypes[] = {DType::F64, DType::F32, DType::BF16, DType::F16};
      pr.dtype = dtypes[draw(rng, 0, 3)];
      pr.with_d_lse = draw(rng, 0, 1) != 0;
      const Case c = random_case(rng, pr.q_len, pr.k_len, pr.q_heads);
      SCOPED_TRACE(std::string(backend_name(backend)) + " " + c.name + " " + dtype_name(pr.dtype) + " B" +
                   std::to_string(pr.batch) + " Hq" + std::to_string(pr.q_heads) + " Hkv" +
                   std::to_string(pr.kv_heads) + " Lq" + std::to_string(pr.q_len) + " Lk" +
                   std::to_string(pr.k_len) + " D" + std::to_string(pr.head_dim) + " blocks " +
                   std::to_string(pr.block_q) + "x" + std::to_string(pr.block_k));
      expect_grads_match(run_backward(pr, c.pattern, backend, rng()), tolerance_for(backend, pr.dtype));
    }
}

// Blocks larger than the CPU backward's tiles (several tiles per block), long
// rows and a ragged last block.
TEST(Backward, CpuLargeBlocksAndLongRows) {
  uint64_t seed = 4702;
  GradProblem pr;
  pr.q_len = 300;
  pr.k_len = 333;
  pr.block_q = pr.block_k = 128;
  pr.head_dim = 64;
  pr.dtype = DType::F32;
  pr.q_heads = 4;
  pr.kv_heads = 2;
  for (const Pattern& pattern : {Pattern::dense(), Pattern::causal(), Pattern::sliding_window(70),
                                 Pattern::bigbird(333, 32, 3, 1, 2, 5)}) {
    SCOPED_TRACE(pattern.describe());
    expect_grads_match(run_backward(pr, pattern, Backend::Cpu, seed++), 1e-4);
  }
}

// The tile kernels of every instruction set this CPU runs, at head dims each
// takes or leaves to the plain loops, through both walks (one thread: the
// one-pass walk; five: the two passes), on full and partial tiles.
TEST(Backward, CpuTileKernelsOfEveryInstructionSet) {
  uint64_t seed = 4710;
  for (const cpu_fast::CpuIsa isa : {cpu_fast::CpuIsa::Avx512, cpu_fast::CpuIsa::Avx2, cpu_fast::CpuIsa::Portable}) {
    if (!cpu_fast::cpu_isa_supported(isa)) continue;
    cpu_fast::force_cpu_isa(isa);
    for (const int64_t head_dim : {24, 32, 64, 96, 128}) {
      for (const int threads : {1, 5}) {
        SCOPED_TRACE(std::string(cpu_fast::cpu_isa_name(isa)) + ", head_dim " + std::to_string(head_dim) + ", " +
                     std::to_string(threads) + " threads");
        GradProblem pr;
        pr.q_len = 150;
        pr.k_len = 133;
        pr.q_heads = 4;
        pr.kv_heads = 2;
        pr.head_dim = head_dim;
        pr.block_q = pr.block_k = 64;
        pr.dtype = DType::F32;
        const int saved = omp_get_max_threads();
        omp_set_num_threads(threads);
        for (const Pattern& pattern : {Pattern::dense(), Pattern::causal(), Pattern::sliding_window(40)})
          expect_grads_match(run_backward(pr, pattern, Backend::Cpu, seed++), 1e-4);
        omp_set_num_threads(saved);
      }
    }
  }
  cpu_fast::clear_forced_cpu_isa();
}

// One thread takes the one-pass walk (dq with dk and dv), five the two passes:
// the same sums in the same order.
TEST(Backward, CpuResultDoesNotDependOnTheThreadCount) {
  GradProblem pr;
  pr.q_len = pr.k_len = 200;
  pr.q_heads = 4;
  pr.kv_heads = 2;
  pr.dtype = DType::F32;
  const Pattern pattern = Pattern::unite(Pattern::causal(), Pattern::strided(20));
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const GradRun one = run_backward(pr, pattern, Backend::Cpu, 4703);
  omp_set_num_threads(5);
  const GradRun five = run_backward(pr, pattern, Backend::Cpu, 4703);
  omp_set_num_threads(threads);
  EXPECT_EQ(one.dq, five.dq);
  EXPECT_EQ(one.dk, five.dk);
  EXPECT_EQ(one.dv, five.dv);
}

// Causal with Lq > Lk: the first rows see no key (dq 0); a sliding window
// over fewer queries than keys leaves the first keys unread (dk, dv 0).
TEST(Backward, RowsWithoutKeysAndUnreadKeysGetZero) {
  for (Backend backend : {Backend::Reference, Backend::Cpu}) {
    GradProblem pr;
    pr.dtype = DType::F32;
    pr.q_len = 40;
    pr.k_len = 20;
    const GradRun rows = run_backward(pr, Pattern::causal(), backend, 4704);
    for (int64_t h = 0; h < pr.q_heads; ++h)
      for (int64_t i = 0; i < 20; ++i)
        for (int64_t d = 0; d < pr.head_dim; ++d)
          ASSERT_EQ(rows.dq[(h * pr.q_len + i) * pr.head_dim + d], 0.0) << backend_name(backend);
    expect_grads_match(rows, 1e-4);
    pr.q_len = 10;
    pr.k_len = 60;
    const GradRun keys = run_backward(pr, Pattern::sliding_window(5), backend, 4705);
    for (int64_t j = 0; j < 45; ++j)
      for (int64_t d = 0; d < pr.head_dim; ++d) {
        ASSERT_EQ(keys.dk[j * pr.head_dim + d], 0.0) << backend_name(backend);
        ASSERT_EQ(keys.dv[j * pr.head_dim + d], 0.0) << backend_name(backend);
      }
    expect_grads_match(keys, 1e-4);
  }
}

TEST(Backward, BadArgumentsAreNamed) {
  constexpr int64_t L = 20, D = 8;
  HostTensor q(DType::F32, 1, 2, L, D), k(DType::F32, 1, 1, L, D), out(DType::F32, 1, 2, L, D);
  HostTensor lse(DType::F32, 1, 2, L, 1), wrong_lse(DType::F16, 1, 2, L, 1), short_q(DType::F32, 1, 2, L - 1, D);
  const BlockMask mask = BlockMask::build(Pattern::causal(), MaskShape{L, L, 16, 16, 2});
  const auto message = [&](const AttentionGrads& g, const TensorView& d_out, const TensorView* d_lse,
                           Backend backend = Backend::Auto) {
    AttentionOptions options;
    options.backend = backend;
    try {
      attention_backward(q.view, k.view, k.view, out.view, lse.view, d_out, g, mask, options, d_lse);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const AttentionGrads good{out.view, k.view, k.view};
  EXPECT_NE(message({short_q.view, k.view, k.view}, out.view, nullptr).find("dq shape (1, 2, 19, 8) must equal q"),
            std::string::npos);
  EXPECT_NE(message({q.view, q.view, k.view}, out.view, nullptr).find("dk shape"), std::string::npos);
  EXPECT_NE(message(good, short_q.view, nullptr).find("d_out shape"), std::string::npos);
  EXPECT_NE(message(good, out.view, &wrong_lse.view).find("d_lse dtype must be fp32"), std::string::npos);
  // fp32 host tensors: no CUDA backend in this build or on this machine, or its dtype check.
  const std::string cuda = message(good, out.view, nullptr, Backend::Cuda);
  EXPECT_TRUE(cuda.find("backend 'cuda' is not available") != std::string::npos ||
              cuda.find("CUDA backward: q dtype must be fp16 or bf16, got fp32") != std::string::npos)
      << cuda;
}

}  // namespace
}  // namespace spattn::testing
