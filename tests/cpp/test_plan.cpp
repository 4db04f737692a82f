// tests/cpp/test_plan.cpp - the plan of a call (spattn/plan.hpp) on the host
// backends: a call on a plan equals the call on its mask bit for bit; shapes
// that do not fit the mask or the plan are refused naming the field; the
// mask's plan cache makes a plan once per shape, bounds what it keeps and
// makes plans again when a process-wide choice changes; the backward pass
// reads the plan's transposed lists, which are the forward lists transposed
// for random patterns, per-head masks, masks made from arrays and varlen
// masks.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "cpu/fast/isa.hpp"
#include "expect_error.hpp"
#include "pattern/key_major_plan.hpp"
#include "pattern_cases.hpp"
#include "plan/plan_cache.hpp"
#include "test_support.hpp"

namespace spattn::testing {
namespace {

// Every forward entry of `mask` appears once in the key-major lists, in its
// key block's column, with its full flag and forward position, each column's
// query blocks ascending.
void expect_transposed(const BlockMask& mask) {
  const BlockMaskView plan = mask.view();
  const KeyMajorPlan t = key_major_plan(plan);
  ASSERT_EQ(t.q_indices.size(), static_cast<size_t>(mask.num_blocks()));
  ASSERT_EQ(t.col_offsets.size(), static_cast<size_t>(plan.num_heads * plan.num_k_blocks + 1));
  std::vector<int> seen(static_cast<size_t>(mask.num_blocks()), 0);
  for (int64_t mh = 0; mh < plan.num_heads; ++mh)
    for (int64_t kb = 0; kb < plan.num_k_blocks; ++kb) {
      const int64_t col = t.col(mh, kb);
      for (int64_t e = t.col_begin(col); e < t.col_end(col); ++e) {
        const int64_t at = t.forward_position[e];
        ASSERT_GE(at, plan.row_begin(plan.row(mh, t.q_indices[e])));
        ASSERT_LT(at, plan.row_end(plan.row(mh, t.q_indices[e])));
        ASSERT_EQ(plan.kv_indices[at], kb);
        ASSERT_EQ(plan.kv_full[at], t.q_full[e]);
        if (e > t.col_begin(col)) {
          ASSERT_LT(t.q_indices[e - 1], t.q_indices[e]);
        }
        ++seen[at];
      }
    }
  for (int s : seen) ASSERT_EQ(s, 1);
}

TEST(Plan, KeyMajorListsAreTheForwardListsTransposed) {
  std::mt19937_64 rng(4706);
  for (int round = 0; round < 30; ++round) {
    const int64_t lq = draw(rng, 1, 400), lk = draw(rng, 1, 400), heads = draw(rng, 1, 3);
    const Case c = random_case(rng, lq, lk, heads);
    SCOPED_TRACE(c.name);
    expect_transposed(
        BlockMask::build(c.pattern, MaskShape{lq, lk, draw(rng, 1, 3) * 16, draw(rng, 1, 5) * 8, heads}));
  }
  // Masks made from arrays: random blocks per (head, query block) row, every one full.
  for (int round = 0; round < 10; ++round) {
    const int64_t heads = draw(rng, 1, 4), q_blocks = draw(rng, 1, 20), k_blocks = draw(rng, 1, 20);
    std::vector<int64_t> offsets{0};
    std::vector<int32_t> indices;
    for (int64_t r = 0; r < heads * q_blocks; ++r) {
      for (int32_t kb = 0; kb < k_blocks; ++kb)
        if (draw(rng, 0, 2) == 0) indices.push_back(kb);
      offsets.push_back(static_cast<int64_t>(indices.size()));
    }
    const std::vector<uint8_t> full(indices.size(), 1);
    expect_transposed(BlockMask(q_blocks * 16 - draw(rng, 0, 15), k_blocks * 16 - draw(rng, 0, 15), 16, 16, heads,
                                offsets, indices, full));
  }
  // Varlen masks, a per-head (dilated) one among them.
  expect_transposed(varlen_mask(Pattern::causal(), 777, 64, 32));
  expect_transposed(varlen_mask(Pattern::dilated({64, 256}, {2, 4}, true), 600, 32, 32, 4));
  expect_transposed(varlen_mask(Pattern::unite(Pattern::sliding_window(100), Pattern::streaming(4, 16)), 300, 16, 64));
}

struct Problem {
  BlockMask mask = BlockMask::build(Pattern::sliding_window(40), MaskShape{150, 150, 32, 32, 1});
  HostTensor q{DType::F32, 2, 4, 150, 16}, k{DType::F32, 2, 2, 150, 16}, v{DType::F32, 2, 2, 150, 16};
  Problem() {
    std::mt19937_64 rng(77);
    q.fill_random(rng);
    k.fill_random(rng);
    v.fill_random(rng);
  }
};

TEST(Plan, CallOnAPlanEqualsTheCallOnItsMask) {
  Problem p;
  for (const Backend backend : {Backend::Cpu, Backend::Reference}) {
    PlanOptions plan_options;
    plan_options.backend = backend;
    const Plan plan = make_plan(p.mask, call_shape(p.q.view, p.k.view), plan_options);
    EXPECT_EQ(plan.backend(), backend);
    EXPECT_EQ(plan.device(), -1);
    EXPECT_FALSE(plan.describe().empty());
    HostTensor a(DType::F32, 2, 4, 150, 16), b(DType::F32, 2, 4, 150, 16);
    HostTensor lse_a(DType::F32, 2, 4, 150, 1), lse_b(DType::F32, 2, 4, 150, 1);
    a.poison();
    b.poison();
    attention(p.q.view, p.k.view, p.v.view, a.view, plan, {}, &lse_a.view);
    AttentionOptions options;
    options.backend = backend;
    attention(p.q.view, p.k.view, p.v.view, b.view, p.mask, options, &lse_b.view);
    EXPECT_EQ(a.to_double(), b.to_double()) << backend_name(backend);
    EXPECT_EQ(lse_a.to_double(), lse_b.to_double()) << backend_name(backend);
  }
}

TEST(Plan, ShapesThatDoNotFitAreRefusedNamingTheField) {
  Problem p;
  CallShape shape = call_shape(p.q.view, p.k.view);
  CallShape longer = shape;
  longer.q_len = 151;
  expect_error([&] { make_plan(p.mask, longer); }, "the mask was built for Lq=150 but q has seq_len 151");
  CallShape odd_heads = shape;
  odd_heads.kv_heads = 3;
  expect_error([&] { make_plan(p.mask, odd_heads); }, "q heads (4) must be a multiple of k heads (3)");
  CallShape no_dim = shape;
  no_dim.head_dim = 0;
  expect_error([&] { make_plan(p.mask, no_dim); }, "head_dim must be >= 1, got 0");
  const BlockMask dilated = BlockMask::build(Pattern::dilated({32}, {2}), MaskShape{150, 150, 32, 32, 2});
  expect_error([&] { make_plan(dilated, shape); }, "must be built for q heads (4)");
  CallShape varlen = shape;
  varlen.varlen = true;
  const BlockMask bigbird = BlockMask::build(Pattern::bigbird(150, 16, 3, 1, 1, 0), MaskShape{150, 150, 16, 16, 1});
  expect_error([&] { make_plan(bigbird, varlen); }, "depends on the sequence lengths");
  PlanOptions on_device;
  on_device.backend = Backend::Cpu;
  on_device.device = 0;
  expect_error([&] { make_plan(p.mask, shape, on_device); }, "runs host tensors");

  // Tensors of another shape than the plan's, or another backend than it.
  const Plan plan = make_plan(p.mask, shape);
  HostTensor q1(DType::F32, 1, 4, 150, 16), k1(DType::F32, 1, 2, 150, 16), v1(DType::F32, 1, 2, 150, 16),
      out1(DType::F32, 1, 4, 150, 16);
  expect_error([&] { attention(q1.view, k1.view, v1.view, out1.view, plan); }, "is not the plan's");
  HostTensor out(DType::F32, 2, 4, 150, 16);
  AttentionOptions reference;
  reference.backend = Backend::Reference;
  expect_error([&] { attention(p.q.view, p.k.view, p.v.view, out.view, plan, reference); },
               "the plan is for backend 'cpu'");
  expect_error([&] { attention(p.q.view, p.k.view, p.v.view, out.view, Plan()); }, "the plan is empty");
}

TEST(Plan, TheMasksCacheMakesAPlanOncePerShapeAndKeepsFewOfThem) {
  Problem p;
  detail::PlanCache& cache = p.mask.plan_cache();
  HostTensor out(DType::F32, 2, 4, 150, 16);
  attention(p.q.view, p.k.view, p.v.view, out.view, p.mask);
  EXPECT_EQ(cache.size(), 1);
  attention(p.q.view, p.k.view, p.v.view, out.view, p.mask);
  const BlockMask copy = p.mask;  // copies share the cache
  attention(p.q.view, p.k.view, p.v.view, out.view, copy);
  EXPECT_EQ(cache.size(), 1);
  EXPECT_EQ(&copy.plan_cache(), &cache);
  AttentionOptions reference;
  reference.backend = Backend::Reference;
  attention(p.q.view, p.k.view, p.v.view, out.view, p.mask, reference);
  EXPECT_EQ(cache.size(), 2);
  // Every batch size is another shape; the cache keeps the most recent kMaxPlans.
  for (int64_t batch = 1; batch <= static_cast<int64_t>(detail::PlanCache::kMaxPlans) + 4; ++batch) {
    HostTensor q(DType::F32, batch, 4, 150, 16), k(DType::F32, batch, 2, 150, 16), v(DType::F32, batch, 2, 150, 16),
        o(DType::F32, batch, 4, 150, 16);
    std::mt19937_64 rng(static_cast<uint64_t>(batch));
    q.fill_random(rng);
    k.fill_random(rng);
    v.fill_random(rng);
    attention(q.view, k.view, v.view, o.view, p.mask);
  }
  EXPECT_EQ(cache.size(), static_cast<int64_t>(detail::PlanCache::kMaxPlans));
}

// A plan holds the instruction set it was made for: forcing another one
// makes the cached plans again, and the call then runs the forced kernel
// (its result within fp32 rounding of the other's).
TEST(Plan, CachedPlansAreMadeAgainWhenTheInstructionSetChanges) {
  Problem p;
  HostTensor a(DType::F32, 2, 4, 150, 16), b(DType::F32, 2, 4, 150, 16);
  attention(p.q.view, p.k.view, p.v.view, a.view, p.mask);
  const uint64_t before = detail::plan_generation();
  cpu_fast::force_cpu_isa(cpu_fast::CpuIsa::Portable);
  EXPECT_GT(detail::plan_generation(), before);
  attention(p.q.view, p.k.view, p.v.view, b.view, p.mask);
  cpu_fast::clear_forced_cpu_isa();
  EXPECT_EQ(p.mask.plan_cache().size(), 1);
  EXPECT_LT(relative_error(a.to_double(), b.to_double()), 1e-5);
}

TEST(Plan, BackwardReadsThePlansTransposedLists) {
  Problem p;
  HostTensor out(DType::F32, 2, 4, 150, 16), lse(DType::F32, 2, 4, 150, 1), d_out(DType::F32, 2, 4, 150, 16);
  std::mt19937_64 rng(5);
  d_out.fill_random(rng);
  attention(p.q.view, p.k.view, p.v.view, out.view, p.mask, {}, &lse.view);
  HostTensor dq(DType::F32, 2, 4, 150, 16), dk(DType::F32, 2, 2, 150, 16), dv(DType::F32, 2, 2, 150, 16);
  HostTensor dq2(DType::F32, 2, 4, 150, 16), dk2(DType::F32, 2, 2, 150, 16), dv2(DType::F32, 2, 2, 150, 16);
  const Plan forward_only = make_plan(p.mask, call_shape(p.q.view, p.k.view));
  EXPECT_FALSE(forward_only.has_backward());
  expect_error(
      [&] {
        attention_backward(p.q.view, p.k.view, p.v.view, out.view, lse.view, d_out.view, {dq.view, dk.view, dv.view},
                           forward_only);
      },
      "PlanOptions::backward");
  PlanOptions with_backward;
  with_backward.backward = true;
  const Plan plan = make_plan(p.mask, call_shape(p.q.view, p.k.view), with_backward);
  EXPECT_TRUE(plan.has_backward());
  for (HostTensor* g : {&dq, &dk, &dv, &dq2, &dk2, &dv2}) g->poison();
  attention_backward(p.q.view, p.k.view, p.v.view, out.view, lse.view, d_out.view, {dq.view, dk.view, dv.view}, plan);
  attention_backward(p.q.view, p.k.view, p.v.view, out.view, lse.view, d_out.view, {dq2.view, dk2.view, dv2.view},
                     p.mask);
  EXPECT_EQ(dq.to_double(), dq2.to_double());
  EXPECT_EQ(dk.to_double(), dk2.to_double());
  EXPECT_EQ(dv.to_double(), dv2.to_double());
}

}  // namespace
}  // namespace spattn::testing
