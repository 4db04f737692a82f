// tests/cpp/test_cpu_backend.cpp - the fast CPU backend against the fp64 reference.
//
// Every check runs cpu_attention on fresh random inputs with poisoned outputs
// and compares with reference_attention (fp64 accumulation, fp64 output) on
// the same inputs: relative output error < 1e-5 for fp32 inputs and < 1e-2 for
// fp16/bf16 inputs, LSE to 1e-4 (and -inf exactly where the reference has it).
// Covered: every pattern kind and random compositions, fp32/fp16/bf16 inputs,
// fp32/fp64/fp16/bf16 outputs, BHLD/BLHD layouts, odd lengths (1, 17, 127,
// 1000), Lq != Lk both ways, GQA, mask block sizes 1..200, odd head dims, empty
// rows, masks without a pattern, every SIMD kernel this CPU runs (the portable
// one always), both ways of staging keys and values, repeated calls of one
// shape (reused buffers), and bit-identical results with 1 and 2 OpenMP
// threads. The partial-block lane masks are also
// checked pair by pair against expr_allows, and each kernel's transposes
// (the output one with and without non-temporal stores) element by element.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>

#include "cpu/fast/decode_rows.hpp"
#include "cpu/fast/isa.hpp"
#include "cpu/fast/kv_stage.hpp"
#include "cpu/fast/partial_bits.hpp"
#include "cpu/fast/tile_io.hpp"
#include "pattern_cases.hpp"
#include "test_support.hpp"

namespace spattn::testing {
namespace {

using cpu_fast::CpuIsa;

struct Problem {
  int64_t batch = 1, q_heads = 2, kv_heads = 1, q_len = 17, k_len = 17, head_dim = 16;
  DType in = DType::F32, out = DType::F32;
  Layout q_layout = Layout::BHLD, kv_layout = Layout::BHLD, out_layout = Layout::BHLD;
  int64_t block_q = 16, block_k = 16;
};

std::string describe(const Problem& p, const std::string& pattern) {
  std::ostringstream os;
  os << pattern << " B=" << p.batch << " Hq=" << p.q_heads << " Hkv=" << p.kv_heads << " Lq=" << p.q_len
     << " Lk=" << p.k_len << " D=" << p.head_dim << " in=" << dtype_name(p.in) << " out=" << dtype_name(p.out)
     << " layouts q/kv/out=" << int(p.q_layout) << int(p.kv_layout) << int(p.out_layout) << " blocks "
     << p.block_q << "x" << p.block_k << " isa=" << cpu_fast::cpu_isa_name(cpu_fast::active_cpu_isa());
  return os.str();
}

// Inputs of one problem, filled once; the CPU backend may run several times.
struct Inputs {
  HostTensor q, k, v;
  Inputs(const Problem& p, uint64_t seed)
      : q(p.in, p.batch, p.q_heads, p.q_len, p.head_dim, p.q_layout),
        k(p.in, p.batch, p.kv_heads, p.k_len, p.head_dim, p.kv_layout),
        v(p.in, p.batch, p.kv_heads, p.k_len, p.head_dim, p.kv_layout) {
    std::mt19937_64 rng(seed);
    q.fill_random(rng, 1.5);
    k.fill_random(rng, 1.5);
    v.fill_random(rng);
  }
};

struct Result {
  HostTensor out;
  std::vector<float> lse;
};

Result run_cpu(const Problem& p, const Inputs& in, const BlockMask& mask) {
  Result r{HostTensor(p.out, p.batch, p.q_heads, p.q_len, p.head_dim, p.out_layout),
           std::vector<float>(static_cast<size_t>(p.batch * p.q_heads * p.q_len),
                              std::numeric_limits<float>::quiet_NaN())};
  r.out.poison();
  const TensorView lse = make_lse(r.lse.data(), p.batch, p.q_heads, p.q_len);
  cpu_attention(in.q.view, in.k.view, in.v.view, r.out.view, mask,
                1.0 / std::sqrt(static_cast<double>(p.head_dim)), &lse);
  return r;
}

double input_tolerance(DType in) { return in == DType::F32 ? 1e-5 : 1e-2; }

// Extra relative error from rounding the output to its dtype.
double output_rounding(DType out) {
  switch (out) {
    case DType::F16: return 1e-3;
    case DType::BF16: return 8e-3;
    default: return 0.0;
  }
}

// Runs the CPU backend and the reference; expects agreement. Returns the
// number of empty rows (LSE -inf in the reference).
int64_t expect_matches_reference(const Problem& p, const Pattern& pattern, const std::string& name,
                                 uint64_t seed) {
  SCOPED_TRACE(describe(p, name));
  const Inputs in(p, seed);
  const BlockMask mask = BlockMask::build(pattern, {p.q_len, p.k_len, p.block_q, p.block_k, p.q_heads});
  const Result got = run_cpu(p, in, mask);

  HostTensor want(DType::F64, p.batch, p.q_heads, p.q_len, p.head_dim);
  std::vector<float> want_lse(got.lse.size());
  const TensorView want_lse_view = make_lse(want_lse.data(), p.batch, p.q_heads, p.q_len);
  reference_attention(in.q.view, in.k.view, in.v.view, want.view, mask,
                      1.0 / std::sqrt(static_cast<double>(p.head_dim)), &want_lse_view);

  const std::vector<double> got_out = got.out.to_double(), want_out = want.to_double();
  for (double x : got_out) EXPECT_TRUE(std::isfinite(x)) << "an output element was not written";
  EXPECT_LT(relative_error(got_out, want_out), input_tolerance(p.in) + output_rounding(p.out));
  const std::vector<double> got_lse(got.lse.begin(), got.lse.end());
  const std::vector<double> ref_lse(want_lse.begin(), want_lse.end());
  EXPECT_LT(max_lse_error(got_lse, ref_lse), 1e-4);

  int64_t empty = 0;
  const int64_t D = p.head_dim;
  for (size_t row = 0; row < ref_lse.size(); ++row) {
    if (ref_lse[row] != -std::numeric_limits<double>::infinity()) continue;
    ++empty;
    EXPECT_EQ(got_lse[row], -std::numeric_limits<double>::infinity());
    for (int64_t d = 0; d < D; ++d) EXPECT_EQ(got_out[row * D + d], 0.0) << "empty row " << row;
  }
  return empty;
}

// Runs `body` once per SIMD kernel this CPU supports, forcing it.
template <typename Body>
void for_each_isa(Body&& body) {
  for (CpuIsa isa : {CpuIsa::Portable, CpuIsa::Avx2, CpuIsa::Avx512}) {
    if (!cpu_fast::cpu_isa_supported(isa)) continue;
    cpu_fast::force_cpu_isa(isa);
    body();
    cpu_fast::clear_forced_cpu_isa();
  }
}

TEST(CpuBackend, EveryPatternKindOnEveryKernel) {
  std::mt19937_64 rng(11);
  for_each_isa([&] {
    for (int kind = 0; kind < kNumLeafKinds; ++kind) {
      Problem p;
      p.q_len = kind % 2 ? 127 : 100;
      p.k_len = kind % 3 ? 127 : 150;
      p.block_q = kind % 2 ? 16 : 64;
      p.block_k = kind % 2 ? 7 : 64;
      p.head_dim = kind % 2 ? 32 : 19;
      const Case c = random_leaf(rng, kind, p.q_len, p.k_len, p.q_heads);
      expect_matches_reference(p, c.pattern, c.name, rng());
    }
  });
}

TEST(CpuBackend, RandomCompositionsShapesAndBlocks) {
  std::mt19937_64 rng(12);
  const int64_t lengths[] = {1, 17, 127, 300};
  const int64_t blocks[] = {1, 7, 16, 64, 128, 200};
  const int64_t dims[] = {1, 8, 33, 64, 128};
  for (int trial = 0; trial < 60; ++trial) {
    Problem p;
    p.q_len = lengths[draw(rng, 0, 3)];
    p.k_len = draw(rng, 0, 2) ? p.q_len : lengths[draw(rng, 0, 3)];
    p.block_q = blocks[draw(rng, 0, 5)];
    p.block_k = blocks[draw(rng, 0, 5)];
    p.head_dim = dims[draw(rng, 0, 4)];
    p.batch = draw(rng, 1, 2);
    p.kv_heads = draw(rng, 1, 2);
    p.q_heads = p.kv_heads * draw(rng, 1, 3);
    p.q_layout = draw(rng, 0, 1) ? Layout::BLHD : Layout::BHLD;
    p.kv_layout = draw(rng, 0, 1) ? Layout::BLHD : Layout::BHLD;
    p.out_layout = draw(rng, 0, 1) ? Layout::BLHD : Layout::BHLD;
    const Case c = random_case(rng, p.q_len, p.k_len, p.q_heads);
    expect_matches_reference(p, c.pattern, c.name, rng());
  }
}

TEST(CpuBackend, LongRowsOddLengthAndLqNotLk) {
  std::mt19937_64 rng(13);
  Problem p;
  p.q_heads = 4;
  p.kv_heads = 2;
  p.head_dim = 64;
  p.block_q = 128;
  p.block_k = 128;
  for (const auto& [q_len, k_len] : {std::pair<int64_t, int64_t>{1000, 1000}, {1000, 333}, {257, 1000}}) {
    p.q_len = q_len;
    p.k_len = k_len;
    expect_matches_reference(p, Pattern::dense(), "dense", rng());
    expect_matches_reference(p, Pattern::causal(), "causal", rng());
    expect_matches_reference(p, Pattern::sliding_window(100), "window(100)", rng());
    expect_matches_reference(p, Pattern::streaming(5, 64), "streaming(5, 64)", rng());
  }
}

// Few query rows per kv head (decoding, a few speculative tokens): the
// decode path (cpu/fast/decode_rows.hpp), every pattern kind and random
// compositions, GQA groups up to 16 rows, mask blocks that cut the rows and
// keys, both layouts, fp32 and bf16 inputs.
TEST(CpuBackend, DecodeRowsEveryPatternKind) {
  std::mt19937_64 rng(17);
  const int64_t k_lengths[] = {1, 70, 300, 1000};
  for (int trial = 0; trial < 3 * kNumLeafKinds; ++trial) {
    Problem p;
    p.kv_heads = draw(rng, 1, 2);
    p.q_heads = p.kv_heads * (draw(rng, 0, 1) ? 4 : 1);
    p.k_len = k_lengths[draw(rng, 0, 3)];
    p.q_len = std::min<int64_t>(p.k_len, draw(rng, 1, 4));
    p.block_q = draw(rng, 0, 1) ? 2 : 64;
    p.block_k = draw(rng, 0, 1) ? 16 : 128;
    p.head_dim = draw(rng, 0, 1) ? 64 : 24;
    p.in = draw(rng, 0, 1) ? DType::BF16 : DType::F32;
    p.q_layout = p.kv_layout = draw(rng, 0, 1) ? Layout::BLHD : Layout::BHLD;
    ASSERT_TRUE(cpu_fast::decode_rows_fit(CallShape{p.batch, p.q_heads, p.kv_heads, p.q_len, p.k_len, p.head_dim,
                                                    p.in}));
    const Case c = trial < kNumLeafKinds ? random_leaf(rng, trial, p.q_len, p.k_len, p.q_heads)
                                         : random_case(rng, p.q_len, p.k_len, p.q_heads);
    expect_matches_reference(p, c.pattern, c.name, rng());
  }
}

// The decode path keeps the non-finite semantics of spattn/attention.hpp
// against the dense fp64 oracle: a NaN query, a +inf key (its rows' scores
// +inf, -inf or NaN by the query's signs), a -inf score everywhere in a row.
TEST(CpuBackend, DecodeRowsNonFiniteInputs) {
  Problem p;
  p.q_heads = 4;
  p.kv_heads = 1;
  p.q_len = 2;
  p.k_len = 100;
  p.head_dim = 8;
  const auto cases = std::vector<std::pair<const char*, void (*)(Inputs&)>>{
      {"NaN query element", [](Inputs& in) { in.q.view.store(0, 1, 0, 3, std::nan("")); }},
      {"+inf key", [](Inputs& in) {
         for (int64_t d = 0; d < 8; ++d) in.k.view.store(0, 0, 40, d, std::numeric_limits<double>::infinity());
       }},
      {"-inf scores in a row", [](Inputs& in) {
         for (int64_t d = 0; d < 8; ++d) in.q.view.store(0, 2, 1, d, d == 0 ? 1.0 : 0.0);
         for (int64_t j = 0; j < 100; ++j) in.k.view.store(0, 0, j, 0, -std::numeric_limits<double>::infinity());
       }},
  };
  for (const auto& [name, inject] : cases) {
    SCOPED_TRACE(name);
    Inputs in(p, 18);
    inject(in);
    const BlockMask mask = BlockMask::build(Pattern::causal(), {p.q_len, p.k_len, 16, 16, p.q_heads});
    const Result got = run_cpu(p, in, mask);
    const DenseResult oracle = dense_masked_attention(in.q.view, in.k.view, in.v.view, Pattern::causal(),
                                                      1.0 / std::sqrt(static_cast<double>(p.head_dim)));
    const std::vector<double> lse(got.lse.begin(), got.lse.end());
    EXPECT_EQ(compare_nonfinite(got.out.to_double(), lse, oracle, p.head_dim, 1e-5, 1e-4, -1), "");
  }
}

TEST(CpuBackend, HalfPrecisionInputsAndOutputs) {
  std::mt19937_64 rng(14);
  for (DType in : {DType::F16, DType::BF16, DType::F32}) {
    for (DType out : {DType::F32, DType::F64, DType::F16, DType::BF16}) {
      Problem p;
      p.in = in;
      p.out = out;
      p.q_len = 127;
      p.k_len = 200;
      p.head_dim = 40;
      p.q_layout = Layout::BLHD;
      const Case c = random_case(rng, p.q_len, p.k_len, p.q_heads);
      expect_matches_reference(p, c.pattern, c.name, rng());
      expect_matches_reference(p, Pattern::causal(), "causal", rng());
    }
  }
}

TEST(CpuBackend, EmptyRowsGiveZeroAndMinusInfinity) {
  std::mt19937_64 rng(15);
  Problem p;
  p.q_len = 40;
  p.k_len = 20;  // causal: rows 0..19 sit at negative positions and see no key
  EXPECT_EQ(expect_matches_reference(p, Pattern::causal(), "causal", rng()), 20 * p.q_heads);
  p.q_len = p.k_len = 37;
  p.block_q = p.block_k = 8;
  // Block (2, *) is absent: rows 16..23 have no key.
  std::vector<uint8_t> blocks(5 * 5, 1);
  for (int c = 0; c < 5; ++c) blocks[2 * 5 + c] = 0;
  const Pattern custom = Pattern::custom(blocks, 1, 5, 5, 8, 8);
  EXPECT_EQ(expect_matches_reference(p, custom, "custom with an empty block row", rng()), 8 * p.q_heads);
}

TEST(CpuBackend, MaskWithoutPatternHasOnlyFullBlocks) {
  Problem p;
  p.q_len = 50;
  p.k_len = 45;
  const Inputs in(p, 16);
  // 4 query blocks x 3 key blocks of 16; row 1 is empty.
  const BlockMask mask(p.q_len, p.k_len, 16, 16, 1, {0, 2, 2, 5, 6}, {0, 2, 0, 1, 2, 1}, {1, 1, 1, 1, 1, 1});
  const Result got = run_cpu(p, in, mask);
  HostTensor want(DType::F64, p.batch, p.q_heads, p.q_len, p.head_dim);
  reference_attention(in.q.view, in.k.view, in.v.view, want.view, mask, 0.25, nullptr);
  EXPECT_LT(relative_error(got.out.to_double(), want.to_double()), 1e-5);
}

TEST(CpuBackend, OneAndTwoThreadsAgreeBitForBit) {
  std::mt19937_64 rng(17);
  const int saved = omp_get_max_threads();
  for_each_isa([&] {
    for (int trial = 0; trial < 4; ++trial) {
      Problem p;
      p.q_len = 300;
      p.k_len = trial % 2 ? 300 : 211;
      p.q_heads = 4;
      p.kv_heads = 2;
      p.head_dim = 48;
      p.block_q = trial < 2 ? 64 : 7;
      p.block_k = trial < 2 ? 64 : 16;
      const Case c = random_case(rng, p.q_len, p.k_len, p.q_heads);
      SCOPED_TRACE(describe(p, c.name));
      const Inputs in(p, rng());
      const BlockMask mask = BlockMask::build(c.pattern, {p.q_len, p.k_len, p.block_q, p.block_k, p.q_heads});
      omp_set_num_threads(1);
      const Result one = run_cpu(p, in, mask);
      omp_set_num_threads(2);
      const Result two = run_cpu(p, in, mask);
      EXPECT_EQ(std::memcmp(one.out.bytes.data(), two.out.bytes.data(), one.out.bytes.size()), 0);
      EXPECT_EQ(std::memcmp(one.lse.data(), two.lse.data(), one.lse.size() * sizeof(float)), 0);
    }
  });
  omp_set_num_threads(saved);
}

TEST(CpuBackend, StagingPerItemForLongHeads) {
  // Heads too long to stage whole are staged item by item (span or chunks);
  // lower the limit so small inputs take that path too.
  std::mt19937_64 rng(21);
  const int64_t saved = cpu_fast::whole_head_limit();
  cpu_fast::set_whole_head_limit(0);
  for (int trial = 0; trial < 12; ++trial) {
    Problem p;
    p.q_len = 700;
    p.k_len = trial % 3 ? 700 : 900;
    p.q_heads = 4;
    p.kv_heads = 2;
    p.head_dim = 24;
    p.in = trial % 2 ? DType::F16 : DType::F32;
    p.kv_layout = trial % 4 < 2 ? Layout::BLHD : Layout::BHLD;
    p.block_q = p.block_k = trial < 6 ? 64 : 16;
    const Case c = random_case(rng, p.q_len, p.k_len, p.q_heads);
    expect_matches_reference(p, c.pattern, c.name, rng());
  }
  Problem p;
  p.q_len = p.k_len = 1000;
  p.head_dim = 32;
  expect_matches_reference(p, Pattern::sliding_window(100), "window(100)", rng());
  expect_matches_reference(p, Pattern::longformer(40, {0, 1, 500}), "longformer", rng());
  // A sink key far from the window: the last items stage only their chunks.
  p.q_len = p.k_len = 3000;
  expect_matches_reference(p, Pattern::unite(Pattern::sliding_window(20), Pattern::streaming(1, 1)),
                           "window(20) | sink 1", rng());
  cpu_fast::set_whole_head_limit(saved);
}

TEST(CpuBackend, RepeatedCallsOfOneShapeSeeTheirOwnInputs) {
  // Calls of the same sizes reuse their per-thread buffers; each call must
  // stage its own keys and values, in whole-head and in per-item staging.
  std::mt19937_64 rng(23);
  const int64_t saved = cpu_fast::whole_head_limit();
  for (const int64_t limit : {saved, int64_t{0}}) {
    cpu_fast::set_whole_head_limit(limit);
    Problem p;
    p.q_len = p.k_len = 400;
    p.head_dim = 32;
    p.block_q = p.block_k = 64;
    for (int call = 0; call < 3; ++call) {
      expect_matches_reference(p, Pattern::sliding_window(100), "window(100)", rng());
      expect_matches_reference(p, Pattern::dense(), "dense", rng());
    }
  }
  cpu_fast::set_whole_head_limit(saved);
}

TEST(CpuBackend, TransposeOfEveryKernel) {
  std::mt19937_64 rng(22);
  std::uniform_real_distribution<float> uniform(-2.0f, 2.0f);
  for (CpuIsa isa : {CpuIsa::Portable, CpuIsa::Avx2, CpuIsa::Avx512}) {
    if (!cpu_fast::cpu_isa_supported(isa)) continue;
    const cpu_fast::TileKernel& kernel = cpu_fast::tile_kernel(isa);
    for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{1, 1}, {16, 16}, {17, 19}, {64, 128},
                                     {8, 40}, {33, 16}, {64, 7}}) {
      SCOPED_TRACE(std::string(kernel.isa) + " " + std::to_string(rows) + "x" + std::to_string(cols));
      const int64_t src_stride = cols + 3;
      std::vector<float> src(static_cast<size_t>(rows * src_stride)), scale(static_cast<size_t>(cols));
      for (float& x : src) x = uniform(rng);
      for (float& x : scale) x = uniform(rng);
      // transpose_out may stream when dst is 64-byte aligned with a stride of
      // whole lines: offset 0 of an aligned buffer takes that path, 1 does not.
      for (const auto transpose : {kernel.transpose, kernel.transpose_out}) {
        for (const int64_t dst_stride : {rows + 5, (rows + 15) / 16 * 16}) {
          for (const int64_t offset : {0, 1}) {
            cpu_fast::AlignedFloats buffer(cols * dst_stride + offset);
            float* dst = buffer.data() + offset;
            std::fill(dst, dst + cols * dst_stride, std::numeric_limits<float>::quiet_NaN());
            transpose(src.data(), src_stride, rows, cols, scale.data(), dst, dst_stride);
            for (int64_t r = 0; r < rows; ++r)
              for (int64_t c = 0; c < cols; ++c)
                ASSERT_EQ(dst[c * dst_stride + r], src[r * src_stride + c] * scale[c])
                    << "r=" << r << " c=" << c << " stride " << dst_stride << " offset " << offset
                    << (transpose == kernel.transpose_out ? " (transpose_out)" : "");
          }
        }
      }
    }
  }
}

TEST(CpuBackend, LaneMasksMatchThePredicate) {
  std::mt19937_64 rng(18);
  for (int trial = 0; trial < 300; ++trial) {
    const int64_t q_len = draw(rng, 1, 200), k_len = draw(rng, 1, 200), heads = 2;
    const Case c = random_case(rng, q_len, k_len, heads);
    const int64_t h = draw(rng, 0, heads - 1);
    cpu_fast::TileMaskContext context;
    context.expr = &c.pattern.expr_for_head(h, heads);
    context.head = h;
    context.row0 = draw(rng, 0, q_len - 1);
    context.rows = std::min<int64_t>(draw(rng, 1, 64), q_len - context.row0);
    context.shift = k_len - q_len;
    const int64_t first = draw(rng, 0, k_len - 1), count = std::min<int64_t>(draw(rng, 1, 64), k_len - first);
    std::vector<uint64_t> bits(static_cast<size_t>(count));
    cpu_fast::tile_allowed_bits(&context, first, count, bits.data());
    for (int64_t j = 0; j < count; ++j)
      for (int64_t i = 0; i < context.rows; ++i) {
        const int64_t row = context.row0 + i;
        const bool want = expr_allows(*context.expr, h, row, row + context.shift, first + j);
        ASSERT_EQ(((bits[j] >> i) & 1) != 0, want)
            << c.name << " Lq=" << q_len << " Lk=" << k_len << " h=" << h << " row " << row
            << " key " << first + j;
      }
  }
}

TEST(CpuBackend, RejectsBadInputs) {
  Problem p;
  const Inputs in(p, 19);
  HostTensor out(DType::F32, p.batch, p.q_heads, p.q_len + 1, p.head_dim);
  const BlockMask mask = BlockMask::build(Pattern::dense(), {p.q_len, p.k_len, 16, 16, 1});
  EXPECT_THROW(cpu_attention(in.q.view, in.k.view, in.v.view, out.view, mask, 0.5, nullptr), Error);
  HostTensor good(DType::F32, p.batch, p.q_heads, p.q_len, p.head_dim);
  EXPECT_THROW(cpu_attention(in.q.view, in.k.view, in.v.view, good.view, mask,
                             std::numeric_limits<double>::infinity(), nullptr),
               Error);
}

TEST(CpuBackend, AttentionDispatchesToCpu) {
  EXPECT_TRUE(backend_available(Backend::Cpu));
  if (!backend_available(Backend::Cuda)) {
    EXPECT_EQ(best_backend(), Backend::Cpu);
  }
  Problem p;
  const Inputs in(p, 20);
  const BlockMask mask = BlockMask::build(Pattern::causal(), {p.q_len, p.k_len, 16, 16, 1});
  HostTensor via_attention(DType::F32, p.batch, p.q_heads, p.q_len, p.head_dim);
  via_attention.poison();
  AttentionOptions options;
  options.backend = Backend::Cpu;
  attention(in.q.view, in.k.view, in.v.view, via_attention.view, mask, options);
  const Result direct = run_cpu(p, in, mask);
  EXPECT_EQ(std::memcmp(via_attention.bytes.data(), direct.out.bytes.data(), direct.out.bytes.size()), 0);
}

}  // namespace
}  // namespace spattn::testing
