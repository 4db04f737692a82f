// tests/cpp/gpu_test_problems.hpp - GPU problems that more than one suite
// runs (gpu_test_attention.cpp with the library's kernel choice,
// gpu_test_kernels.cpp with each kernel and the sm90 tall tile forced): every
// pattern kind, odd and unequal lengths, grouped query heads in both layouts,
// rows with no allowed key, mask blocks of every size, and rows long enough
// to be split.
#pragma once

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "gpu_test_support.hpp"
#include "pattern_cases.hpp"

namespace spattn::testing {

// Tokens and heads of the pattern problems below.
constexpr int64_t kPatternLen = 1000, kPatternHeads = 4;

// Every pattern kind but dilated ones (a custom block mask drawn from rng, a
// per-head mix of streaming and dense heads) over kPatternLen tokens.
inline std::vector<Case> every_pattern_cases(std::mt19937_64& rng) {
  const int64_t L = kPatternLen;
  return {dense_case(false), causal_case(), block_diagonal_case(100, false), sliding_window_case(64, 32, false),
          window_case(200), streaming_case(16, 100), strided_case(37), fixed_case(64, 8),
          bigbird_case(L, 64, 3, 1, 3, 7, false), longformer_case(64, {0, 500, 999}, false),
          custom_case(rng, L, L, kPatternHeads, 64, 64, 0.3, false, false),
          per_head_case({streaming_case(8, 50), dense_case(true)}, kPatternHeads)};
}

// Each case in both dtypes: kPatternLen tokens, kPatternHeads heads.
inline std::vector<GpuProblem> pattern_problems(const std::vector<Case>& cases) {
  std::vector<GpuProblem> problems;
  for (const Case& c : cases)
    for (DType dtype : {DType::BF16, DType::F16}) {
      GpuProblem pr;
      pr.pattern = c.pattern;
      pr.dtype = pr.out_dtype = dtype;
      pr.q_heads = pr.kv_heads = kPatternHeads;
      pr.q_len = pr.k_len = kPatternLen;
      problems.push_back(pr);
    }
  return problems;
}

// Lengths 1, 17, 1000 and 4099 (causal, a window of 257, dense; one head;
// head dims 128 and 64 in turn), then Lq != Lk both ways at head dim 128 in
// either dtype (129 and 193: one row into a second 128- or 192-row tile):
// with Lq > Lk causal rows lie before position 0 and have no allowed key
// (O = 0, LSE = -inf).
inline std::vector<GpuProblem> odd_and_unequal_length_problems() {
  std::vector<GpuProblem> problems;
  for (int64_t L : {1, 17, 1000, 4099})
    for (const Pattern& pattern : {Pattern::causal(), Pattern::sliding_window(257), Pattern::dense()}) {
      GpuProblem pr;
      pr.pattern = pattern;
      pr.q_heads = pr.kv_heads = 1;
      pr.q_len = pr.k_len = L;
      pr.head_dim = problems.size() % 2 ? 64 : 128;
      problems.push_back(pr);
    }
  for (auto [lq, lk] :
       {std::pair<int64_t, int64_t>{300, 1000}, {1000, 300}, {129, 65}, {65, 129}, {193, 65}, {65, 193}, {1, 4099}})
    for (const Pattern& pattern : {Pattern::causal(), Pattern::streaming(4, 64), Pattern::dense()}) {
      GpuProblem pr;
      pr.pattern = pattern;
      pr.q_len = lq;
      pr.k_len = lk;
      pr.head_dim = 128;
      pr.dtype = pr.out_dtype = problems.size() % 2 ? DType::F16 : DType::BF16;
      problems.push_back(pr);
    }
  return problems;
}

// Eight query heads over 8, 2 and 1 kv heads, batch 2, both layouts, causal
// and a window of 100 + 30 (390 tokens, head dim 128), every third with fp32
// output.
inline std::vector<GpuProblem> grouped_query_problems() {
  std::vector<GpuProblem> problems;
  for (int64_t kv_heads : {8, 2, 1})
    for (Layout layout : {Layout::BHLD, Layout::BLHD})
      for (const Pattern& pattern : {Pattern::causal(), Pattern::sliding_window(100, 30)}) {
        GpuProblem pr;
        pr.pattern = pattern;
        pr.batch = 2;
        pr.q_heads = 8;
        pr.kv_heads = kv_heads;
        pr.q_len = pr.k_len = 390;
        pr.layout = layout;
        pr.head_dim = 128;
        pr.out_dtype = problems.size() % 3 == 0 ? DType::F32 : pr.dtype;
        problems.push_back(pr);
      }
  return problems;
}

// BigBird on 64 x 64 blocks over 700 tokens at `head_dim`: its random
// blocks fill few of a 128-row tile's sub-blocks.
inline GpuProblem bigbird_on_blocks_of_64(int64_t head_dim) {
  GpuProblem pr;
  pr.pattern = Pattern::bigbird(700, 64, 3, 1, 3, 11);
  pr.q_len = pr.k_len = 700;
  pr.block_q = pr.block_k = 64;
  pr.head_dim = head_dim;
  return pr;
}

// A 4 x 4 grid of 64-token blocks (250 tokens) whose row blocks 1 and 3 keep
// nothing.
inline GpuProblem rows_without_keys_problem() {
  const std::vector<uint8_t> blocks = {1, 0, 1, 0, 0, 0, 0, 0, 0, 1, 1, 1, 0, 0, 0, 0};
  GpuProblem pr;
  pr.pattern = Pattern::custom(blocks, 1, 4, 4, 64, 64);
  pr.q_len = pr.k_len = 250;
  pr.block_q = pr.block_k = 64;
  return pr;
}

// Three problems of 700 tokens planned with bq x bk mask blocks: a sliding
// window, a block-level pattern on its own grid (48 x 80 tokens, drawn from
// rng) planned with other block sizes, and a fixed pattern (no span form: its
// partial tiles test keys one by one, those of partial sub-blocks only, which
// small blocks leave scattered over a row's 64 keys).
inline std::vector<GpuProblem> mask_block_problems(int64_t bq, int64_t bk, std::mt19937_64& rng) {
  const int64_t L = 700;
  GpuProblem pr;
  pr.q_len = pr.k_len = L;
  pr.block_q = bq;
  pr.block_k = bk;
  pr.pattern = Pattern::sliding_window(150, 40);
  std::vector<GpuProblem> problems{pr};
  pr.pattern = custom_case(rng, L, L, 1, 48, 80, 0.3, true, false).pattern;
  problems.push_back(pr);
  pr.pattern = Pattern::fixed(100, 8);
  problems.push_back(pr);
  return problems;
}

// Patterns with global rows (Longformer tokens, BigBird's first and last
// blocks) that visit every key and are split into pieces merged afterwards.
inline std::vector<Pattern> split_row_patterns() {
  return {Pattern::longformer(128, {0, 1, 3000}), Pattern::bigbird(6000, 64, 3, 1, 3, 9)};
}

// One of them over 6000 tokens: batch 2, GQA 4:2, 64-token blocks.
inline GpuProblem split_rows_problem(const Pattern& pattern, DType dtype) {
  GpuProblem pr;
  pr.pattern = pattern;
  pr.dtype = pr.out_dtype = dtype;
  pr.q_len = pr.k_len = 6000;
  pr.q_heads = 4;
  pr.kv_heads = 2;
  pr.batch = 2;
  pr.block_q = pr.block_k = 64;
  return pr;
}

// Problems for each order of the work units: GQA over a batch (64-token
// blocks), rows split into pieces, a per-head plan at head dim 128.
inline std::vector<GpuProblem> unit_order_problems() {
  GpuProblem gqa;
  gqa.pattern = Pattern::causal();
  gqa.batch = 2;
  gqa.q_heads = 4;
  gqa.kv_heads = 2;
  gqa.q_len = gqa.k_len = 1000;
  gqa.block_q = gqa.block_k = 64;
  GpuProblem mixed = gqa;
  mixed.pattern = per_head_case({streaming_case(8, 50), dense_case(true)}, 4).pattern;
  mixed.head_dim = 128;
  return {gqa, split_rows_problem(split_row_patterns()[1], DType::BF16), mixed};
}

}  // namespace spattn::testing
