// tests/cpp/varlen_support.hpp - packed variable-length problems for the
// varlen suites (CPU and GPU), and their expected result computed one
// sequence at a time by the dense fp64 oracle (dense_masked_attention on the
// sequence's own rows and lengths; it never sees the packed mask).
#pragma once

#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "test_support.hpp"

namespace spattn::testing {

// q (1, Hq, total, D), k and v (1, Hkv, total_k, D) in the packed (total, H, D)
// layout, filled with fresh N(0, 1) data; cu_seqlens from the query lengths,
// cu_seqlens_k from the key lengths (the same unless given: a sequence with
// fewer queries than keys is a chunk of queries after cached keys).
struct PackedProblem {
  std::vector<int64_t> lengths, k_lengths;
  std::vector<int32_t> cu_seqlens, cu_seqlens_k;
  int64_t total = 0, total_k = 0;
  int64_t max_len = 0, max_len_q = 0;  // the longest key sequence (the mask's size), the longest query one
  HostTensor q, k, v;

  PackedProblem(DType dtype, const std::vector<int64_t>& lens, int64_t q_heads, int64_t kv_heads, int64_t head_dim,
                std::mt19937_64& rng)
      : PackedProblem(dtype, lens, lens, q_heads, kv_heads, head_dim, rng) {}

  PackedProblem(DType dtype, const std::vector<int64_t>& q_lens, const std::vector<int64_t>& k_lens, int64_t q_heads,
                int64_t kv_heads, int64_t head_dim, std::mt19937_64& rng)
      : lengths(q_lens),
        k_lengths(k_lens),
        cu_seqlens(prefix_sums(q_lens)),
        cu_seqlens_k(prefix_sums(k_lens)),
        total(cu_seqlens.back()),
        total_k(cu_seqlens_k.back()),
        max_len(longest(k_lens)),
        max_len_q(longest(q_lens)),
        q(dtype, 1, q_heads, total, head_dim, Layout::BLHD),
        k(dtype, 1, kv_heads, total_k, head_dim, Layout::BLHD),
        v(dtype, 1, kv_heads, total_k, head_dim, Layout::BLHD) {
    q.fill_random(rng);
    k.fill_random(rng);
    v.fill_random(rng);
  }

  VarlenBatch batch(const int32_t* cu_q, const int32_t* cu_k) const {
    VarlenBatch b;
    b.cu_seqlens_q = cu_q;
    b.cu_seqlens_k = cu_k;
    b.num_seqs = static_cast<int64_t>(lengths.size());
    b.max_seqlen_q = max_len_q;
    b.max_seqlen_k = max_len;
    return b;
  }

  static std::vector<int32_t> prefix_sums(const std::vector<int64_t>& lens) {
    std::vector<int32_t> cu{0};
    for (int64_t len : lens) cu.push_back(static_cast<int32_t>(cu.back() + len));
    return cu;
  }
  static int64_t longest(const std::vector<int64_t>& lens) {
    int64_t m = 0;
    for (int64_t len : lens) m = len > m ? len : m;
    return m;
  }
};

// Out (1, Hq, total, D) and LSE (1, Hq, total) in logical order, each
// sequence attending to itself alone under `pattern` at its own lengths
// (bottom-right aligned when it has fewer queries than keys).
inline DenseResult expected_varlen(const PackedProblem& pp, const Pattern& pattern, double scale) {
  const int64_t Hq = pp.q.view.heads(), D = pp.q.view.head_dim();
  DenseResult r;
  r.out.assign(static_cast<size_t>(Hq * pp.total * D), 0.0);
  r.lse.assign(static_cast<size_t>(Hq * pp.total), -std::numeric_limits<double>::infinity());
  for (size_t b = 0; b < pp.lengths.size(); ++b) {
    const int64_t first = pp.cu_seqlens[b], len = pp.lengths[b];
    const int64_t first_k = pp.cu_seqlens_k[b], len_k = pp.k_lengths[b];
    if (len == 0) continue;
    const DenseResult one =
        dense_masked_attention(seq_slice(pp.q.view, first, len), seq_slice(pp.k.view, first_k, len_k),
                               seq_slice(pp.v.view, first_k, len_k), pattern, scale);
    for (int64_t h = 0; h < Hq; ++h)
      for (int64_t i = 0; i < len; ++i) {
        r.lse[h * pp.total + first + i] = one.lse[h * len + i];
        for (int64_t d = 0; d < D; ++d) r.out[(h * pp.total + first + i) * D + d] = one.out[(h * len + i) * D + d];
      }
  }
  return r;
}

}  // namespace spattn::testing
