// tile_kernel.hpp - the fused attention kernel for a group of query tiles,
// written once over a SIMD abstraction and instantiated per instruction set.
//
// Algorithm (FlashAttention on the CPU, vectorised across query rows):
//   a tile holds M = W * CV query rows, W lanes per vector. Its queries are
//   stored transposed, q_t (D, M), so every vector below spans M query rows
//   and no horizontal reduction is ever needed. For each key chunk of the
//   group (at most N keys), and for each tile that visits it:
//     1. partial chunks first ask the generic predicate for a lane mask per
//        key and drop leading and trailing keys no row of the tile may see;
//     2. scores s_t (n, M) = K_chunk (n, D) . q_t (D, M) in register tiles of
//        RK keys x CV vectors (per d: CV loads of q_t, RK broadcasts of K,
//        RK*CV FMAs); masked pairs become -inf and the chunk's max per lane is
//        taken while the tile is still in registers;
//     3. online softmax per lane in the log2 domain (q_t is pre-scaled by
//        scale * log2(e)): new max, alpha = 2^(old max - new max),
//        p = 2^(s - new max) written over s_t, sum = sum * alpha + sum_j p;
//     4. acc_t (D, M) = acc_t * alpha + V_chunk^T (D, n) . p_t (n, M) in
//        register tiles of RD head dims x CV vectors (per key: CV loads of
//        p_t, RD broadcasts of V, RD*CV FMAs); values are staged in panels of
//        RD head dims, so each register tile reads one sequential stream.
//   A chunk's keys and values are read from memory once and reused from
//   cache by every tile of the group; the next chunk's keys are prefetched,
//   and so, a share per chunk, are the queries of the group the thread will
//   most likely run next (TileGroupArgs::prefetch).
//   Every reduction runs in a fixed order, so results do not depend on which
//   thread runs the group.
//
// The SIMD type V provides: Reg, kWidth, zero, load, store, set1, bcast,
// fmadd(a, b, c) = a * b + c, mul, add, sub, max, exp2 (accurate to a few fp32
// ulps, exp2(-inf) = 0), keep(s, lanes) (s where the lane bit is set, -inf
// elsewhere) and finite_or_zero(m) (0 where m is -inf). Everything here is a
// member of a template over V, and each instruction set's V lives in an
// anonymous namespace of its own translation unit, so no code compiled for
// wider instructions is shared with other translation units.
#pragma once

#include <cstdint>

#include "cpu/fast/kernel_args.hpp"

namespace spattn::cpu_fast {

template <class V, int CV, int RK, int RD, int N>
struct TileGroupKernel {
  using Reg = typename V::Reg;
  static constexpr int W = V::kWidth;
  static constexpr int M = W * CV;  // query rows per tile
  static constexpr int kChunk = N;  // most keys per chunk
  static constexpr int kValuePanel = RD;
  static constexpr uint32_t kLaneMask = W >= 32 ? 0xffffffffu : (1u << W) - 1u;
  static_assert(M <= 64, "lane masks are 64-bit");

  // Register-tile height after R in a remainder: the largest power of two
  // below R (6 -> 4 -> 2 -> 1), 0 after 1.
  static constexpr int next_width(int R) {
    int w = 1;
    while (w * 2 < R) w *= 2;
    return R == 1 ? 0 : w;
  }

  static void run(const TileGroupArgs& a) {
    for (int64_t t = 0; t < a.num_tiles; ++t) start_tile(a, a.tiles[t]);
    for (int64_t c = 0; c < a.num_chunks; ++c) {
      const KeyChunk& chunk = a.chunks[c];
      if (c + 1 < a.num_chunks) prefetch_keys(a, a.chunks[c + 1]);
      prefetch_share(a.prefetch, c, a.num_chunks);
      for (int64_t t = 0; t < a.num_tiles; ++t) {
        if ((chunk.tiles >> t) & 1u) visit_chunk(a, a.tiles[t], chunk, (chunk.partial >> t) & 1u);
      }
    }
  }

  static void start_tile(const TileGroupArgs& a, const QueryTile& tile) {
    for (int64_t i = 0; i < a.head_dim * M; i += W) V::store(tile.acc_t + i, V::zero());
    for (int c = 0; c < CV; ++c) {
      V::store(tile.row_max + c * W, V::set1(-__builtin_inff()));
      V::store(tile.row_sum + c * W, V::zero());
    }
  }

  // Pulls the next chunk's key rows into the cache while this chunk runs
  // (values are read as sequential panels and need no help).
  static void prefetch_keys(const TileGroupArgs& a, const KeyChunk& next) {
    const float* k = a.k + (a.keys_by_index ? next.first : next.staged) * a.k_row_stride;
    for (int64_t j = 0; j < next.count; ++j)
      for (int64_t d = 0; d < a.head_dim; d += 16) __builtin_prefetch(k + j * a.k_row_stride + d, 0, 2);
  }

  // Chunk c's share of the rows of `region`.
  static void prefetch_share(const PrefetchRows& region, int64_t c, int64_t num_chunks) {
    if (region.base == nullptr) return;
    const int64_t first = c * region.rows / num_chunks, last = (c + 1) * region.rows / num_chunks;
    for (int64_t i = first; i < last; ++i)
      for (int64_t at = 0; at < region.row_bytes; at += 64)
        __builtin_prefetch(region.base + i * region.row_stride + at, 0, 1);
  }

  static void visit_chunk(const TileGroupArgs& a, const QueryTile& tile, const KeyChunk& chunk,
                          bool partial) {
    int64_t key = chunk.first, staged = chunk.staged, count = chunk.count;
    const uint64_t* bits = nullptr;
    if (partial) {
      a.allowed_bits(tile.mask_context, chunk.first, count, a.bits);
      int64_t lo = 0, hi = count;
      while (lo < hi && a.bits[lo] == 0) ++lo;
      while (hi > lo && a.bits[hi - 1] == 0) --hi;
      if (lo == hi) return;
      key += lo;
      staged += lo;
      count = hi - lo;
      bits = a.bits + lo;
    }
    for (int c = 0; c < CV; ++c) V::store(a.chunk_max + c * W, V::set1(-__builtin_inff()));
    score_span<RK>(a, tile, a.k + (a.keys_by_index ? key : staged) * a.k_row_stride, count, bits,
                   a.scores);
    Reg alpha[CV];
    softmax_chunk(a, tile, count, alpha);
    value_span<RD>(a, staged, count, alpha, 0, tile.acc_t);
  }

  // Score rows in groups of R, then the remainder in smaller groups.
  template <int R>
  static void score_span(const TileGroupArgs& a, const QueryTile& tile, const float* k,
                         int64_t count, const uint64_t* bits, float* s) {
    if constexpr (R > 0) {
      int64_t j = 0;
      for (; j + R <= count; j += R)
        score_rows<R>(a, tile, k + j * a.k_row_stride, bits ? bits + j : nullptr, s + j * M);
      score_span<next_width(R)>(a, tile, k + j * a.k_row_stride, count - j, bits ? bits + j : nullptr,
                                s + j * M);
    }
  }

  // s (R, M) = k (R rows, D) . q_t (D, M), masked by bits when given; folds
  // the rows into the chunk max.
  template <int R>
  static void score_rows(const TileGroupArgs& a, const QueryTile& tile, const float* k,
                         const uint64_t* bits, float* s) {
    const int64_t D = a.head_dim, ks = a.k_row_stride;
    const float* q = tile.q_t;
    Reg acc[R][CV];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
      for (int c = 0; c < CV; ++c) acc[r][c] = V::zero();
    for (int64_t d = 0; d < D; ++d, q += M) {
      Reg qv[CV];
#pragma GCC unroll 8
      for (int c = 0; c < CV; ++c) qv[c] = V::load(q + c * W);
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        const Reg kb = V::bcast(k + r * ks + d);
#pragma GCC unroll 8
        for (int c = 0; c < CV; ++c) acc[r][c] = V::fmadd(kb, qv[c], acc[r][c]);
      }
    }
    if (bits) {
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
        for (int c = 0; c < CV; ++c)
          acc[r][c] = V::keep(acc[r][c], static_cast<uint32_t>(bits[r] >> (c * W)) & kLaneMask);
    }
#pragma GCC unroll 8
    for (int c = 0; c < CV; ++c) {
      Reg m = V::load(a.chunk_max + c * W);
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        V::store(s + r * M + c * W, acc[r][c]);
        m = V::max(m, acc[r][c]);
      }
      V::store(a.chunk_max + c * W, m);
    }
  }

  // Updates the running max and sum, turns the scores into probabilities in
  // place and returns the rescale factors of the accumulators.
  static void softmax_chunk(const TileGroupArgs& a, const QueryTile& tile, int64_t count, Reg* alpha) {
    float* s = a.scores;
    Reg base[CV], sum[CV];
#pragma GCC unroll 8
    for (int c = 0; c < CV; ++c) {
      const Reg old_max = V::load(tile.row_max + c * W);
      const Reg new_max = V::max(old_max, V::load(a.chunk_max + c * W));
      V::store(tile.row_max + c * W, new_max);
      base[c] = V::finite_or_zero(new_max);
      alpha[c] = V::exp2(V::sub(old_max, base[c]));
      sum[c] = V::mul(V::load(tile.row_sum + c * W), alpha[c]);
    }
    for (int64_t j = 0; j < count; ++j) {
#pragma GCC unroll 8
      for (int c = 0; c < CV; ++c) {
        const Reg p = V::exp2(V::sub(V::load(s + j * M + c * W), base[c]));
        V::store(s + j * M + c * W, p);
        sum[c] = V::add(sum[c], p);
      }
    }
#pragma GCC unroll 8
    for (int c = 0; c < CV; ++c) V::store(tile.row_sum + c * W, sum[c]);
  }

  // acc_t = acc_t * alpha + V_chunk^T . p_t, panel by panel: R head dims at a
  // time while they fit, then smaller panels (the staged panel widths).
  template <int R>
  static void value_span(const TileGroupArgs& a, int64_t staged, int64_t count, const Reg* alpha,
                         int64_t d0, float* acc_t) {
    if constexpr (R > 0) {
      int64_t d = d0;
      for (; d + R <= a.head_dim; d += R)
        value_dims<R>(a.v_panels + d * a.staged_keys + staged * R, count, a.scores, alpha,
                      acc_t + d * M);
      value_span<next_width(R)>(a, staged, count, alpha, d, acc_t);
    }
  }

  // acc (R, M) = acc * alpha + v (count, R)^T . p (count, M), v a panel.
  template <int R>
  static void value_dims(const float* v, int64_t count, const float* p, const Reg* alpha,
                         float* acc_out) {
    Reg acc[R][CV];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
      for (int c = 0; c < CV; ++c) acc[r][c] = V::mul(V::load(acc_out + r * M + c * W), alpha[c]);
    for (int64_t j = 0; j < count; ++j, p += M, v += R) {
      Reg pv[CV];
#pragma GCC unroll 8
      for (int c = 0; c < CV; ++c) pv[c] = V::load(p + c * W);
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        const Reg vb = V::bcast(v + r);
#pragma GCC unroll 8
        for (int c = 0; c < CV; ++c) acc[r][c] = V::fmadd(vb, pv[c], acc[r][c]);
      }
    }
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
      for (int c = 0; c < CV; ++c) V::store(acc_out + r * M + c * W, acc[r][c]);
  }
};

// A loop of independent FMA chains that keeps every FMA unit busy: returns the
// floating-point operations performed (2 per lane per FMA).
template <class V, int kChains>
struct FmaLoop {
  using Reg = typename V::Reg;
  static double run(int64_t iterations) {
    Reg acc[kChains];
#pragma GCC unroll 32
    for (int c = 0; c < kChains; ++c) acc[c] = V::set1(1.0f + 1e-3f * static_cast<float>(c));
    const Reg mul = V::set1(0.99999f), add = V::set1(1e-6f);
    for (int64_t it = 0; it < iterations; ++it)
#pragma GCC unroll 32
      for (int c = 0; c < kChains; ++c) acc[c] = V::fmadd(acc[c], mul, add);
    Reg total = acc[0];
#pragma GCC unroll 32
    for (int c = 1; c < kChains; ++c) total = V::add(total, acc[c]);
    alignas(64) float lanes[V::kWidth];
    V::store(lanes, total);
    // The result feeds the return value so the loop cannot be removed; it is
    // always positive and finite, so the sign test never changes the count.
    const double flops = 2.0 * V::kWidth * kChains * static_cast<double>(iterations);
    return lanes[0] > 0.0f ? flops : -flops;
  }
};

}  // namespace spattn::cpu_fast
