// tests/cpp/test_select.cpp - dynamic block selection against brute force.
//
// BruteSelect below is written from the rules of docs/dynamic.md without the
// library's helpers: allowed blocks and causal cuts by scanning every pair,
// mean-pool scores as the mean of q_i . k_j over every pair of the block (the
// same number as pooled q . pooled k), antidiagonal scores by scanning pairs,
// one std::sort per row. select_blocks must agree row by row on random shapes
// (odd lengths, Lq != Lk both ways, block sizes 1..64, GQA, per-query-head
// masks, bf16 and (B, L, H, D) inputs), topk and tau, causal or not, forced
// blocks and budgets. A row whose outcome hangs on a near tie of
// probabilities (or of the mass against tau) is checked loosely, and such
// rows must stay rare. Then: tau = 1 keeps every allowed block, topk >= the
// block count gives BlockMask::build of the dense / causal pattern, dynamic
// attention equals the fp64 oracle run on the selected blocks, batches select
// per element, bad configurations are rejected by name, and the structured
// generator is deterministic and shows its sinks and locality.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <set>
#include <sstream>

#include "spattn/select.hpp"
#include "test_support.hpp"

namespace spattn::testing {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

struct BruteRow {
  std::vector<int> kept;      // ascending
  std::vector<uint8_t> full;  // per kept block
  std::set<int> forced;
  int64_t expected_size = 0;
  bool near_tie = false;  // the outcome hangs on a difference below eps
};

// Independent selection for q (1, Hq, Lq, D), k (1, Hkv, Lk, D); rows are
// (mask head, query block).
std::vector<BruteRow> brute_select(const HostTensor& q, const HostTensor& k, const SelectConfig& c,
                                   double eps) {
  const int64_t Hq = q.view.heads(), Lq = q.view.seq_len(), D = q.view.head_dim();
  const int64_t Hkv = k.view.heads(), Lk = k.view.seq_len(), G = Hq / Hkv;
  const int64_t bq = c.block_q, bk = c.block_k;
  const int64_t nqb = (Lq + bq - 1) / bq, nkb = (Lk + bk - 1) / bk;
  const double scale = c.scale ? *c.scale : 1.0 / std::sqrt(static_cast<double>(D));
  const std::vector<double> qd = q.to_double(), kd = k.to_double();
  auto logit = [&](int64_t h, int64_t i, int64_t kvh, int64_t j) {
    double s = 0.0;
    for (int64_t d = 0; d < D; ++d) s += qd[(h * Lq + i) * D + d] * kd[(kvh * Lk + j) * D + d];
    return s * scale;
  };
  auto pair_ok = [&](int64_t i, int64_t j) { return !c.causal || j <= i + Lk - Lq; };

  const int64_t mask_heads = c.per_query_head ? Hq : Hkv;
  std::vector<BruteRow> rows;
  for (int64_t m = 0; m < mask_heads; ++m) {
    for (int64_t qb = 0; qb < nqb; ++qb) {
      const int64_t i0 = qb * bq, i1 = std::min(i0 + bq, Lq);
      BruteRow row;
      std::vector<int> allowed;
      std::vector<uint8_t> all_pairs;
      for (int64_t cb = 0; cb < nkb; ++cb) {
        bool any = false, all = true;
        for (int64_t i = i0; i < i1; ++i)
          for (int64_t j = cb * bk; j < std::min((cb + 1) * bk, Lk); ++j) {
            any = any || pair_ok(i, j);
            all = all && pair_ok(i, j);
          }
        if (any) {
          allowed.push_back(static_cast<int>(cb));
          all_pairs.push_back(all ? 1 : 0);
        }
      }
      std::vector<double> prob(static_cast<size_t>(nkb), 0.0);
      std::vector<int64_t> heads;
      for (int64_t t = 0; t < (c.per_query_head ? 1 : G); ++t)
        heads.push_back(c.per_query_head ? m : m * G + t);
      for (int64_t h : heads) {
        const int64_t kvh = h / G;
        std::vector<double> score;
        for (int cb : allowed) {
          const int64_t j0 = cb * bk, j1 = std::min(j0 + bk, Lk);
          if (c.stride == 0) {
            double sum = 0.0;
            for (int64_t i = i0; i < i1; ++i)
              for (int64_t j = j0; j < j1; ++j) sum += logit(h, i, kvh, j);
            score.push_back(sum / static_cast<double>((i1 - i0) * (j1 - j0)));
          } else {
            std::vector<double> samples;
            for (int64_t i = i0; i < i1; ++i)
              for (int64_t j = j0; j < j1; ++j)
                if (((i - i0) + (j - j0)) % c.stride == c.stride - 1 && pair_ok(i, j))
                  samples.push_back(logit(h, i, kvh, j));
            if (samples.empty()) {
              score.push_back(kNegInf);
              continue;
            }
            const double mx = *std::max_element(samples.begin(), samples.end());
            double sum = 0.0;
            for (double s : samples) sum += std::exp(s - mx);
            score.push_back(mx + std::log(sum / static_cast<double>(samples.size())));
          }
        }
        const double mx = score.empty() ? kNegInf : *std::max_element(score.begin(), score.end());
        if (mx == kNegInf) continue;
        double denom = 0.0;
        for (double s : score) denom += std::exp(s - mx);
        for (size_t a = 0; a < allowed.size(); ++a)
          prob[allowed[a]] += std::exp(score[a] - mx) / denom / static_cast<double>(heads.size());
      }

      const int64_t p_last = i1 - 1 + Lk - Lq;
      for (int cb : allowed) {
        const bool local = p_last >= 0 && cb <= p_last / bk && cb > p_last / bk - c.local_blocks;
        if (cb < c.sink_blocks || local) row.forced.insert(cb);
      }
      std::vector<int> candidates;
      for (int cb : allowed)
        if (!row.forced.count(cb)) candidates.push_back(cb);
      std::sort(candidates.begin(), candidates.end(),
                [&](int a, int b) { return prob[a] != prob[b] ? prob[a] > prob[b] : a < b; });
      int64_t target = 0;
      if (c.topk) {
        target = std::max<int64_t>(*c.topk, static_cast<int64_t>(row.forced.size()));
      } else if (*c.tau >= 1.0) {
        target = static_cast<int64_t>(allowed.size());
      } else {
        double mass = 0.0;
        for (int cb : row.forced) mass += prob[cb];
        size_t taken = 0;
        if (std::abs(mass - *c.tau) < eps) row.near_tie = true;
        while (mass < *c.tau && taken < candidates.size()) {
          mass += prob[candidates[taken++]];
          if (std::abs(mass - *c.tau) < eps) row.near_tie = true;
        }
        target = static_cast<int64_t>(row.forced.size() + taken);
      }
      target = std::max(target, c.min_blocks);
      if (c.max_blocks > 0) target = std::min(target, c.max_blocks);
      target = std::min<int64_t>(target, static_cast<int64_t>(allowed.size()));
      row.expected_size = target;
      const size_t take = static_cast<size_t>(target) - row.forced.size();
      if (take > 0 && take < candidates.size() && prob[candidates[take - 1]] - prob[candidates[take]] < eps)
        row.near_tie = true;
      std::set<int> kept(row.forced.begin(), row.forced.end());
      kept.insert(candidates.begin(), candidates.begin() + take);
      for (int cb : kept) {
        row.kept.push_back(cb);
        row.full.push_back(all_pairs[std::find(allowed.begin(), allowed.end(), cb) - allowed.begin()]);
      }
      rows.push_back(row);
    }
  }
  return rows;
}

std::string describe(const SelectConfig& c, const HostTensor& q, const HostTensor& k) {
  std::ostringstream os;
  os << "Hq=" << q.view.heads() << " Hkv=" << k.view.heads() << " Lq=" << q.view.seq_len()
     << " Lk=" << k.view.seq_len() << " D=" << q.view.head_dim() << " " << dtype_name(q.view.dtype)
     << " block " << c.block_q << "x" << c.block_k << (c.topk ? " topk=" : " tau=")
     << (c.topk ? static_cast<double>(*c.topk) : *c.tau) << " sink=" << c.sink_blocks
     << " local=" << c.local_blocks << " min=" << c.min_blocks << " max=" << c.max_blocks
     << " causal=" << c.causal << " stride=" << c.stride << " per_query_head=" << c.per_query_head;
  return os.str();
}

struct Comparison {
  int64_t rows = 0, near_ties = 0;
};

// Compares the mask with brute force; returns the row and near-tie counts.
Comparison compare_with_brute(const BlockMask& mask, const HostTensor& q, const HostTensor& k,
                              const SelectConfig& c) {
  const double eps = c.stride == 0 ? 1e-10 : 1e-5;
  const std::vector<BruteRow> want = brute_select(q, k, c, eps);
  const int64_t mask_heads = c.per_query_head ? q.view.heads() : k.view.heads();
  EXPECT_EQ(mask.num_heads(), mask_heads);
  EXPECT_EQ(mask.block_q(), c.block_q);
  EXPECT_EQ(mask.block_k(), c.block_k);
  Comparison result;
  const auto& off = mask.row_offsets();
  for (size_t r = 0; r < want.size(); ++r) {
    const std::vector<int> got(mask.kv_indices().begin() + off[r], mask.kv_indices().begin() + off[r + 1]);
    const std::vector<uint8_t> got_full(mask.kv_full().begin() + off[r], mask.kv_full().begin() + off[r + 1]);
    ++result.rows;
    if (want[r].near_tie) {
      ++result.near_ties;
      for (int f : want[r].forced)
        EXPECT_TRUE(std::binary_search(got.begin(), got.end(), f))
            << "row " << r << " lost forced block " << f;
      EXPECT_LE(std::abs(static_cast<int64_t>(got.size()) - want[r].expected_size), 1) << "row " << r;
      continue;
    }
    EXPECT_EQ(got, want[r].kept) << "row " << r;
    if (got == want[r].kept) {
      EXPECT_EQ(got_full, want[r].full) << "row " << r;
    }
  }
  return result;
}

TEST(SelectBlocks, MatchesBruteForceOnRandomProblems) {
  std::mt19937_64 rng(20240611);
  auto pick = [&](std::initializer_list<int64_t> values) {
    std::vector<int64_t> v(values);
    return v[std::uniform_int_distribution<size_t>(0, v.size() - 1)(rng)];
  };
  const std::pair<int64_t, int64_t> heads[] = {{1, 1}, {2, 2}, {4, 2}, {6, 3}, {4, 1}};
  Comparison total;
  for (int trial = 0; trial < 160; ++trial) {
    const auto [Hq, Hkv] = heads[trial % 5];
    const int64_t Lq = pick({1, 5, 31, 64, 97, 130, 161});
    const int64_t Lk = pick({1, 7, 33, 64, 100, 129, 170});
    const int64_t D = pick({4, 16, 33});
    const DType dtype = trial % 7 == 3 ? DType::BF16 : DType::F32;
    const Layout layout = trial % 5 == 2 ? Layout::BLHD : Layout::BHLD;
    HostTensor q(dtype, 1, Hq, Lq, D, layout), k(dtype, 1, Hkv, Lk, D, layout);
    q.fill_random(rng, 1.5);
    k.fill_random(rng, 1.5);

    SelectConfig c;
    c.block_q = pick({1, 3, 16, 17, 32, 64});
    c.block_k = pick({1, 4, 16, 19, 32, 64});
    c.causal = trial % 2 == 0;
    c.per_query_head = trial % 6 == 1;
    c.sink_blocks = pick({0, 0, 1, 2});
    c.local_blocks = pick({0, 1, 1, 2});
    c.min_blocks = pick({0, 0, 0, 2, 5});
    if (trial % 3 == 0)
      c.topk = pick({1, 2, 3, 5, 8});
    else
      c.tau = static_cast<double>(pick({30, 60, 80, 90, 95, 99})) / 100.0;
    if (trial % 4 == 1) {  // tight budgets
      c.sink_blocks = pick({0, 1});
      c.local_blocks = pick({0, 1});
      c.max_blocks = std::max(c.sink_blocks + c.local_blocks, pick({1, 1, 2, 3}));
      c.min_blocks = std::min(c.min_blocks, c.max_blocks);
      if (c.topk) c.topk = std::min(*c.topk, c.max_blocks);
    }
    if (trial % 5 == 4) c.stride = std::min({pick({1, 2, 4}), c.block_q, c.block_k});
    if (trial % 9 == 7) c.scale = 0.3;
    SCOPED_TRACE(describe(c, q, k));
    const BlockMask mask = select_blocks(q.view, k.view, c);
    const Comparison r = compare_with_brute(mask, q, k, c);
    total.rows += r.rows;
    total.near_ties += r.near_ties;
  }
  EXPECT_GT(total.rows, 2000);
  EXPECT_LT(total.near_ties * 100, total.rows)
      << total.near_ties << " near ties in " << total.rows << " rows";
}

// Every pair the mask allows is allowed causally and lies in a kept block,
// and every pair of a kept block that causality allows is allowed.
TEST(SelectBlocks, MaskPairsAreTheKeptBlocksCutByCausality) {
  std::mt19937_64 rng(7);
  HostTensor q(DType::F32, 1, 4, 77, 16), k(DType::F32, 1, 2, 120, 16);
  q.fill_random(rng);
  k.fill_random(rng);
  SelectConfig c;
  c.block_q = 16;
  c.block_k = 8;
  c.tau = 0.6;
  c.causal = true;
  const BlockMask mask = select_blocks(q.view, k.view, c);
  ASSERT_NE(mask.pattern(), nullptr);
  int64_t partial = 0;
  for (uint8_t f : mask.kv_full()) partial += f == 0;
  EXPECT_GT(partial, 0);
  for (int64_t h = 0; h < 4; ++h)
    for (int64_t i = 0; i < 77; ++i) {
      const int64_t r = (h / 2) * mask.num_q_blocks() + i / 16;
      const auto begin = mask.kv_indices().begin() + mask.row_offsets()[r];
      const auto end = mask.kv_indices().begin() + mask.row_offsets()[r + 1];
      for (int64_t j = 0; j < 120; ++j) {
        const bool kept = std::binary_search(begin, end, static_cast<int32_t>(j / 8));
        EXPECT_EQ(mask.allowed(h, 4, i, j), kept && j <= i + 120 - 77)
            << "h=" << h << " i=" << i << " j=" << j;
      }
    }
}

TEST(SelectBlocks, TauOneKeepsEveryAllowedBlock) {
  std::mt19937_64 rng(11);
  for (bool causal : {false, true}) {
    for (int64_t stride : {0, 4}) {
      HostTensor q(DType::F32, 1, 3, 90, 8), k(DType::F32, 1, 3, 70, 8);
      q.fill_random(rng, 3.0);  // sharp softmax: most blocks carry almost no mass
      k.fill_random(rng, 3.0);
      SelectConfig c;
      c.block_q = 8;
      c.block_k = 8;
      c.tau = 1.0;
      c.causal = causal;
      c.stride = stride;
      c.sink_blocks = 0;
      c.local_blocks = 0;
      const BlockMask got = select_blocks(q.view, k.view, c);
      MaskShape shape;
      shape.q_len = 90;
      shape.k_len = 70;
      shape.block_q = 8;
      shape.block_k = 8;
      const BlockMask all = BlockMask::build(Pattern::dense(causal), shape);
      for (int64_t h = 0; h < 3; ++h)
        for (int64_t qb = 0; qb < got.num_q_blocks(); ++qb) {
          const int64_t r = h * got.num_q_blocks() + qb;
          EXPECT_EQ(got.row_offsets()[r + 1] - got.row_offsets()[r],
                    all.row_offsets()[qb + 1] - all.row_offsets()[qb])
              << "causal=" << causal << " stride=" << stride << " head " << h << " query block " << qb;
        }
    }
  }
}

TEST(SelectBlocks, TopkAtLeastBlockCountGivesTheDenseOrCausalPlan) {
  std::mt19937_64 rng(12);
  for (bool causal : {false, true}) {
    for (auto [Lq, Lk] : {std::pair<int64_t, int64_t>{100, 100}, {45, 130}, {130, 45}}) {
      HostTensor q(DType::F32, 1, 4, Lq, 16), k(DType::F32, 1, 2, Lk, 16);
      q.fill_random(rng);
      k.fill_random(rng);
      SelectConfig c;
      c.block_q = 16;
      c.block_k = 32;
      c.topk = 1000;
      c.causal = causal;
      const BlockMask got = select_blocks(q.view, k.view, c);
      MaskShape shape;
      shape.q_len = Lq;
      shape.k_len = Lk;
      shape.block_q = 16;
      shape.block_k = 32;
      const BlockMask want = BlockMask::build(Pattern::dense(causal), shape);
      ASSERT_EQ(want.num_heads(), 1);
      ASSERT_EQ(got.num_heads(), 2);
      const int64_t nqb = want.num_q_blocks();
      for (int64_t h = 0; h < 2; ++h) {
        const auto& go = got.row_offsets();
        const auto& wo = want.row_offsets();
        for (int64_t qb = 0; qb < nqb; ++qb) {
          SCOPED_TRACE(::testing::Message() << "causal=" << causal << " Lq=" << Lq << " Lk=" << Lk << " head "
                                            << h << " query block " << qb);
          const std::vector<int32_t> gi(got.kv_indices().begin() + go[h * nqb + qb],
                                        got.kv_indices().begin() + go[h * nqb + qb + 1]);
          const std::vector<int32_t> wi(want.kv_indices().begin() + wo[qb],
                                        want.kv_indices().begin() + wo[qb + 1]);
          const std::vector<uint8_t> gf(got.kv_full().begin() + go[h * nqb + qb],
                                        got.kv_full().begin() + go[h * nqb + qb + 1]);
          const std::vector<uint8_t> wf(want.kv_full().begin() + wo[qb], want.kv_full().begin() + wo[qb + 1]);
          EXPECT_EQ(gi, wi);
          EXPECT_EQ(gf, wf);
        }
      }
    }
  }
}

// The blocks of `mask` for each of `query_heads` heads as a custom pattern,
// ANDed with causality.
Pattern pattern_of(const BlockMask& mask, int64_t query_heads, bool causal) {
  const int64_t nqb = mask.num_q_blocks(), group = query_heads / mask.num_heads();
  std::vector<int64_t> offsets{0};
  std::vector<int32_t> indices;
  for (int64_t h = 0; h < query_heads; ++h)
    for (int64_t qb = 0; qb < nqb; ++qb) {
      const int64_t r = (h / group) * nqb + qb;
      indices.insert(indices.end(), mask.kv_indices().begin() + mask.row_offsets()[r],
                     mask.kv_indices().begin() + mask.row_offsets()[r + 1]);
      offsets.push_back(static_cast<int64_t>(indices.size()));
    }
  return Pattern::custom_bsr(offsets, indices, query_heads, nqb, mask.num_k_blocks(), mask.block_q(),
                             mask.block_k(), causal);
}

TEST(AttentionDynamic, EqualsTheOracleOnTheSelectedBlocks) {
  std::mt19937_64 rng(13);
  struct Case {
    int64_t B, Hq, Hkv, Lq, Lk, D;
    bool causal;
    bool per_query_head;
    DType dtype;
  };
  const Case cases[] = {
      {2, 4, 2, 75, 75, 32, true, false, DType::F32},
      {1, 3, 3, 50, 133, 16, true, true, DType::F32},
      {2, 2, 1, 96, 40, 24, false, false, DType::BF16},
      {1, 4, 4, 130, 130, 8, true, false, DType::F32},
  };
  for (const Case& t : cases) {
    SCOPED_TRACE(::testing::Message() << "B=" << t.B << " Hq=" << t.Hq << " Hkv=" << t.Hkv << " Lq=" << t.Lq
                                      << " Lk=" << t.Lk << " D=" << t.D << " causal=" << t.causal);
    HostTensor q(t.dtype, t.B, t.Hq, t.Lq, t.D), k(t.dtype, t.B, t.Hkv, t.Lk, t.D),
        v(t.dtype, t.B, t.Hkv, t.Lk, t.D);
    HostTensor out(DType::F32, t.B, t.Hq, t.Lq, t.D), lse(DType::F32, t.B, t.Hq, t.Lq, 1);
    StructuredQKConfig s;
    s.seed = static_cast<uint64_t>(t.Lq * 31 + t.Lk);
    s.local_width = 16.0;
    s.sink_tokens = 2;
    s.vertical_keys = 3;
    make_structured_qk(q.view, k.view, s);
    v.fill_random(rng);
    out.poison();
    lse.poison();
    SelectConfig c;
    c.block_q = 16;
    c.block_k = 16;
    c.tau = 0.8;
    c.causal = t.causal;
    c.per_query_head = t.per_query_head;
    const TensorView lse_view = make_lse(reinterpret_cast<float*>(lse.bytes.data()), t.B, t.Hq, t.Lq);
    const std::vector<BlockMask> masks =
        attention_dynamic(q.view, k.view, v.view, out.view, c, {}, &lse_view);
    ASSERT_EQ(static_cast<int64_t>(masks.size()), t.B);

    const std::vector<double> got = out.to_double(), got_lse = lse.to_double();
    const int64_t per_b = t.Hq * t.Lq * t.D, per_b_lse = t.Hq * t.Lq;
    for (int64_t b = 0; b < t.B; ++b) {
      EXPECT_LT(masks[b].density(t.Hq), 1.0);
      HostTensor qb(t.dtype, 1, t.Hq, t.Lq, t.D), kb(t.dtype, 1, t.Hkv, t.Lk, t.D),
          vb(t.dtype, 1, t.Hkv, t.Lk, t.D);
      const size_t qs = qb.bytes.size(), ks = kb.bytes.size();
      std::copy_n(q.bytes.begin() + b * qs, qs, qb.bytes.begin());
      std::copy_n(k.bytes.begin() + b * ks, ks, kb.bytes.begin());
      std::copy_n(v.bytes.begin() + b * ks, ks, vb.bytes.begin());
      const DenseResult want =
          dense_masked_attention(qb.view, kb.view, vb.view, pattern_of(masks[b], t.Hq, t.causal),
                                 1.0 / std::sqrt(static_cast<double>(t.D)));
      const std::vector<double> got_b(got.begin() + b * per_b, got.begin() + (b + 1) * per_b);
      const std::vector<double> got_lse_b(got_lse.begin() + b * per_b_lse,
                                          got_lse.begin() + (b + 1) * per_b_lse);
      EXPECT_LT(relative_error(got_b, want.out), 2e-5) << "batch " << b;
      EXPECT_LT(max_lse_error(got_lse_b, want.lse), 1e-4) << "batch " << b;
    }
  }
}

TEST(SelectBlocks, BatchesSelectPerElement) {
  HostTensor q(DType::F32, 3, 2, 96, 16), k(DType::F32, 3, 2, 96, 16);
  std::mt19937_64 rng(14);
  q.fill_random(rng);
  k.fill_random(rng);
  SelectConfig c;
  c.block_q = 16;
  c.block_k = 16;
  c.topk = 3;
  c.sink_blocks = 0;
  c.local_blocks = 1;
  c.causal = true;
  const std::vector<BlockMask> masks = select_blocks_batched(q.view, k.view, c);
  ASSERT_EQ(masks.size(), 3u);
  for (int64_t b = 0; b < 3; ++b) {
    HostTensor qb(DType::F32, 1, 2, 96, 16), kb(DType::F32, 1, 2, 96, 16);
    std::copy_n(q.bytes.begin() + b * qb.bytes.size(), qb.bytes.size(), qb.bytes.begin());
    std::copy_n(k.bytes.begin() + b * kb.bytes.size(), kb.bytes.size(), kb.bytes.begin());
    const BlockMask one = select_blocks(qb.view, kb.view, c);
    EXPECT_EQ(masks[b].kv_indices(), one.kv_indices()) << "batch " << b;
    EXPECT_EQ(masks[b].row_offsets(), one.row_offsets()) << "batch " << b;
  }
  EXPECT_NE(masks[0].kv_indices(), masks[1].kv_indices());
  EXPECT_THROW(select_blocks(q.view, k.view, c), Error);
}

TEST(SelectBlocks, BreakdownAddsUpThePhases) {
  HostTensor q(DType::F32, 1, 2, 256, 32), k(DType::F32, 1, 2, 256, 32);
  std::mt19937_64 rng(15);
  q.fill_random(rng);
  k.fill_random(rng);
  SelectConfig c;
  c.block_q = 32;
  c.block_k = 32;
  c.topk = 2;
  SelectBreakdown mean_pool, sampled;
  select_blocks(q.view, k.view, c, &mean_pool);
  EXPECT_GT(mean_pool.pooling_s, 0.0);
  EXPECT_GT(mean_pool.scoring_s, 0.0);
  EXPECT_GT(mean_pool.selection_s, 0.0);
  EXPECT_DOUBLE_EQ(mean_pool.total_s(), mean_pool.pooling_s + mean_pool.scoring_s + mean_pool.selection_s);
  c.stride = 8;
  select_blocks(q.view, k.view, c, &sampled);
  EXPECT_EQ(sampled.pooling_s, 0.0);
  EXPECT_GT(sampled.scoring_s, 0.0);
}

// Equal scores everywhere (every key block holds the same keys): topk keeps
// the lowest block indices.
TEST(SelectBlocks, TiesGoToTheLowerBlockIndex) {
  const int64_t L = 96, D = 8, block = 8;
  HostTensor q(DType::F32, 1, 2, L, D), k(DType::F32, 1, 1, L, D), one_block(DType::F32, 1, 1, block, D);
  std::mt19937_64 rng(17);
  q.fill_random(rng);
  one_block.fill_random(rng);
  for (int64_t j = 0; j < L; ++j)
    for (int64_t d = 0; d < D; ++d) k.view.store(0, 0, j, d, one_block.view.load(0, 0, j % block, d));
  for (int64_t stride : {0, 2}) {
    SelectConfig c;
    c.block_q = block;
    c.block_k = block;
    c.topk = 3;
    c.sink_blocks = 0;
    c.local_blocks = 0;
    c.stride = stride;
    const BlockMask mask = select_blocks(q.view, k.view, c);
    for (int64_t qb = 0; qb < mask.num_q_blocks(); ++qb) {
      const auto begin = mask.kv_indices().begin() + mask.row_offsets()[qb];
      EXPECT_EQ(std::vector<int32_t>(begin, begin + 3), (std::vector<int32_t>{0, 1, 2}))
          << "stride " << stride << " query block " << qb;
    }
  }
}

void expect_rejected(const SelectConfig& c, const std::string& needle) {
  try {
    validate_select_config(c);
    ADD_FAILURE() << "accepted a config that should fail with '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(SelectBlocks, RejectsBadConfigurationsByName) {
  SelectConfig base;
  base.topk = 4;
  validate_select_config(base);
  SelectConfig c = base;
  c.tau = 0.5;
  expect_rejected(c, "exactly one of topk and tau");
  c = base;
  c.topk.reset();
  expect_rejected(c, "exactly one of topk and tau");
  c = base;
  c.topk = 0;
  expect_rejected(c, "topk must be >= 1, got 0");
  c = base;
  c.topk.reset();
  c.tau = 1.5;
  expect_rejected(c, "tau must be in (0, 1], got 1.5");
  c.tau = 0.0;
  expect_rejected(c, "tau must be in (0, 1], got 0");
  c = base;
  c.block_q = 0;
  expect_rejected(c, "block_q must be > 0, got 0");
  c = base;
  c.block_k = -2;
  expect_rejected(c, "block_k must be > 0, got -2");
  c = base;
  c.sink_blocks = -1;
  expect_rejected(c, "sink_blocks must be >= 0, got -1");
  c = base;
  c.local_blocks = -3;
  expect_rejected(c, "local_blocks must be >= 0, got -3");
  c = base;
  c.min_blocks = -1;
  expect_rejected(c, "min_blocks must be >= 0, got -1");
  c = base;
  c.max_blocks = 3;
  expect_rejected(c, "topk (4) must be <= max_blocks (3)");
  c = base;
  c.max_blocks = 4;
  c.min_blocks = 5;
  expect_rejected(c, "min_blocks (5) must be <= max_blocks (4)");
  c = base;
  c.max_blocks = 4;
  c.sink_blocks = 3;
  c.local_blocks = 2;
  expect_rejected(c, "sink_blocks + local_blocks (5) must be <= max_blocks (4)");
  c = base;
  c.stride = -1;
  expect_rejected(c, "stride must be >= 0");
  c = base;
  c.stride = 256;
  expect_rejected(c, "stride (256) must be <= block_q (128)");
  c = base;
  c.scale = std::numeric_limits<double>::infinity();
  expect_rejected(c, "scale must be finite");

  HostTensor q(DType::F32, 1, 3, 16, 8), k(DType::F32, 1, 2, 16, 8), k8(DType::F16, 1, 3, 16, 8);
  std::mt19937_64 rng(16);
  q.fill_random(rng);
  EXPECT_THROW(select_blocks(q.view, k.view, base), Error);   // 3 % 2 != 0
  EXPECT_THROW(select_blocks(q.view, k8.view, base), Error);  // dtype mismatch
}

TEST(StructuredInputs, AreSeededAndShowSinksLocalityAndTopics) {
  const int64_t Hq = 4, Hkv = 2, L = 512, D = 64;
  HostTensor q(DType::F32, 1, Hq, L, D), k(DType::F32, 1, Hkv, L, D);
  HostTensor q2(DType::F32, 1, Hq, L, D, Layout::BLHD), k2(DType::F32, 1, Hkv, L, D, Layout::BLHD);
  StructuredQKConfig s;
  s.seed = 99;
  make_structured_qk(q.view, k.view, s);
  make_structured_qk(q2.view, k2.view, s);
  EXPECT_EQ(q.to_double(), q2.to_double());  // same seed, other layout: same logical data
  EXPECT_EQ(k.to_double(), k2.to_double());
  s.seed = 100;
  make_structured_qk(q2.view, k2.view, s);
  EXPECT_NE(q.to_double(), q2.to_double());

  const std::vector<double> qd = q.to_double(), kd = k.to_double();
  double sink = 0.0, near = 0.0, far = 0.0;
  int64_t n_sink = 0, n_near = 0, n_far = 0;
  for (int64_t h = 0; h < Hq; ++h)
    for (int64_t i = 256; i < L; i += 3)
      for (int64_t j = 0; j <= i; ++j) {
        double s_ij = 0.0;
        for (int64_t d = 0; d < D; ++d) s_ij += qd[(h * L + i) * D + d] * kd[((h / 2) * L + j) * D + d];
        s_ij /= std::sqrt(static_cast<double>(D));
        if (j < s.sink_tokens)
          sink += s_ij, ++n_sink;
        else if (i - j < 8)
          near += s_ij, ++n_near;
        else if (i - j > 128)
          far += s_ij, ++n_far;
      }
  sink /= static_cast<double>(n_sink);
  near /= static_cast<double>(n_near);
  far /= static_cast<double>(n_far);
  EXPECT_GT(sink - far, 0.5 * s.sink_strength) << "sink " << sink << " far " << far;
  EXPECT_GT(near - far, 0.3 * s.local_strength) << "near " << near << " far " << far;

  // Topics alone: logits are topic_strength * (the head's factor) for pairs in
  // segments of one topic, 0 otherwise; segments are topic_span long on
  // average and topics recur far apart. (D = 16 has room for 4 topic
  // features, so 8 topics share them in pairs.)
  const int64_t TL = 4096, TD = 16;
  HostTensor tq_t(DType::F32, 1, 2, TL, TD), tk_t(DType::F32, 1, 1, TL, TD);
  StructuredQKConfig topics_only;
  topics_only.local_strength = topics_only.sink_strength = topics_only.vertical_strength = 0.0;
  topics_only.noise = 0.0;
  make_structured_qk(tq_t.view, tk_t.view, topics_only);
  const std::vector<double> tq = tq_t.to_double(), tk = tk_t.to_double();
  auto logit = [&](int64_t h, int64_t i, int64_t j) {
    double acc = 0.0;
    for (int64_t d = 0; d < TD; ++d) acc += tq[(h * TL + i) * TD + d] * tk[j * TD + d];
    return acc / std::sqrt(static_cast<double>(TD));
  };
  for (int64_t h = 0; h < 2; ++h) {
    const double same = logit(h, 1, 0);
    EXPECT_GT(same, 0.5 * topics_only.topic_strength - 1e-9);
    EXPECT_LT(same, 1.5 * topics_only.topic_strength + 1e-9);
    int64_t adjacent_same = 0, far_same = 0, far = 0;
    for (int64_t i = 1; i < TL; ++i) {
      const double x = logit(h, i, i - 1);
      EXPECT_TRUE(std::abs(x) < 1e-9 || std::abs(x - same) < 1e-9) << "head " << h << " i " << i << ": " << x;
      adjacent_same += x > 0.0;
      for (int64_t j = 0; j + 2 * 256 < i; j += 61) {
        far_same += logit(h, i, j) > 0.0;
        ++far;
      }
    }
    EXPECT_GT(adjacent_same, TL - 1 - 32);  // a segment boundary every ~320 positions
    EXPECT_GT(far_same, far / 10);          // distant segments sharing the feature (1 in 4)
    EXPECT_LT(far_same, far / 2);
  }

  StructuredQKConfig bad;
  bad.local_width = 0.0;
  EXPECT_THROW(make_structured_qk(q.view, k.view, bad), Error);
  HostTensor tiny(DType::F32, 1, 1, 8, 3);
  EXPECT_THROW(make_structured_qk(tiny.view, tiny.view, s), Error);
}

// On structured inputs a tau = 0.9 selection keeps most of the softmax mass
// while skipping most blocks; selection_quality reports the recall computed
// here by hand and the output error against dense attention.
TEST(SelectionQuality, KeepsMostOfTheMassOfStructuredAttention) {
  const int64_t H = 2, L = 1024, D = 64, rows_per_head = 24;
  HostTensor q(DType::F32, 1, H, L, D), k(DType::F32, 1, H, L, D), v(DType::F32, 1, H, L, D);
  HostTensor out(DType::F64, 1, H, L, D);
  StructuredQKConfig s;
  s.seed = 5;
  make_structured_qk(q.view, k.view, s);
  std::mt19937_64 rng(18);
  v.fill_random(rng);
  out.poison();
  SelectConfig c;
  c.block_q = 64;
  c.block_k = 64;
  c.tau = 0.9;
  c.causal = true;
  AttentionOptions reference;
  reference.backend = Backend::Reference;
  const std::vector<BlockMask> masks = attention_dynamic(q.view, k.view, v.view, out.view, c, reference);
  EXPECT_LT(masks[0].density(H), 0.5 * 0.6);
  const SelectionQuality quality =
      selection_quality(q.view, k.view, v.view, out.view, masks, true, 0.125, rows_per_head);
  EXPECT_EQ(quality.rows, H * rows_per_head);

  const std::vector<double> qd = q.to_double(), kd = k.to_double();
  double worst = 1.0, sum = 0.0;
  for (int64_t h = 0; h < H; ++h)
    for (int64_t r = 0; r < rows_per_head; ++r) {
      const int64_t i = (2 * r + 1) * L / (2 * rows_per_head);
      std::vector<double> logits(static_cast<size_t>(i + 1));
      for (int64_t j = 0; j <= i; ++j) {
        double acc = 0.0;
        for (int64_t d = 0; d < D; ++d) acc += qd[(h * L + i) * D + d] * kd[(h * L + j) * D + d];
        logits[j] = acc / 8.0;
      }
      const double mx = *std::max_element(logits.begin(), logits.end());
      double total = 0.0, kept = 0.0;
      for (int64_t j = 0; j <= i; ++j) {
        const double w = std::exp(logits[j] - mx);
        total += w;
        if (masks[0].allowed(h, H, i, j)) kept += w;
      }
      worst = std::min(worst, kept / total);
      sum += kept / total;
    }
  EXPECT_NEAR(quality.recall_min, worst, 1e-12);
  EXPECT_NEAR(quality.recall_mean, sum / static_cast<double>(H * rows_per_head), 1e-12);
  // A single heavy key can hide from mean pooling, so the worst row has no bound.
  EXPECT_GT(quality.recall_mean, 0.8);
  EXPECT_GT(quality.output_error, 0.0);
  EXPECT_LT(quality.output_error, 0.5);

  // Every block kept: recall 1 and the output equals dense attention.
  c.tau = 1.0;
  out.poison();
  const std::vector<BlockMask> all = attention_dynamic(q.view, k.view, v.view, out.view, c, reference);
  const SelectionQuality exact = selection_quality(q.view, k.view, v.view, out.view, all, true, 0.125, 16);
  EXPECT_DOUBLE_EQ(exact.recall_min, 1.0);
  EXPECT_LT(exact.output_error, 1e-12);
}

}  // namespace
}  // namespace spattn::testing
