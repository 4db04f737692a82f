// tests/cpp/gpu_test_problems.hpp - GPU problems that both the default-kernel
// suite (gpu_test_attention.cpp) and the forced-kernel suite
// (gpu_test_kernels.cpp) run: rows with no allowed key, mask blocks of every
// size, and rows long enough to be split.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "gpu_test_support.hpp"
#include "pattern_cases.hpp"

namespace spattn::testing {

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

// Two problems of 700 tokens planned with bq x bk mask blocks: a sliding
// window, and a block-level pattern on its own grid (48 x 80 tokens, drawn
// from rng) planned with other block sizes.
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

}  // namespace spattn::testing
