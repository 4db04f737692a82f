// tests/cpp/gpu_test_select.cpp - the CUDA block selector against the host
// selector (skipped without a device).
//
// Same inputs on both sides (fp32 or bf16, random or structured, odd lengths,
// Lq != Lk, GQA, per-query-head masks, topk and tau, forced blocks, budgets).
// The device computes scores in fp32 and the host in fp64, so a row may differ
// only where its choice hangs on a near tie: every block the two disagree on
// must have an fp64 probability within kTieTolerance of the host row's cut
// (the weakest kept non-forced block), or, with tau, the host's kept mass
// without its weakest block must lie within kTieTolerance of tau; such rows
// must stay under 1%. Also: a run captured in a CUDA graph gives the same
// mask, tau = 1 and large topk give every allowed block, the selected mask
// runs through the fused kernel, CudaDynamicAttention (select then attend on
// the device) equals the fused kernel run on its downloaded masks and the
// fp64 reference, also when replayed from a CUDA graph, and bad inputs are
// rejected, buffers larger than the device refused. Antidiagonal sampling: the device block scores against an fp64
// brute force and the masks against the host's; exact ties between copied key
// blocks go to the lower index as on the host.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <optional>
#include <random>
#include <set>
#include <string>

#include "cuda/select/block_selector.hpp"
#include "gpu_test_support.hpp"
#include "spattn/cuda.hpp"
#include "spattn/select.hpp"

namespace spattn::testing {
namespace {

using cuda_detail::BlockSelector;
using cuda_detail::SelectShape;

constexpr double kTieTolerance = 2e-5;

SelectShape shape_of(const HostTensor& q, const HostTensor& k) {
  return SelectShape{q.view.batch(),   q.view.heads(),   k.view.heads(),
                     q.view.seq_len(), k.view.seq_len(), q.view.head_dim()};
}

// fp64 block probabilities of every (mask head, query block) row, from
// mean pooling, for batch element b (to judge near ties).
std::vector<std::vector<double>> host_probabilities(const HostTensor& q, const HostTensor& k, int64_t b,
                                                    const SelectConfig& c, const BlockMask& mask) {
  const TensorView& qv = q.view;
  const TensorView& kv = k.view;
  const int64_t Hq = qv.heads(), Hkv = kv.heads(), D = qv.head_dim(), G = Hq / Hkv;
  const int64_t nqb = mask.num_q_blocks(), nkb = mask.num_k_blocks();
  const double scale = c.scale ? *c.scale : 1.0 / std::sqrt(static_cast<double>(D));
  auto pooled = [&](const TensorView& t, int64_t h, int64_t blk, int64_t block) {
    std::vector<double> mean(static_cast<size_t>(D), 0.0);
    const int64_t l0 = blk * block, l1 = std::min(l0 + block, t.seq_len());
    for (int64_t l = l0; l < l1; ++l)
      for (int64_t d = 0; d < D; ++d) mean[d] += t.load(b, h, l, d) / static_cast<double>(l1 - l0);
    return mean;
  };
  std::vector<std::vector<std::vector<double>>> pk(static_cast<size_t>(Hkv));
  for (int64_t h = 0; h < Hkv; ++h)
    for (int64_t cb = 0; cb < nkb; ++cb) pk[h].push_back(pooled(kv, h, cb, c.block_k));
  std::vector<std::vector<double>> rows;
  for (int64_t m = 0; m < mask.num_heads(); ++m)
    for (int64_t qb = 0; qb < nqb; ++qb) {
      const int64_t p_last = std::min((qb + 1) * c.block_q, qv.seq_len()) - 1 + kv.seq_len() - qv.seq_len();
      const int64_t n = !c.causal ? nkb : p_last < 0 ? 0 : std::min(p_last / c.block_k + 1, nkb);
      std::vector<double> prob(static_cast<size_t>(nkb), 0.0);
      const int64_t heads = c.per_query_head ? 1 : G;
      for (int64_t t = 0; t < heads; ++t) {
        const int64_t h = c.per_query_head ? m : m * G + t;
        const std::vector<double> pq = pooled(qv, h, qb, c.block_q);
        std::vector<double> s(static_cast<size_t>(n));
        for (int64_t cb = 0; cb < n; ++cb) {
          double dot = 0.0;
          for (int64_t d = 0; d < D; ++d) dot += pq[d] * pk[h / G][cb][d];
          s[cb] = dot * scale;
        }
        if (n == 0) continue;
        const double mx = *std::max_element(s.begin(), s.end());
        double sum = 0.0;
        for (double x : s) sum += std::exp(x - mx);
        for (int64_t cb = 0; cb < n; ++cb)
          prob[cb] += std::exp(s[cb] - mx) / sum / static_cast<double>(heads);
      }
      rows.push_back(prob);
    }
  return rows;
}

// Batch element b of a contiguous host tensor, `times` times over (a batch of
// `times` equal elements).
HostTensor batch_copy(const HostTensor& t, int64_t b, int64_t times = 1) {
  HostTensor c(t.view.dtype, times, t.view.heads(), t.view.seq_len(), t.view.head_dim());
  const size_t bytes = c.bytes.size() / static_cast<size_t>(times);
  for (int64_t n = 0; n < times; ++n)
    std::copy(t.bytes.begin() + static_cast<std::ptrdiff_t>(b * bytes),
              t.bytes.begin() + static_cast<std::ptrdiff_t>((b + 1) * bytes),
              c.bytes.begin() + static_cast<std::ptrdiff_t>(n * bytes));
  return c;
}

std::vector<int32_t> row_blocks(const BlockMask& m, int64_t r) {
  return std::vector<int32_t>(m.kv_indices().begin() + m.row_offsets()[r],
                              m.kv_indices().begin() + m.row_offsets()[r + 1]);
}

// q and k from the structured generator (seeded with `seed`) or uniform random from `rng`.
void fill_qk(HostTensor& q, HostTensor& k, bool structured, uint64_t seed, std::mt19937_64& rng) {
  if (structured) {
    StructuredQKConfig s;
    s.seed = seed;
    make_structured_qk(q.view, k.view, s);
  } else {
    q.fill_random(rng);
    k.fill_random(rng);
  }
}

struct Agreement {
  int64_t rows = 0, differing = 0;
};

// Compares device and host masks row by row, accepting near-tie differences.
Agreement compare_masks(const BlockMask& gpu, const BlockMask& cpu, const HostTensor& q, const HostTensor& k,
                        int64_t b, const SelectConfig& c) {
  Agreement result;
  EXPECT_EQ(gpu.num_heads(), cpu.num_heads());
  EXPECT_EQ(gpu.num_q_blocks(), cpu.num_q_blocks());
  const int64_t rows = cpu.num_heads() * cpu.num_q_blocks();
  std::vector<std::vector<double>> probs;
  for (int64_t r = 0; r < rows; ++r) {
    ++result.rows;
    const std::vector<int32_t> g = row_blocks(gpu, r), h = row_blocks(cpu, r);
    if (g == h) {
      const auto begin = gpu.row_offsets()[r], end = gpu.row_offsets()[r + 1];
      EXPECT_TRUE(std::equal(gpu.kv_full().begin() + begin, gpu.kv_full().begin() + end,
                             cpu.kv_full().begin() + cpu.row_offsets()[r]))
          << "row " << r;
      continue;
    }
    ++result.differing;
    if (probs.empty()) probs = host_probabilities(q, k, b, c, cpu);
    const std::vector<double>& p = probs[r];
    // The host row's cut: its weakest kept non-forced block, else its
    // strongest dropped block.
    const int64_t qb = r % cpu.num_q_blocks();
    const int64_t p_last =
        std::min((qb + 1) * c.block_q, q.view.seq_len()) - 1 + k.view.seq_len() - q.view.seq_len();
    auto forced = [&](int64_t cb) {
      return cb < c.sink_blocks ||
             (p_last >= 0 && cb <= p_last / c.block_k && cb > p_last / c.block_k - c.local_blocks);
    };
    double weakest = 2.0, strongest_dropped = -1.0, kept_mass = 0.0;
    for (int64_t cb = 0; cb < static_cast<int64_t>(p.size()); ++cb) {
      const bool kept = std::binary_search(h.begin(), h.end(), static_cast<int32_t>(cb));
      if (kept) kept_mass += p[cb];
      if (kept && !forced(cb)) weakest = std::min(weakest, p[cb]);
      if (!kept) strongest_dropped = std::max(strongest_dropped, p[cb]);
    }
    const double cut = weakest <= 1.0 ? weakest : strongest_dropped;
    const double before_last = kept_mass - (weakest <= 1.0 ? weakest : 0.0);
    const bool tau_edge = c.tau && (std::abs(kept_mass - *c.tau) < kTieTolerance ||
                                    std::abs(before_last - *c.tau) < kTieTolerance);
    std::set<int32_t> diff;
    std::set_symmetric_difference(g.begin(), g.end(), h.begin(), h.end(), std::inserter(diff, diff.end()));
    for (int32_t cb : diff)
      EXPECT_TRUE(tau_edge || std::abs(p[cb] - cut) < kTieTolerance)
          << "row " << r << ": block " << cb << " has probability " << p[cb] << ", the host cut is " << cut;
    EXPECT_LE(std::abs(static_cast<int64_t>(g.size()) - static_cast<int64_t>(h.size())), c.tau ? 1 : 0)
        << "row " << r;
  }
  return result;
}

struct SelectCase {
  int64_t batch, Hq, Hkv, Lq, Lk, D;
  DType dtype;
  bool structured;
  SelectConfig config;
};

SelectConfig make_config(int64_t bq, int64_t bk, std::optional<int64_t> topk, std::optional<double> tau,
                         bool causal, int64_t sink, int64_t local, int64_t min_blocks, int64_t max_blocks,
                         bool per_query_head) {
  SelectConfig c;
  c.block_q = bq;
  c.block_k = bk;
  c.topk = topk;
  c.tau = tau;
  c.causal = causal;
  c.sink_blocks = sink;
  c.local_blocks = local;
  c.min_blocks = min_blocks;
  c.max_blocks = max_blocks;
  c.per_query_head = per_query_head;
  return c;
}

TEST(GpuSelect, MatchesTheHostSelector) {
  SPATTN_REQUIRE_GPU();
  const SelectCase cases[] = {
      {1, 16, 16, 4096, 4096, 128, DType::BF16, true,
       make_config(128, 128, {}, 0.9, true, 1, 1, 0, 0, false)},
      {1, 16, 4, 4096, 4096, 128, DType::BF16, true, make_config(128, 128, 4, {}, true, 1, 1, 0, 0, false)},
      {2, 8, 2, 1000, 1500, 64, DType::F32, false, make_config(64, 64, {}, 0.7, true, 2, 1, 3, 12, false)},
      {1, 6, 3, 777, 777, 96, DType::BF16, false, make_config(48, 80, 3, {}, false, 0, 2, 0, 0, true)},
      {1, 4, 4, 3000, 1200, 128, DType::F32, true, make_config(128, 64, {}, 0.95, true, 1, 2, 0, 0, false)},
      {1, 4, 1, 2048, 8192, 64, DType::BF16, true, make_config(64, 128, {}, 1.0, true, 0, 0, 0, 0, false)},
      {1, 2, 2, 512, 512, 32, DType::F32, false, make_config(16, 16, 100, {}, true, 1, 1, 0, 0, false)},
      // 2048 key blocks: fewer query blocks per CTA than the 8 that fit smaller rows.
      {1, 2, 1, 200, 32768, 32, DType::F32, false, make_config(64, 16, 40, {}, false, 1, 2, 0, 0, false)},
      // A head dim that is not a multiple of 4 (scalar scoring), groups of 3 query heads.
      {1, 6, 2, 700, 900, 30, DType::F32, false, make_config(64, 32, {}, 0.8, true, 1, 2, 0, 0, false)},
      // Budgets around topk and tau: min_blocks above topk, max_blocks below what tau asks for.
      {1, 4, 2, 2048, 2048, 64, DType::BF16, true, make_config(64, 64, 4, {}, true, 1, 1, 7, 10, false)},
      {1, 4, 4, 2048, 2048, 64, DType::BF16, true, make_config(64, 64, {}, 0.99, false, 1, 1, 0, 6, true)},
      // topk at the number of allowed blocks of the last rows, no forced blocks.
      {1, 2, 2, 1024, 1024, 64, DType::F32, false, make_config(64, 64, 16, {}, true, 0, 0, 0, 0, false)},
  };
  std::mt19937_64 rng(301);
  Agreement total;
  for (const SelectCase& t : cases) {
    SCOPED_TRACE(::testing::Message() << "B=" << t.batch << " Hq=" << t.Hq << " Hkv=" << t.Hkv << " Lq="
                                      << t.Lq << " Lk=" << t.Lk << " D=" << t.D << " " << dtype_name(t.dtype)
                                      << " block " << t.config.block_q << "x" << t.config.block_k);
    HostTensor q(t.dtype, t.batch, t.Hq, t.Lq, t.D), k(t.dtype, t.batch, t.Hkv, t.Lk, t.D);
    fill_qk(q, k, t.structured, static_cast<uint64_t>(t.Lq + t.Lk), rng);
    DeviceTensor dq(q), dk(k);
    BlockSelector selector(t.config, shape_of(q, k));
    selector.run(dq.view(), dk.view(), nullptr);
    cuda_ok(cudaDeviceSynchronize(), "selection kernels");
    const std::vector<BlockMask> want = select_blocks_batched(q.view, k.view, t.config);
    for (int64_t b = 0; b < t.batch; ++b) {
      const BlockMask got = selector.download(b);
      const Agreement a = compare_masks(got, want[b], q, k, b, t.config);
      total.rows += a.rows;
      total.differing += a.differing;
      if (t.config.topk && *t.config.topk >= got.num_k_blocks()) {
        EXPECT_EQ(got.kv_indices(), want[b].kv_indices());
      }
    }
  }
  EXPECT_LT(total.differing * 100, total.rows) << total.differing << " of " << total.rows << " rows differ";
}

// Key blocks that are copies of each other score exactly alike on both
// sides, so every row holds runs of exact ties, which go to the lower block
// index: the masks must be equal, row for row, in both modes and with budgets.
TEST(GpuSelect, ExactTiesGoToTheLowerBlockIndex) {
  SPATTN_REQUIRE_GPU();
  constexpr int64_t kBlock = 64, kBlocks = 40, kDistinct = 3, D = 64;
  HostTensor q(DType::F32, 1, 4, kBlock * kBlocks, D), k(DType::F32, 1, 2, kBlock * kBlocks, D);
  std::mt19937_64 rng(303);
  q.fill_random(rng);
  k.fill_random(rng);
  const size_t row_bytes = sizeof(float) * D, block_bytes = row_bytes * kBlock;
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t c = kDistinct; c < kBlocks; ++c) {
      unsigned char* head = k.bytes.data() + h * block_bytes * kBlocks;
      std::copy_n(head + (c % kDistinct) * block_bytes, block_bytes, head + c * block_bytes);
    }
  const SelectConfig configs[] = {
      make_config(kBlock, kBlock, 6, {}, true, 1, 1, 0, 0, false),
      make_config(kBlock, kBlock, 9, {}, false, 0, 2, 0, 0, true),
      make_config(kBlock, kBlock, {}, 0.55, true, 1, 1, 0, 0, false),
      make_config(kBlock, kBlock, {}, 0.8, false, 2, 0, 3, 11, false),
      make_config(kBlock, kBlock, {}, 1.0, true, 0, 1, 0, 0, false),
  };
  DeviceTensor dq(q), dk(k);
  for (const SelectConfig& c : configs) {
    SCOPED_TRACE(::testing::Message() << (c.topk ? "topk " : "tau ") << (c.topk ? *c.topk : *c.tau));
    BlockSelector selector(c, shape_of(q, k));
    selector.run(dq.view(), dk.view(), nullptr);
    cuda_ok(cudaDeviceSynchronize(), "selection kernels");
    const BlockMask got = selector.download(0), want = select_blocks(q.view, k.view, c);
    EXPECT_EQ(got.row_offsets(), want.row_offsets());
    EXPECT_EQ(got.kv_indices(), want.kv_indices());
    EXPECT_EQ(got.kv_full(), want.kv_full());
  }
}

// fp64 antidiagonal block score of (query head h, query block qb, key block
// c), written from docs/dynamic.md: log of the mean of exp(q_i . k_j * scale)
// over the pairs with (i - first row) + (j - first key) = S - 1 (mod S) and,
// causally, j <= i + Lk - Lq; -inf without such a pair.
double sampled_score(const HostTensor& q, const HostTensor& k, int64_t h, int64_t qb, int64_t c,
                     const SelectConfig& cfg) {
  const TensorView &qv = q.view, &kv = k.view;
  const int64_t D = qv.head_dim(), S = cfg.stride, kvh = h / (qv.heads() / kv.heads());
  const int64_t i0 = qb * cfg.block_q, i1 = std::min(i0 + cfg.block_q, qv.seq_len());
  const int64_t j0 = c * cfg.block_k, j1 = std::min(j0 + cfg.block_k, kv.seq_len());
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  std::vector<double> samples;
  for (int64_t i = i0; i < i1; ++i)
    for (int64_t j = j0; j < j1; ++j) {
      if ((i - i0 + j - j0) % S != S - 1 || (cfg.causal && j > i + kv.seq_len() - qv.seq_len())) continue;
      double dot = 0.0;
      for (int64_t d = 0; d < D; ++d) dot += qv.load(0, h, i, d) * kv.load(0, kvh, j, d);
      samples.push_back(dot * scale);
    }
  if (samples.empty()) return -std::numeric_limits<double>::infinity();
  const double mx = *std::max_element(samples.begin(), samples.end());
  double sum = 0.0;
  for (double x : samples) sum += std::exp(x - mx);
  return mx + std::log(sum / static_cast<double>(samples.size()));
}

// Antidiagonal sampling (stride 1, 4, 8, 16) on the device: every block score
// against an fp64 brute force, and the masks against the host selector (fp32
// device scores against the host's fp32 dot products summed in another order:
// under 2% of the rows may differ, each by at most two blocks).
TEST(GpuSelect, AntidiagonalSamplingMatchesTheHost) {
  SPATTN_REQUIRE_GPU();
  struct Case {
    int64_t Hq, Hkv, Lq, Lk, D;
    DType dtype;
    bool structured;
    SelectConfig config;
  };
  std::vector<Case> cases = {
      {4, 2, 1024, 1024, 64, DType::BF16, true, make_config(64, 64, {}, 0.9, true, 1, 1, 0, 0, false)},
      {2, 2, 700, 900, 32, DType::F32, false, make_config(64, 32, 5, {}, false, 1, 1, 0, 0, true)},
      {2, 1, 2048, 2048, 128, DType::BF16, true, make_config(128, 128, 4, {}, true, 1, 2, 0, 0, false)},
      {2, 2, 256, 200, 16, DType::F16, false, make_config(32, 16, {}, 0.8, true, 0, 1, 0, 0, false)},
  };
  const int64_t strides[] = {8, 4, 16, 1};
  std::mt19937_64 rng(304);
  for (size_t t = 0; t < cases.size(); ++t) {
    Case& cs = cases[t];
    cs.config.stride = strides[t];
    SCOPED_TRACE(::testing::Message() << "case " << t << ", stride " << strides[t]);
    HostTensor q(cs.dtype, 1, cs.Hq, cs.Lq, cs.D), k(cs.dtype, 1, cs.Hkv, cs.Lk, cs.D);
    fill_qk(q, k, cs.structured, 7 + t, rng);
    DeviceTensor dq(q), dk(k);
    BlockSelector selector(cs.config, shape_of(q, k));
    selector.run(dq.view(), dk.view(), nullptr);
    cuda_ok(cudaDeviceSynchronize(), "sampling selection kernels");
    const BlockMask got = selector.download(0), want = select_blocks(q.view, k.view, cs.config);

    const int64_t nqb = got.num_q_blocks(), nkb = got.num_k_blocks();
    std::vector<float> scores(static_cast<size_t>(cs.Hq * nqb * nkb));
    cuda_ok(cudaMemcpy(scores.data(), selector.sampled_scores(), sizeof(float) * scores.size(),
                       cudaMemcpyDeviceToHost),
            "cudaMemcpy(sampled scores)");
    int64_t checked = 0;
    for (int64_t h = 0; h < cs.Hq; ++h)
      for (int64_t qb = 0; qb < nqb; ++qb) {
        const int64_t p_last = std::min((qb + 1) * cs.config.block_q, cs.Lq) - 1 + cs.Lk - cs.Lq;
        const int64_t n = !cs.config.causal ? nkb : p_last < 0 ? 0 : std::min(p_last / cs.config.block_k + 1, nkb);
        for (int64_t c = 0; c < n; ++c, ++checked) {
          const double ref = sampled_score(q, k, h, qb, c, cs.config);
          const float dev = scores[(h * nqb + qb) * nkb + c];
          if (std::isinf(ref)) {
            EXPECT_TRUE(std::isinf(dev) && dev < 0) << "h " << h << " qb " << qb << " c " << c;
          } else {
            EXPECT_NEAR(dev, ref, 1e-3 + 1e-4 * std::abs(ref)) << "h " << h << " qb " << qb << " c " << c;
          }
        }
      }
    EXPECT_GT(checked, 0);

    const int64_t rows = got.num_heads() * nqb;
    ASSERT_EQ(want.num_heads() * want.num_q_blocks(), rows);
    int64_t differing = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const std::vector<int32_t> g = row_blocks(got, r), h = row_blocks(want, r);
      if (g == h) continue;
      ++differing;
      std::vector<int32_t> diff;
      std::set_symmetric_difference(g.begin(), g.end(), h.begin(), h.end(), std::back_inserter(diff));
      EXPECT_LE(diff.size(), 2u) << "row " << r;
    }
    EXPECT_LE(differing * 50, rows) << differing << " of " << rows << " rows differ";
  }
}

TEST(GpuSelect, GraphCaptureGivesTheSameMask) {
  SPATTN_REQUIRE_GPU();
  HostTensor q(DType::BF16, 1, 8, 2048, 128), k(DType::BF16, 1, 2, 2048, 128);
  StructuredQKConfig s;
  s.seed = 3;
  make_structured_qk(q.view, k.view, s);
  DeviceTensor dq(q), dk(k);
  const SelectConfig c = make_config(128, 128, {}, 0.9, true, 1, 1, 0, 8, false);
  BlockSelector selector(c, shape_of(q, k));
  selector.run(dq.view(), dk.view(), nullptr);
  cuda_ok(cudaDeviceSynchronize(), "selection kernels");
  const BlockMask eager = selector.download(0);

  replay_captured([&](cudaStream_t stream) { selector.run(dq.view(), dk.view(), stream); },
                  [&] {  // the replay must rewrite the offsets
                    cuda_ok(cudaMemset(const_cast<int64_t*>(selector.view(0).row_offsets), 0xff, sizeof(int64_t)),
                            "cudaMemset");
                  });
  const BlockMask replayed = selector.download(0);
  EXPECT_EQ(replayed.row_offsets(), eager.row_offsets());
  EXPECT_EQ(replayed.kv_indices(), eager.kv_indices());
  EXPECT_EQ(replayed.kv_full(), eager.kv_full());
  for (int64_t r = 0; r < eager.num_heads() * eager.num_q_blocks(); ++r)
    EXPECT_LE(eager.row_offsets()[r + 1] - eager.row_offsets()[r], 8);
}

TEST(GpuSelect, SelectedMaskRunsThroughTheFusedKernel) {
  SPATTN_REQUIRE_GPU();
  HostTensor q(DType::BF16, 1, 4, 1536, 128), k(DType::BF16, 1, 2, 1536, 128),
      v(DType::BF16, 1, 2, 1536, 128);
  StructuredQKConfig s;
  s.seed = 4;
  make_structured_qk(q.view, k.view, s);
  std::mt19937_64 rng(302);
  v.fill_random(rng);
  DeviceTensor dq(q), dk(k), dv(v);
  BlockSelector selector(make_config(128, 128, 4, {}, true, 1, 1, 0, 0, false), shape_of(q, k));
  selector.run(dq.view(), dk.view(), nullptr);
  const BlockMask mask = selector.download(0);
  EXPECT_LT(mask.density(4), 0.5);

  HostTensor out(DType::F32, 1, 4, 1536, 128), ref(DType::F64, 1, 4, 1536, 128);
  DeviceTensor dout(out);
  dout.poison();
  const double scale = 1.0 / std::sqrt(128.0);
  cuda_attention(dq.view(), dk.view(), dv.view(), dout.view(), mask, scale);
  cuda_ok(cudaDeviceSynchronize(), "attention kernel");
  dout.copy_to(out);
  reference_attention(q.view, k.view, v.view, ref.view, mask, scale, nullptr);
  EXPECT_LT(relative_error(out.to_double(), ref.to_double()), out_tolerance(DType::BF16));
}

// Select then attend on the device: batch elements with their own masks,
// GQA, odd lengths, Lq != Lk, causal cuts, per-query-head masks, budgets.
TEST(GpuSelect, DynamicAttentionEqualsTheStaticRunOfItsMasks) {
  SPATTN_REQUIRE_GPU();
  struct Case {
    int64_t batch, Hq, Hkv, Lq, Lk;
    SelectConfig config;
  };
  const Case cases[] = {
      {2, 8, 2, 1500, 1500, make_config(128, 128, {}, 0.9, true, 1, 2, 0, 6, false)},
      {1, 4, 4, 1000, 1700, make_config(128, 64, 5, {}, true, 1, 1, 0, 0, true)},
      {2, 4, 1, 900, 900, make_config(256, 128, 3, {}, false, 1, 1, 0, 0, false)},
  };
  std::mt19937_64 rng(304);
  const double scale = 1.0 / std::sqrt(128.0);
  for (const Case& t : cases) {
    SCOPED_TRACE(::testing::Message() << "B=" << t.batch << " Hq=" << t.Hq << " Hkv=" << t.Hkv
                                      << " Lq=" << t.Lq << " Lk=" << t.Lk);
    HostTensor q(DType::BF16, t.batch, t.Hq, t.Lq, 128), k(DType::BF16, t.batch, t.Hkv, t.Lk, 128),
        v(DType::BF16, t.batch, t.Hkv, t.Lk, 128);
    StructuredQKConfig s;
    s.seed = static_cast<uint64_t>(t.Lq);
    make_structured_qk(q.view, k.view, s);
    v.fill_random(rng);
    DeviceTensor dq(q), dk(k), dv(v);
    HostTensor out(DType::F32, t.batch, t.Hq, t.Lq, 128), lse(DType::F32, t.batch, t.Hq, t.Lq, 1);
    DeviceTensor dout(out), dlse(lse);
    dout.poison();
    dlse.poison();
    const TensorView lse_view = dlse.view();
    CudaDynamicAttention dynamic(t.config, t.batch, t.Hq, t.Hkv, t.Lq, t.Lk, 128, scale);
    dynamic.run(dq.view(), dk.view(), dv.view(), dout.view(), &lse_view);
    cuda_ok(cudaDeviceSynchronize(), "dynamic attention");
    dout.copy_to(out);
    dlse.copy_to(lse);

    // The static run computes each batch element `times` times over, so that
    // its work units (query tiles x query heads x batch) fill the device
    // twice over on either kernel: it then runs the mask's own plan, as
    // dynamic attention does, rather than a plan that splits rows to fill the
    // device (which would add its pieces in another order).
    int device = 0, sms = 0;
    cuda_ok(cudaGetDevice(&device), "cudaGetDevice");
    cuda_ok(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "multiprocessor count");
    const int64_t units_per_element = t.Hq * ((t.Lq + 127) / 128);  // query heads x 128-row query tiles
    const int64_t times = (4 * sms + units_per_element - 1) / units_per_element;
    HostTensor want(DType::F32, times, t.Hq, t.Lq, 128), want_lse(DType::F32, times, t.Hq, t.Lq, 1);
    HostTensor ref(DType::F64, 1, t.Hq, t.Lq, 128);
    DeviceTensor dwant(want), dwant_lse(want_lse);
    const TensorView want_lse_view = dwant_lse.view();
    for (int64_t b = 0; b < t.batch; ++b) {
      const BlockMask mask = dynamic.mask(b);
      EXPECT_EQ(mask.num_heads(), t.config.per_query_head ? t.Hq : t.Hkv);
      EXPECT_LT(mask.density(t.Hq), 0.9);
      dwant.poison();
      // The static run must use the dynamic path's kernel to match bit for bit:
      // sm90 where it runs with these blocks, else sm80.
      const CudaKernel chosen = cuda_kernel();
      const bool sm90 = chosen != CudaKernel::Sm80 && cuda_sm90_kernel_available() &&
                        t.config.block_q % 128 == 0 && t.config.block_k % 128 == 0;
      const DeviceTensor rq(batch_copy(q, b, times)), rk(batch_copy(k, b, times)), rv(batch_copy(v, b, times));
      cuda_set_kernel(sm90 ? CudaKernel::Sm90 : CudaKernel::Sm80);
      cuda_attention(rq.view(), rk.view(), rv.view(), dwant.view(), mask, scale, &want_lse_view);
      cuda_set_kernel(chosen);
      cuda_ok(cudaDeviceSynchronize(), "static attention");
      dwant.copy_to(want);
      dwant_lse.copy_to(want_lse);
      const HostTensor got = batch_copy(out, b), got_lse = batch_copy(lse, b);
      EXPECT_EQ(got.bytes, batch_copy(want, 0).bytes) << "batch " << b;
      EXPECT_EQ(got_lse.bytes, batch_copy(want_lse, 0).bytes) << "batch " << b;
      reference_attention(batch_slice(q.view, b), batch_slice(k.view, b), batch_slice(v.view, b), ref.view,
                          mask, scale, nullptr);
      EXPECT_LT(relative_error(got.to_double(), ref.to_double()), out_tolerance(DType::BF16)) << "batch " << b;
    }
  }
}

TEST(GpuSelect, DynamicAttentionReplaysFromACudaGraph) {
  SPATTN_REQUIRE_GPU();
  // Two batch elements: the work items of both are ordered by one sort in the graph.
  HostTensor q(DType::BF16, 2, 8, 2048, 128), k(DType::BF16, 2, 2, 2048, 128), v(DType::BF16, 2, 2, 2048, 128);
  StructuredQKConfig s;
  s.seed = 5;
  make_structured_qk(q.view, k.view, s);
  std::mt19937_64 rng(305);
  v.fill_random(rng);
  DeviceTensor dq(q), dk(k), dv(v);
  HostTensor eager(DType::BF16, 2, 8, 2048, 128), replayed(DType::BF16, 2, 8, 2048, 128);
  DeviceTensor dout(eager);
  CudaDynamicAttention dynamic(make_config(128, 128, {}, 0.9, true, 1, 2, 0, 8, false), 2, 8, 2, 2048, 2048,
                               128, 1.0 / std::sqrt(128.0));
  dynamic.run(dq.view(), dk.view(), dv.view(), dout.view());
  cuda_ok(cudaDeviceSynchronize(), "dynamic attention");
  dout.copy_to(eager);

  replay_captured(
      [&](cudaStream_t stream) { dynamic.run(dq.view(), dk.view(), dv.view(), dout.view(), nullptr, stream); },
      [&] { dout.poison(); });
  dout.copy_to(replayed);
  EXPECT_EQ(replayed.bytes, eager.bytes);
}

TEST(GpuSelect, RejectsWhatItCannotRun) {
  SPATTN_REQUIRE_GPU();
  HostTensor q(DType::BF16, 1, 2, 256, 64), k(DType::BF16, 1, 2, 256, 64);
  std::mt19937_64 rng(303);
  q.fill_random(rng);
  k.fill_random(rng);
  // Sampling holds a query and a key block in shared memory: 2 x 1024 rows of 65 floats do not fit.
  SelectConfig sampled = make_config(1024, 1024, 2, {}, true, 1, 1, 0, 0, false);
  sampled.stride = 8;
  const HostTensor long_qk(DType::BF16, 1, 2, 4096, 64);
  EXPECT_THROW(BlockSelector(sampled, shape_of(long_qk, long_qk)), Error);
  BlockSelector selector(make_config(64, 64, 2, {}, true, 1, 1, 0, 0, false), shape_of(q, k));
  EXPECT_THROW(selector.run(q.view, k.view, nullptr), Error);  // host pointers
  HostTensor other(DType::BF16, 1, 2, 128, 64);
  DeviceTensor dq(q), dother(other);
  EXPECT_THROW(selector.run(dq.view(), dother.view(), nullptr), Error);  // shape differs
  EXPECT_THROW(selector.view(1), Error);
  const SelectConfig untiled = make_config(64, 64, 2, {}, true, 1, 1, 0, 0, false);
  EXPECT_THROW(CudaDynamicAttention(untiled, 1, 2, 2, 256, 256, 64, 0.125), Error);  // block_q < 128
}

// 2^14 query heads over 2^16 query blocks pool 512 GiB of q: refused before
// any allocation, naming the selection's parameters and the device memory.
TEST(GpuSelect, BuffersLargerThanTheDeviceAreRefusedAtOnce) {
  SPATTN_REQUIRE_GPU();
  const SelectConfig c = make_config(64, 64, 2, {}, true, 1, 1, 0, 0, false);
  const SelectShape huge{1, int64_t{1} << 14, 1, int64_t{1} << 22, 4096, 128};
  try {
    BlockSelector selector(c, huge);
    FAIL() << "a selector of 512 GiB was made";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("CUDA selector (batch=1, q_heads=16384, kv_heads=1, q_len=4194304"), std::string::npos) << msg;
    EXPECT_NE(msg.find("pooled q 512 GiB"), std::string::npos) << msg;
    EXPECT_NE(msg.find("of device memory are available"), std::string::npos) << msg;
  }
  EXPECT_THROW(CudaDynamicAttention(make_config(128, 64, 2, {}, true, 1, 1, 0, 0, false), 1, int64_t{1} << 14, 1,
                                    int64_t{1} << 22, 4096, 128, 0.125),
               Error);
}

}  // namespace
}  // namespace spattn::testing
