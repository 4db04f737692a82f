// tests/cpp/test_dist_attention.cpp - context-parallel attention in C++
// (spattn/dist_attention.hpp) over the in-process transport.
//
// Ranks run as threads (InProcessGroup). For random patterns (pattern_cases.hpp),
// world sizes, both layouts, GQA and lengths that do not divide evenly, every
// rank's output, LSE and gradients, put back at their positions, equal the
// fp64 dense masked attention of the whole sequence (test_support.hpp, which
// reads only Pattern::allowed), on the reference backend with fp64 inputs and
// on the CPU backend with fp32 inputs, at fp32 round-off (LSEs are fp32, as
// every call's, and the partial results merge in fp32); the bytes each rank sends equal the
// rows a brute-force scan of the pattern says its peers need. Bad calls and
// broken exchanges fail with messages instead of hanging.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <mutex>
#include <optional>
#include <string>

#include "dist_support.hpp"
#include "expect_error.hpp"
#include "pattern_cases.hpp"
#include "spattn/dist_attention.hpp"
#include "spattn/error.hpp"
#include "test_support.hpp"

namespace spattn::testing {
namespace {

using dist::Chunk;
using dist::ContextParallelPlan;
using dist::InProcessGroup;
using dist::LayoutKind;
using dist::RankPlan;
using dist::ShardLayout;
using dist::Transport;

// Bytes rank `r` must send: the rows of its chunks in key blocks some query of
// another rank keeps under `spec` (any head), K and V.
int64_t minimum_bytes(const Spec& spec, const ShardLayout& layout, int64_t heads, int64_t r, int64_t row_bytes) {
  const int64_t L = layout.seq_len(), block = layout.block();
  int64_t rows = 0;
  for (int64_t peer = 0; peer < layout.world_size(); ++peer) {
    if (peer == r) continue;
    std::vector<bool> needed(static_cast<size_t>((L + block - 1) / block), false);
    for (const int64_t i : positions(layout, peer))
      for (int64_t j = 0; j < L; ++j)
        for (int64_t h = 0; h < heads; ++h)
          if (spec(h, i, i, j)) needed[static_cast<size_t>(j / block)] = true;
    for (const int64_t j : positions(layout, r)) rows += needed[static_cast<size_t>(j / block)] ? 1 : 0;
  }
  return 2 * rows * row_bytes;
}

// Every rank's forward and backward over `group`, the results put back at their positions.
Gathered run_ranks(const Problem& p, const ContextParallelPlan& plan, const Inputs& in, Backend backend,
                   const HostTensor* d_lse = nullptr) {
  const ShardLayout& layout = plan.layout();
  const int64_t world = layout.world_size();
  Gathered g(p, world);
  std::mutex results;
  InProcessGroup group(world, 30.0);
  group.run([&](Transport& transport) {
    const int64_t r = transport.rank();
    const RankPlan rank_plan(plan, r, 16);
    const std::vector<int64_t> rows = positions(layout, r);
    const int64_t n = static_cast<int64_t>(rows.size());
    const HostTensor q_r = take_rows(in.q, rows), k_r = take_rows(in.k, rows), v_r = take_rows(in.v, rows);
    const HostTensor d_out_r = take_rows(in.d_out, rows);
    std::optional<HostTensor> d_lse_r;
    if (d_lse) d_lse_r.emplace(take_rows(*d_lse, rows));
    HostTensor out(p.dtype, p.B, p.Hq, n, p.D), dq(p.dtype, p.B, p.Hq, n, p.D);
    HostTensor dk(p.dtype, p.B, p.Hkv, n, p.D), dv(p.dtype, p.B, p.Hkv, n, p.D);
    HostTensor lse(DType::F32, p.B, p.Hq, n, 1);
    for (HostTensor* t : {&out, &dq, &dk, &dv, &lse}) t->poison();
    AttentionOptions options;
    options.backend = backend;
    dist::attention(q_r.view, k_r.view, v_r.view, out.view, rank_plan, transport, options, &lse.view);
    const int64_t sent = transport.bytes_sent();
    dist::attention_backward(q_r.view, k_r.view, v_r.view, out.view, lse.view, d_out_r.view,
                             AttentionGrads{dq.view, dk.view, dv.view}, rank_plan, transport, options,
                             d_lse_r ? &d_lse_r->view : nullptr);
    std::lock_guard<std::mutex> lock(results);
    g.put(r, rows, p.L, out, lse, dq, dk, dv, sent);
  });
  return g;
}

TEST(DistAttention, RandomPatternsMatchOneCallInFp64) {
  std::mt19937_64 rng(5151);
  int checked = 0;
  for (int n = 0; n < 40; ++n) {
    const int64_t world = draw(rng, 1, 4), block = draw(rng, 0, 1) ? 8 : 16;
    const LayoutKind kind = draw(rng, 0, 1) ? LayoutKind::Zigzag : LayoutKind::Contiguous;
    const int64_t chunks = world * (kind == LayoutKind::Zigzag ? 2 : 1);
    Problem p{draw(rng, 1, 2), 0, 0, draw(rng, chunks * block, 150), draw(rng, 0, 1) ? 8 : 12, DType::F64};
    p.Hkv = draw(rng, 1, 2);
    p.Hq = p.Hkv * draw(rng, 1, 2);
    const Case c = random_case(rng, p.L, p.L, p.Hq);
    SCOPED_TRACE(c.name + ", L " + std::to_string(p.L) + ", world " + std::to_string(world) + ", block " +
                 std::to_string(block) + (kind == LayoutKind::Zigzag ? ", zigzag" : ", contiguous") + ", Hq " +
                 std::to_string(p.Hq) + ", Hkv " + std::to_string(p.Hkv));
    const ShardLayout layout(kind, p.L, world, block);
    const ContextParallelPlan plan(c.pattern, layout, p.Hq);
    const Inputs in(p, rng);
    const Gathered g = run_ranks(p, plan, in, Backend::Reference);
    expect_matches(g, p, c.pattern, in, 1e-6);  // LSEs are fp32 (the API's), merges fp32
    for (int64_t r = 0; r < world; ++r)
      EXPECT_EQ(g.forward_bytes[static_cast<size_t>(r)],
                minimum_bytes(c.spec, layout, p.Hq, r, p.B * p.Hkv * p.D * dtype_size(p.dtype)))
          << "rank " << r;
    ++checked;
  }
  EXPECT_EQ(checked, 40);
}

TEST(DistAttention, TheLseGradientReachesEveryInput) {
  std::mt19937_64 rng(808);
  const Problem p{1, 2, 1, 250, 16, DType::F64};
  const ShardLayout layout(LayoutKind::Zigzag, p.L, 3, 16);
  const ContextParallelPlan plan(Pattern::causal(), layout, p.Hq);
  const Inputs in(p, rng);
  HostTensor d_lse(DType::F32, p.B, p.Hq, p.L, 1);
  d_lse.fill_random(rng);
  expect_matches(run_ranks(p, plan, in, Backend::Reference, &d_lse), p, Pattern::causal(), in, 1e-6, &d_lse);
}

TEST(DistAttention, CpuBackendMatchesInFp32) {
  struct Named {
    const char* name;
    Pattern pattern;
    LayoutKind layout;
    int64_t world;
  };
  const std::vector<Named> cases = {
      {"causal", Pattern::causal(), LayoutKind::Zigzag, 3},
      {"window 96", Pattern::sliding_window(96), LayoutKind::Contiguous, 4},
      {"streaming 16 + 64", Pattern::streaming(16, 64), LayoutKind::Contiguous, 3},
      {"dilated", Pattern::dilated({64, 256}, {1, 4}, true), LayoutKind::Contiguous, 2},
  };
  std::mt19937_64 rng(77);
  for (const Named& c : cases) {
    SCOPED_TRACE(c.name);
    const Problem p{1, 4, 2, 1000, 32, DType::F32};
    const ShardLayout layout(c.layout, p.L, c.world, 32);
    const ContextParallelPlan plan(c.pattern, layout, p.Hq);
    const Inputs in(p, rng);
    expect_matches(run_ranks(p, plan, in, Backend::Cpu), p, c.pattern, in, 2e-6);
  }
}

TEST(DistAttention, CallsThatDoNotFitThePlanAreRejected) {
  const ShardLayout layout(LayoutKind::Contiguous, 64, 2, 16);
  const ContextParallelPlan plan(Pattern::causal(), layout, 2);
  const RankPlan rank0(plan, 0);
  InProcessGroup group(2, 5.0);
  auto transport = group.transport(1);
  HostTensor q(DType::F32, 1, 2, 32, 8), k(DType::F32, 1, 2, 32, 8), out(DType::F32, 1, 2, 32, 8);
  HostTensor q3(DType::F32, 1, 3, 32, 8), short_k(DType::F32, 1, 2, 31, 8);
  expect_error([&] { dist::attention(q.view, k.view, k.view, out.view, rank0, *transport); },
               "the transport is rank 1 of 2, the plan rank 0 of 2");
  auto transport0 = group.transport(0);
  expect_error([&] { dist::attention(q3.view, k.view, k.view, q3.view, rank0, *transport0); },
               "q has 3 heads, the plan was made for 2");
  expect_error([&] { dist::attention(q.view, short_k.view, short_k.view, out.view, rank0, *transport0); },
               "k must be (1, 2, 32, 8), got (1, 2, 31, 8)");
  expect_error([&] { RankPlan(plan, 2); }, "rank must be in [0, 2), got 2");
  if (!dist::nccl_available()) expect_error([] { dist::nccl_transport_from_env(); }, "not in this build");
}

TEST(InProcessGroup, AFailingRankEndsTheOthersWaits) {
  InProcessGroup group(3, 20.0);
  std::atomic<int> waited{0};
  expect_error(
      [&] {
        group.run([&](Transport& t) {
          if (t.rank() == 1) fail("rank 1 gives up");
          std::vector<double> in(4);
          const int64_t from = (t.rank() + 2) % 3;
          auto exchange = t.start({}, {dist::Message{from, in.data(), 32}}, nullptr);
          ++waited;
          exchange->wait(from);
        });
      },
      "rank 1 gives up");
  EXPECT_EQ(waited.load(), 2);
}

TEST(InProcessGroup, MismatchedExchangesFailWithTheirSizes) {
  InProcessGroup group(2, 5.0);
  expect_error(
      [&] {
        group.run([&](Transport& t) {
          std::vector<double> out(4, 1.0), in(4);
          const int64_t peer = 1 - t.rank();
          const int64_t bytes = t.rank() == 0 ? 32 : 24;  // rank 1 sends 24, rank 0 expects 32
          t.start({dist::Message{peer, out.data(), bytes}}, {dist::Message{peer, in.data(), 32}}, nullptr)->finish();
        });
      },
      "rank 0 expected 32 bytes from rank 1, which sent 24");
  InProcessGroup lonely(2, 0.2);
  expect_error(
      [&] {
        lonely.run([&](Transport& t) {
          std::vector<double> in(1);
          if (t.rank() == 0) t.start({}, {dist::Message{1, in.data(), 8}}, nullptr)->finish();
        });
      },
      "rank 0 waited 0.2 s for the message from peer 1");
  InProcessGroup pair(2);
  auto t = pair.transport(0);
  std::vector<double> buf(1);
  expect_error([&] { t->start({dist::Message{0, buf.data(), 8}}, {}, nullptr); },
               "rank 0 of 2 cannot exchange with peer 0");
}

}  // namespace
}  // namespace spattn::testing
