// cuda/bwd_sm80/bwd_products.cuh - the two tile products of the backward
// kernels on mma.sync m16n8k16 (fp32 accumulation), for one warp.
//
// Fragment layouts (g = lane / 4, t = lane % 4; ptx_sm80.cuh): the C tile of
// an m16n8 product holds rows g (c0, c1) and g + 8 (c2, c3), columns 2t,
// 2t + 1. Every tile in shared memory is row-major with D contiguous: a row
// per key (K, V) or per query (Q, d_out).
//
//   multiply_rows_by_rows:    acc (16 x 8 kAtoms) += A (16 rows) B (8 kAtoms
//       rows)^T over D. A's rows are the warp's own (ldmatrix: the A
//       fragment), B's rows are the product's columns (ldmatrix of rows: the
//       "col" B fragment). The dK/dV kernel forms S^T = K Q^T and
//       dP^T = V dO^T with it, the dQ kernel S = Q K^T and dP = dO V^T.
//   multiply_weights_by_rows: acc (16 x D) += W (16 x 8 kAtoms) B (8 kAtoms
//       rows x D). W is a C tile of the product above (P or dS) rounded to
//       T: two adjacent 8-column C atoms are one 16 x 16 A fragment; B's
//       rows are read transposed (ldmatrix .trans). dV += P^T dO,
//       dK += dS^T Q, dQ += dS K.
#pragma once

#include <cstdint>

#include "cuda/bwd_sm80/bwd_tile_io.cuh"
#include "cuda/common/ptx_sm80.cuh"

namespace spattn::cuda_detail {

// acc[n] += A(rows a_row0 .. a_row0 + 15) B(rows 8n .. 8n + 7)^T over the
// head dim, for the first 8 kAtoms rows of the tile at sB (a 16-row multiple
// further into a tile: a part of its columns).
template <typename Tr, int kAtoms>
__device__ __forceinline__ void multiply_rows_by_rows(float (&acc)[kAtoms][4], uint32_t sA, int a_row0, uint32_t sB,
                                                      int lane) {
  static_assert(kAtoms % 2 == 0, "B rows in pairs of 8-row atoms");
  using T = typename Tr::T;
  using Step = BwdFragStep<Tr>;
  // Lanes 0-15 address rows 0-15 at chunk 0 and lanes 16-31 at chunk 1 (a0..a3);
  // for B, lanes 8j..8j+7 address rows 8 (j / 2) + 0..7 at chunk j % 2 (b0, b1 of
  // two 8-row atoms).
  const uint32_t a_off = bwd_tile_address<Tr>(0, a_row0 + (lane & 15), lane >> 4);
  const uint32_t b_off = bwd_tile_address<Tr>(0, (lane & 7) + ((lane >> 4) << 3), (lane >> 3) & 1);
#pragma unroll
  for (int ks = 0; ks < Tr::kHeadDim / 16; ++ks) {
    uint32_t a[4];
    ldmatrix_x4(a, sA + (a_off ^ Step::chunks(ks)));
    const uint32_t b_at = sB + (b_off ^ Step::chunks(ks));
#pragma unroll
    for (int np = 0; np < kAtoms / 2; ++np) {
      uint32_t b[4];
      ldmatrix_x4(b, b_at + np * Step::kRows16);
      mma_16816<T>(acc[2 * np], a, b[0], b[1]);
      mma_16816<T>(acc[2 * np + 1], a, b[2], b[3]);
    }
  }
}

// acc[d] += W B: W (16 x 8 kAtoms, C layout, rounded to T here) times the
// 8 kAtoms x D rows of the tile at sB.
template <typename Tr, int kAtoms>
__device__ __forceinline__ void multiply_weights_by_rows(float (&acc)[Tr::kDAtoms][4], const float (&w)[kAtoms][4],
                                                         uint32_t sB, int lane) {
  static_assert(kAtoms % 2 == 0, "W in 16-column A fragments");
  using T = typename Tr::T;
  using Step = BwdFragStep<Tr>;
  // Transposed: lanes 8j..8j+7 address rows 8 (j % 2) + 0..7 at chunk j / 2
  // (b0, b1 of two 8-column atoms of D).
  const uint32_t b_off = bwd_tile_address<Tr>(0, (lane & 7) + (((lane >> 3) & 1) << 3), lane >> 4);
#pragma unroll
  for (int kk = 0; kk < kAtoms / 2; ++kk) {
    uint32_t a[4];
    a[0] = pack2<T>(w[2 * kk][0], w[2 * kk][1]);
    a[1] = pack2<T>(w[2 * kk][2], w[2 * kk][3]);
    a[2] = pack2<T>(w[2 * kk + 1][0], w[2 * kk + 1][1]);
    a[3] = pack2<T>(w[2 * kk + 1][2], w[2 * kk + 1][3]);
#pragma unroll
    for (int dp = 0; dp < Tr::kDAtoms / 2; ++dp) {
      uint32_t b[4];
      ldmatrix_x4_trans(b, sB + (b_off ^ Step::chunks(dp)) + kk * Step::kRows16);
      mma_16816<T>(acc[2 * dp], a, b[0], b[1]);
      mma_16816<T>(acc[2 * dp + 1], a, b[2], b[3]);
    }
  }
}

}  // namespace spattn::cuda_detail
