// tests/cpp/dist_support.hpp - what the context-parallel suites share: a
// rank's rows of a global tensor and back, the gathered results of every rank,
// and their comparison with the fp64 dense oracle (test_support.hpp).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "spattn/dist.hpp"
#include "test_support.hpp"

namespace spattn::testing {

// The global positions of `rank`'s shard rows, in shard order.
inline std::vector<int64_t> positions(const dist::ShardLayout& layout, int64_t rank) {
  std::vector<int64_t> p;
  for (const dist::Chunk& c : layout.pieces(rank))
    for (int64_t i = c.start; i < c.end; ++i) p.push_back(i);
  return p;
}

// Rows `rows` of a global (B, H, L, D) tensor, copied into a new tensor.
inline HostTensor take_rows(const HostTensor& global, const std::vector<int64_t>& rows) {
  const TensorView& g = global.view;
  HostTensor t(g.dtype, g.shape[0], g.shape[1], static_cast<int64_t>(rows.size()), g.shape[3]);
  for (int64_t b = 0; b < g.shape[0]; ++b)
    for (int64_t h = 0; h < g.shape[1]; ++h)
      for (size_t i = 0; i < rows.size(); ++i)
        for (int64_t d = 0; d < g.shape[3]; ++d)
          t.view.store(b, h, static_cast<int64_t>(i), d, g.load(b, h, rows[i], d));
  return t;
}

// A shard's values written at their positions of a global (B, H, L, D) array in logical order.
inline void put_rows(std::vector<double>& global, int64_t L, const TensorView& shard, const std::vector<int64_t>& rows) {
  for (int64_t b = 0; b < shard.shape[0]; ++b)
    for (int64_t h = 0; h < shard.shape[1]; ++h)
      for (size_t i = 0; i < rows.size(); ++i)
        for (int64_t d = 0; d < shard.shape[3]; ++d)
          global[static_cast<size_t>(((b * shard.shape[1] + h) * L + rows[i]) * shard.shape[3] + d)] =
              shard.load(b, h, static_cast<int64_t>(i), d);
}

struct Problem {
  int64_t B, Hq, Hkv, L, D;
  DType dtype;
};

// Every rank's results at their positions (NaN where no rank wrote), in logical order.
struct Gathered {
  std::vector<double> out, lse, dq, dk, dv;
  std::vector<int64_t> forward_bytes;  // per rank

  Gathered(const Problem& p, int64_t world)
      : out(static_cast<size_t>(p.B * p.Hq * p.L * p.D), NAN), lse(static_cast<size_t>(p.B * p.Hq * p.L), NAN),
        dq(out), dk(static_cast<size_t>(p.B * p.Hkv * p.L * p.D), NAN), dv(dk),
        forward_bytes(static_cast<size_t>(world), -1) {}

  // Rank `rank`'s results (host tensors), whose rows sit at `rows`.
  void put(int64_t rank, const std::vector<int64_t>& rows, int64_t L, const HostTensor& o, const HostTensor& l,
           const HostTensor& gq, const HostTensor& gk, const HostTensor& gv, int64_t bytes) {
    put_rows(out, L, o.view, rows);
    put_rows(lse, L, l.view, rows);
    put_rows(dq, L, gq.view, rows);
    put_rows(dk, L, gk.view, rows);
    put_rows(dv, L, gv.view, rows);
    forward_bytes[static_cast<size_t>(rank)] = bytes;
  }
};

// The whole sequence's q, k, v and output gradient, fresh N(0, 1) values.
struct Inputs {
  HostTensor q, k, v, d_out;
  Inputs(const Problem& p, std::mt19937_64& rng)
      : q(p.dtype, p.B, p.Hq, p.L, p.D), k(p.dtype, p.B, p.Hkv, p.L, p.D), v(p.dtype, p.B, p.Hkv, p.L, p.D),
        d_out(p.dtype, p.B, p.Hq, p.L, p.D) {
    for (HostTensor* t : {&q, &k, &v, &d_out}) t->fill_random(rng);
  }
};

// Compares every rank's gathered results with the fp64 dense masked attention
// of the whole sequence under `pattern` (with the LSE's gradient d_lse, if
// given); `tol` relative (norms; gradients 10x), LSE absolute (10x).
inline void expect_matches(const Gathered& g, const Problem& p, const Pattern& pattern, const Inputs& in, double tol,
                           const HostTensor* d_lse = nullptr) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(p.D));
  const DenseResult want = dense_masked_attention(in.q.view, in.k.view, in.v.view, pattern, scale);
  const DenseGrads grads = dense_masked_attention_backward(in.q.view, in.k.view, in.v.view, in.d_out.view,
                                                           d_lse ? &d_lse->view : nullptr, pattern, scale);
  EXPECT_LE(relative_error(g.out, want.out), tol) << "out";
  EXPECT_LE(max_lse_error(g.lse, want.lse), 10 * tol) << "lse";
  EXPECT_LE(relative_error(g.dq, grads.dq), 10 * tol) << "dq";
  EXPECT_LE(relative_error(g.dk, grads.dk), 10 * tol) << "dk";
  EXPECT_LE(relative_error(g.dv, grads.dv), 10 * tol) << "dv";
}

}  // namespace spattn::testing
