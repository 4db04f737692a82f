// tile_grad_kernel.hpp - the three products of the CPU backward pass on one
// tile (tile_grad.hpp has their contracts), written once over the SIMD
// abstraction of cpu/fast/tile_kernel.hpp and instantiated per instruction
// set (cpu/fast/simd_avx2.cpp, simd_avx512.cpp; AVX-512 head dims that are
// not multiples of 64 take the AVX2 instance), as register-blocked
// micro-kernels:
//   scores S = Q K^T and dP = dO V^T: register tiles of RI rows x CK key
//     vectors (per d: CK loads of the transposed keys, RI broadcasts of the
//     rows, RI * CK FMAs), then per row P = 2^(S scale log2 e - lse log2 e)
//     and dS = P (dP - delta), masked pairs and keys past the tile set to 0;
//   dq += dS K: register tiles of RI rows x CD head-dim vectors over the keys;
//   dk += dS^T Q and dv += P^T dO: register tiles of RJ keys x CD head-dim
//     vectors over the rows.
// Rows are computed in whole register tiles (the scratch holds kTileRows
// rows; rows past the tile come out 0 in P and dS and are never stored), so
// the head dim must be a multiple of CD vectors (tile_grad.cpp falls back to
// plain loops otherwise). Multiplying every pair, masked ones too, is only
// exact when the tile's inputs are finite: the caller takes the plain loops
// for a tile holding a non-finite value (they skip zero weights, so masked
// pairs are never read).
#pragma once

#include <cstdint>

#include "cpu/backward/tile_grad.hpp"

namespace spattn::cpu_backward {

template <class V, int RI, int CK, int RJ, int CD>
struct TileGradKernel {
  using Reg = typename V::Reg;
  static constexpr int W = V::kWidth;
  static constexpr int kKeyVectors = kTileKeys / W;
  static_assert(kTileKeys % (W * CK) == 0 && kTileRows % RI == 0 && kTileKeys % RJ == 0, "tile shapes");
  static constexpr float kLog2e = 1.4426950408889634f;

  static int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

  // out (rows x kTileKeys) = a (rows x D) b_t (D x kTileKeys), every key column.
  static void products(const float* a, const float* b_t, int64_t rows, int64_t head_dim, float* out) {
    for (int64_t i0 = 0; i0 < round_up(rows, RI); i0 += RI)
      for (int k0 = 0; k0 < kKeyVectors; k0 += CK) {
        Reg acc[RI][CK];
        for (int r = 0; r < RI; ++r)
          for (int c = 0; c < CK; ++c) acc[r][c] = V::zero();
        for (int64_t d = 0; d < head_dim; ++d) {
          Reg col[CK];
          for (int c = 0; c < CK; ++c) col[c] = V::load(b_t + d * kTileKeys + (k0 + c) * W);
          for (int r = 0; r < RI; ++r) {
            const Reg x = V::bcast(a + (i0 + r) * head_dim + d);
            for (int c = 0; c < CK; ++c) acc[r][c] = V::fmadd(x, col[c], acc[r][c]);
          }
        }
        for (int r = 0; r < RI; ++r)
          for (int c = 0; c < CK; ++c) V::store(out + (i0 + r) * kTileKeys + (k0 + c) * W, acc[r][c]);
      }
  }

  // Lane bits of keys [j0, j0 + W) a row keeps: below `keys` and in its key mask.
  static uint32_t kept_lanes(uint64_t row_keys, int64_t j0, int64_t keys) {
    const uint64_t below = keys >= kTileKeys ? ~uint64_t{0} : (uint64_t{1} << keys) - 1;
    return static_cast<uint32_t>(((row_keys & below) >> j0) & ((uint64_t{1} << W) - 1));
  }

  static void probabilities(const float* q, const float* d_out, const float* k_t, const float* v_t,
                            const float* lse, const float* delta, const uint64_t* allowed, int64_t rows,
                            int64_t keys, int64_t head_dim, float scale, float* p, float* ds) {
    products(q, k_t, rows, head_dim, p);
    products(d_out, v_t, rows, head_dim, ds);
    const Reg zero = V::zero();
    for (int64_t i = 0; i < round_up(rows, RI); ++i) {
      float* s = p + i * kTileKeys;
      float* dp = ds + i * kTileKeys;
      if (i >= rows || lse[i] == -__builtin_inff()) {  // past the tile, or a row with no allowed key
        for (int v = 0; v < kKeyVectors; ++v) {
          V::store(s + v * W, zero);
          V::store(dp + v * W, zero);
        }
        continue;
      }
      const Reg row_scale = V::set1(scale * kLog2e), row_lse = V::set1(lse[i] * kLog2e);
      const Reg row_delta = V::set1(delta[i]);
      const uint64_t row_keys = allowed ? allowed[i] : ~uint64_t{0};
      for (int v = 0; v < kKeyVectors; ++v) {
        const uint32_t lanes = kept_lanes(row_keys, v * W, keys);
        // keep() puts -inf in the dropped lanes: 2^-inf = 0.
        const Reg weight = V::exp2(V::keep(V::sub(V::mul(V::load(s + v * W), row_scale), row_lse), lanes));
        V::store(s + v * W, weight);
        const Reg grad = V::mul(weight, V::sub(V::load(dp + v * W), row_delta));
        V::store(dp + v * W, lanes == 0 ? zero : V::finite_or_zero(V::keep(grad, lanes)));
      }
    }
  }

  static void accumulate_rows(const float* a, const float* b, int64_t rows, int64_t keys, int64_t head_dim,
                              float* acc) {
    for (int64_t i0 = 0; i0 < round_up(rows, RI); i0 += RI)
      for (int64_t d0 = 0; d0 < head_dim; d0 += CD * W) {
        Reg sum[RI][CD];
        for (int r = 0; r < RI; ++r)
          for (int c = 0; c < CD; ++c) sum[r][c] = V::load(acc + (i0 + r) * head_dim + d0 + c * W);
        for (int64_t j = 0; j < keys; ++j) {
          Reg row[CD];
          for (int c = 0; c < CD; ++c) row[c] = V::load(b + j * head_dim + d0 + c * W);
          for (int r = 0; r < RI; ++r) {
            const Reg x = V::bcast(a + (i0 + r) * kTileKeys + j);
            for (int c = 0; c < CD; ++c) sum[r][c] = V::fmadd(x, row[c], sum[r][c]);
          }
        }
        for (int r = 0; r < RI; ++r)
          for (int c = 0; c < CD; ++c) V::store(acc + (i0 + r) * head_dim + d0 + c * W, sum[r][c]);
      }
  }

  static void accumulate_keys(const float* a, const float* b, int64_t rows, int64_t keys, int64_t head_dim,
                              float* acc) {
    for (int64_t j0 = 0; j0 < round_up(keys, RJ); j0 += RJ)
      for (int64_t d0 = 0; d0 < head_dim; d0 += CD * W) {
        Reg sum[RJ][CD];
        for (int r = 0; r < RJ; ++r)
          for (int c = 0; c < CD; ++c) sum[r][c] = V::load(acc + (j0 + r) * head_dim + d0 + c * W);
        for (int64_t i = 0; i < rows; ++i) {
          Reg row[CD];
          for (int c = 0; c < CD; ++c) row[c] = V::load(b + i * head_dim + d0 + c * W);
          for (int r = 0; r < RJ; ++r) {
            const Reg x = V::bcast(a + i * kTileKeys + j0 + r);
            for (int c = 0; c < CD; ++c) sum[r][c] = V::fmadd(x, row[c], sum[r][c]);
          }
        }
        for (int r = 0; r < RJ; ++r)
          for (int c = 0; c < CD; ++c) V::store(acc + (j0 + r) * head_dim + d0 + c * W, sum[r][c]);
      }
  }

  static constexpr TileGradOps ops(const char* name) {
    return TileGradOps{name, CD * W, &probabilities, &accumulate_rows, &accumulate_keys};
  }
};

}  // namespace spattn::cpu_backward
