// tests/cpp/gpu_test_dist_attention.cpp - context-parallel attention in C++ on
// one GPU: the ranks are threads of an InProcessGroup, each with its shard in
// device memory and a stream of its own, the attention calls on the CUDA
// kernels, the merges and gradient sums on the device.
//
// Every rank's bf16 / fp16 output, LSE and gradients, put back at their
// positions, equal the fp64 dense masked attention of the whole sequence (of
// the same rounded inputs) at half-precision tolerances; device outputs are
// poisoned first. A one-rank NCCL transport built from the environment runs
// the same call where the build has NCCL.
#include <gtest/gtest.h>

#include <cstdlib>
#include <mutex>

#include "dist_support.hpp"
#include "gpu_test_support.hpp"
#include "spattn/dist_attention.hpp"

namespace spattn::testing {
namespace {

using dist::ContextParallelPlan;
using dist::LayoutKind;
using dist::RankPlan;
using dist::ShardLayout;
using dist::Transport;

// One rank's forward and backward with its tensors on the device; its results into `g`.
void run_rank(const Problem& p, const ContextParallelPlan& plan, const Inputs& in, Transport& transport,
              Gathered& g, std::mutex& results) {
  const int64_t r = transport.rank();
  const RankPlan rank_plan(plan, r);
  const std::vector<int64_t> rows = positions(plan.layout(), r);
  const int64_t n = static_cast<int64_t>(rows.size());
  const HostTensor q_h = take_rows(in.q, rows), k_h = take_rows(in.k, rows), v_h = take_rows(in.v, rows);
  const HostTensor d_out_h = take_rows(in.d_out, rows);
  HostTensor out(p.dtype, p.B, p.Hq, n, p.D), dq(p.dtype, p.B, p.Hq, n, p.D);
  HostTensor dk(p.dtype, p.B, p.Hkv, n, p.D), dv(p.dtype, p.B, p.Hkv, n, p.D), lse(DType::F32, p.B, p.Hq, n, 1);
  const DeviceTensor q_d(q_h), k_d(k_h), v_d(v_h), d_out_d(d_out_h);
  DeviceTensor out_d(out), dq_d(dq), dk_d(dk), dv_d(dv), lse_d(lse);
  for (DeviceTensor* t : {&out_d, &dq_d, &dk_d, &dv_d, &lse_d}) t->poison();
  TestStream stream;
  AttentionOptions options;
  options.stream = stream.stream;
  dist::attention(q_d.view(), k_d.view(), v_d.view(), out_d.view(), rank_plan, transport, options, &lse_d.view());
  const int64_t sent = transport.bytes_sent();
  dist::attention_backward(q_d.view(), k_d.view(), v_d.view(), out_d.view(), lse_d.view(), d_out_d.view(),
                           AttentionGrads{dq_d.view(), dk_d.view(), dv_d.view()}, rank_plan, transport, options);
  cuda_ok(cudaStreamSynchronize(stream.stream), "cudaStreamSynchronize");
  out_d.copy_to(out);
  lse_d.copy_to(lse);
  dq_d.copy_to(dq);
  dk_d.copy_to(dk);
  dv_d.copy_to(dv);
  std::lock_guard<std::mutex> lock(results);
  g.put(r, rows, p.L, out, lse, dq, dk, dv, sent);
}

// Half-precision outputs and gradients (partial gradients are summed in fp32;
// those of received rows travel back in the inputs' dtype).
constexpr double kHalfTolerance = 1e-2;

TEST(GpuDistAttention, InProcessRanksMatchTheOracle) {
  SPATTN_REQUIRE_GPU();
  struct Named {
    const char* name;
    Pattern pattern;
    LayoutKind layout;
    int64_t world;
    DType dtype;
  };
  const std::vector<Named> cases = {
      {"causal", Pattern::causal(), LayoutKind::Zigzag, 4, DType::BF16},
      {"window 300", Pattern::sliding_window(300), LayoutKind::Contiguous, 3, DType::F16},
      {"streaming 64 + 256", Pattern::streaming(64, 256), LayoutKind::Contiguous, 4, DType::BF16},
      {"dilated", Pattern::dilated({128, 512}, {1, 4}, true), LayoutKind::Contiguous, 2, DType::F16},
  };
  std::mt19937_64 rng(4242);
  for (const Named& c : cases) {
    SCOPED_TRACE(c.name);
    const Problem p{2, 4, 2, 1100, 64, c.dtype};
    const ShardLayout layout(c.layout, p.L, c.world, 128);
    const ContextParallelPlan plan(c.pattern, layout, p.Hq);
    const Inputs in(p, rng);
    Gathered g(p, c.world);
    std::mutex results;
    dist::InProcessGroup group(c.world, 60.0);
    group.run([&](Transport& t) { run_rank(p, plan, in, t, g, results); });
    expect_matches(g, p, c.pattern, in, kHalfTolerance);
  }
}

TEST(GpuDistAttention, OneRankOverNccl) {
  SPATTN_REQUIRE_GPU();
  if (!dist::nccl_available()) GTEST_SKIP() << "built without NCCL";
  setenv("RANK", "0", 1);
  setenv("WORLD_SIZE", "1", 1);
  setenv("MASTER_ADDR", "127.0.0.1", 0);
  setenv("MASTER_PORT", "29531", 0);
  auto transport = dist::nccl_transport_from_env();
  ASSERT_EQ(transport->world_size(), 1);
  const Problem p{1, 2, 2, 512, 64, DType::BF16};
  const ShardLayout layout(LayoutKind::Zigzag, p.L, 1, 128);
  const ContextParallelPlan plan(Pattern::causal(), layout, p.Hq);
  std::mt19937_64 rng(9);
  const Inputs in(p, rng);
  Gathered g(p, 1);
  std::mutex results;
  run_rank(p, plan, in, *transport, g, results);
  expect_matches(g, p, Pattern::causal(), in, kHalfTolerance);
}

}  // namespace
}  // namespace spattn::testing
