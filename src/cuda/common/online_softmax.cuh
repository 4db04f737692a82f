// cuda/common/online_softmax.cuh - the fp32 online softmax over a score tile
// and the final writes of O / l and the LSE (or, in the permuted pass of a
// dilated split, their merge into the rest pass's), shared by the sm80
// (mma.sync) and sm90 (wgmma) forward kernels, which hold S and O in the same
// per-warp m16n8 accumulator layout (see tile_mask.cuh).
//
// The traits Tr provide T, kHeadDim, kMAtoms, kNAtoms, kDAtoms (8-wide columns
// of O), kWarpRows and kExp2PolyEvery (every kExp2PolyEvery-th 8-key column
// of a tile takes its exponentials from exp2_poly on the FMA pipe, the rest
// from ex2.approx; 0: none); `warp` is the index of the warp among those computing
// the query tile (warp w owns tile rows [w * kWarpRows, (w + 1) * kWarpRows)).
#pragma once

#include <cstdint>

#include "cuda/common/exp2_poly.cuh"
#include "cuda/common/fwd_params.hpp"
#include "cuda/common/ptx_sm80.cuh"
#include "cuda/common/row_merge.cuh"
#include "cuda/common/sequence_span.hpp"
#include "cuda/common/tile_mask.cuh"

namespace spattn::cuda_detail {

constexpr float kLn2 = 0.6931471805599453f;

// The max (Op = Max) or sum (Op = Sum) of this thread's values of row half
// `half` of atom `a`, reduced as a tree (depth log2 of the count) rather than
// a chain, which keeps the dependent latency off the softmax's critical path.
enum class RowOp { Max, Sum };
template <typename Tr, RowOp Op>
__device__ __forceinline__ float thread_row_reduce(const float (&s)[Tr::kMAtoms][Tr::kNAtoms][4], int a, int half) {
  const auto combine = [](float x, float y) { return Op == RowOp::Max ? fmaxf(x, y) : x + y; };
  float v[Tr::kNAtoms];
#pragma unroll
  for (int n = 0; n < Tr::kNAtoms; ++n) v[n] = combine(s[a][n][2 * half], s[a][n][2 * half + 1]);
#pragma unroll
  for (int width = 1; width < Tr::kNAtoms; width *= 2)
#pragma unroll
    for (int n = 0; n + width < Tr::kNAtoms; n += 2 * width) v[n] = combine(v[n], v[n + width]);
  return v[0];
}

// exp2(x) for 8-key column n of a tile: exp2_poly on every kEvery-th column,
// ex2.approx elsewhere (kEvery = 0: everywhere).
template <int kEvery>
__device__ __forceinline__ float column_exp2(float x, int n) {
  if constexpr (kEvery > 0) {
    if (n % kEvery == kEvery - 1) return exp2_poly(x);
  }
  return fast_exp2(x);
}

// How far (log2 units) a row's scores may rise above its reference max m
// before m moves: P = exp2(s * scale_log2 - m) then stays <= 2^8, well within
// bf16, fp16 and the fp32 sums, and O is rescaled only on the rare tiles
// where some row's max jumps by more than that. The result is the same
// softmax: l and O share m, and the LSE is m + log2(l).
constexpr float kStaleMaxSlack = 8.0f;

// Online softmax over one tile, scores only: updates the reference max m
// (log2 units of the scaled score; kStaleMaxSlack) and l, turns s into
// P = exp2(s * scale_log2 - m), and leaves in `correction` the factor O must
// be scaled by. Returns whether some row of the warp moved its m: otherwise
// every correction is exactly 1 (0 for a row still without an allowed key,
// whose O is 0) and rescaling O can be skipped (exact).
template <typename Tr>
__device__ __forceinline__ bool softmax_scores(float (&s)[Tr::kMAtoms][Tr::kNAtoms][4], float (&m)[Tr::kMAtoms][2],
                                               float (&l)[Tr::kMAtoms][2], float scale_log2,
                                               float (&correction)[Tr::kMAtoms][2]) {
  bool max_moved = false;
#pragma unroll
  for (int a = 0; a < Tr::kMAtoms; ++a) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      float row_max = thread_row_reduce<Tr, RowOp::Max>(s, a, half);
      row_max = fmaxf(row_max, __shfl_xor_sync(0xffffffffu, row_max, 1));
      row_max = fmaxf(row_max, __shfl_xor_sync(0xffffffffu, row_max, 2));
      const float seen = row_max * scale_log2;
      const float m_new = seen > m[a][half] + kStaleMaxSlack ? seen : m[a][half];  // -inf + 8 = -inf
      // While every score so far is masked, m stays -inf; subtract 0 instead so
      // that exp2 sees -inf - 0 = -inf (P = 0), never -inf + inf.
      const float m_used = m_new == kNegInf ? 0.0f : m_new;
      correction[a][half] = fast_exp2(m[a][half] - m_used);
      max_moved |= m_new != m[a][half];
      m[a][half] = m_new;
#pragma unroll
      for (int n = 0; n < Tr::kNAtoms; ++n)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          s[a][n][2 * half + c] = column_exp2<Tr::kExp2PolyEvery>(fmaf(s[a][n][2 * half + c], scale_log2, -m_used), n);
        }
      l[a][half] = fmaf(l[a][half], correction[a][half], thread_row_reduce<Tr, RowOp::Sum>(s, a, half));
    }
  }
  return __any_sync(0xffffffffu, max_moved);
}

// O *= correction, row by row.
template <typename Tr>
__device__ __forceinline__ void rescale_output(float (&o)[Tr::kMAtoms][Tr::kDAtoms][4],
                                               const float (&correction)[Tr::kMAtoms][2]) {
#pragma unroll
  for (int a = 0; a < Tr::kMAtoms; ++a)
#pragma unroll
    for (int d = 0; d < Tr::kDAtoms; ++d)
#pragma unroll
      for (int c = 0; c < 4; ++c) o[a][d][c] *= correction[a][c >> 1];
}

// Online softmax over one tile: softmax_scores, then O rescaled where a row's
// max moved (on its own no measurable change on dense D = 128 in the sm80
// kernel, but exact and free when nothing moved).
template <typename Tr>
__device__ __forceinline__ void softmax_update(float (&s)[Tr::kMAtoms][Tr::kNAtoms][4],
                                               float (&o)[Tr::kMAtoms][Tr::kDAtoms][4], float (&m)[Tr::kMAtoms][2],
                                               float (&l)[Tr::kMAtoms][2], float scale_log2) {
  float correction[Tr::kMAtoms][2];
  if (softmax_scores<Tr>(s, m, l, scale_log2, correction)) rescale_output<Tr>(o, correction);
}

// The end of one row of this thread (atom a, half): the row sum over the four
// threads of its quad, the factor 1 / sum that normalises O (0 for a row with
// no allowed key, whose sum is 0) and the natural-log LSE (-inf for such a
// row). A NaN sum (a NaN or +inf score) keeps the row NaN in both.
struct RowEnd {
  float inv, lse;
};
template <typename Tr>
__device__ __forceinline__ RowEnd finish_row(const float (&m)[Tr::kMAtoms][2], const float (&l)[Tr::kMAtoms][2], int a,
                                             int half) {
  float sum = l[a][half];
  sum += __shfl_xor_sync(0xffffffffu, sum, 1);
  sum += __shfl_xor_sync(0xffffffffu, sum, 2);
  const bool empty = sum == 0.0f;
  return {empty ? 0.0f : 1.0f / sum, empty ? kNegInf : (m[a][half] + __log2f(sum)) * kLn2};
}

// One butterfly step of quad_transpose with lane ^ `partner`: the thread
// whose lane has bit `partner` set sends (lo0, lo1) and receives the
// partner's (hi0, hi1) into them; its partner sends (hi0, hi1) and receives
// into them.
__device__ __forceinline__ void quad_exchange(uint32_t& lo0, uint32_t& lo1, uint32_t& hi0, uint32_t& hi1,
                                              int lane, int partner) {
  const bool upper = lane & partner;
  const uint32_t give0 = upper ? lo0 : hi0, give1 = upper ? lo1 : hi1;
  const uint32_t got0 = __shfl_xor_sync(0xffffffffu, give0, partner);
  const uint32_t got1 = __shfl_xor_sync(0xffffffffu, give1, partner);
  if (upper) {
    lo0 = got0;
    lo1 = got1;
  } else {
    hi0 = got0;
    hi1 = got1;
  }
}

// Transposes four 32-bit values across the four threads of a quad: thread t
// holds x[u] = the value of column group u from row t of a 4 x 4 matrix and
// ends with x[u] = the value of column group t from row u. Two butterfly
// exchanges (partners t ^ 2 on the pairs (x0, x1) / (x2, x3), then t ^ 1 on
// (x0, x2) / (x1, x3)); every lane of the warp takes part.
__device__ __forceinline__ void quad_transpose(uint32_t (&x)[4], int lane) {
  quad_exchange(x[0], x[1], x[2], x[3], lane, 2);
  quad_exchange(x[0], x[2], x[1], x[3], lane, 1);
}

// What the permuted pass of a dilated split reads of a row of the rest's
// output before merging into it: kRestAtoms 8-column atoms at a time (the
// whole row up to head dim 128; at D = 256, where a consumer's O takes 128
// registers, a group of four: a row there made ptxas spill 700 bytes), as the
// 32-bit words this thread overwrites: in the input type 4 words per group of
// four atoms (atom 4 g + lane % 4 whole, as quad_transpose leaves it), in
// fp32 a float2 per atom (its columns 2 (lane % 4), + 1).
template <typename Tr>
struct RestWords {
  static constexpr int kRestAtoms = Tr::kHeadDim <= 128 ? Tr::kDAtoms : 4;
  uint32_t word[2 * kRestAtoms];  // the input type uses the first kRestAtoms

  // Reads atoms [first, first + kRestAtoms) of the row at `row_offset`.
  __device__ __forceinline__ void load(const FwdParams& p, int64_t row_offset, int first, int lane) {
    using T = typename Tr::T;
    if (p.out_f32) {
      const float* out = static_cast<const float*>(p.out.data) + row_offset + (lane & 3) * 2;
#pragma unroll
      for (int d = 0; d < kRestAtoms; ++d) {
        const float2 x = *reinterpret_cast<const float2*>(out + (first + d) * 8);
        word[2 * d] = __float_as_uint(x.x);
        word[2 * d + 1] = __float_as_uint(x.y);
      }
      return;
    }
    const T* out = static_cast<const T*>(p.out.data) + row_offset;
    const bool aligned = (reinterpret_cast<uintptr_t>(out) & 15u) == 0;
#pragma unroll
    for (int g = 0; g < kRestAtoms / 4; ++g) {
      const T* atom = out + (first + 4 * g + (lane & 3)) * 8;
      if (aligned) {
        const uint4 v = *reinterpret_cast<const uint4*>(atom);
        word[4 * g] = v.x, word[4 * g + 1] = v.y, word[4 * g + 2] = v.z, word[4 * g + 3] = v.w;
      } else {
#pragma unroll
        for (int u = 0; u < 4; ++u) word[4 * g + u] = *reinterpret_cast<const uint32_t*>(atom + 2 * u);
      }
    }
  }
};

// O / l to `out` (input type or fp32) and the LSE, rows of the sequence only.
// In the input type, the four threads of a row's quad first transpose their
// values, four 8-column atoms at a time, so that each thread holds one atom's
// 8 consecutive columns and writes them with one 16-byte store (where the
// row is 16-byte aligned; else four 4-byte stores): the accumulator layout
// itself gives each thread 2 columns per atom, and storing those as they
// are took 4x the store instructions, each half a sector per row, which made
// the epilogue of short rows slow (same-run bound on an H100: sm90 kernel
// without its output stores, 32K, D = 128: window 512 +19%, BigBird +11%).
// kMerge (the permuted pass of a dilated split, FwdParams::merge_into_out):
// row i of query head h is row h % residue_rate + i * residue_rate of out
// and the LSE, which hold the rest pass's result; a row with a key merges
// into them (RowMerge; its O rounded to the output type first), one without
// leaves them as they are. A row's LSE and words in the rest are read
// together (RestWords: the whole row up to head dim 128), before any of them
// is used or written, so the epilogue waits for memory once per row: read
// one after another, after the writes before them, they cost a unit of the
// permuted pass several memory latencies.
template <typename Tr, bool kMerge = false>
__device__ __forceinline__ void write_output(const FwdParams& p, const float (&o)[Tr::kMAtoms][Tr::kDAtoms][4],
                                             const float (&m)[Tr::kMAtoms][2], const float (&l)[Tr::kMAtoms][2],
                                             const SequenceSpan& seq, int64_t h, int64_t q0, int warp, int lane) {
  using T = typename Tr::T;
  static_assert(Tr::kDAtoms % 4 == 0, "the head dim is a multiple of 32");
#pragma unroll
  for (int a = 0; a < Tr::kMAtoms; ++a) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const RowEnd end = finish_row<Tr>(m, l, a, half);
      const int64_t row = q0 + warp * Tr::kWarpRows + a * 16 + (lane >> 2) + half * 8;
      const int64_t out_row = kMerge ? p.head_residue(h) + (seq.q_first + row) * p.residue_rate : seq.q_first + row;
      const int64_t row_offset = p.out.row_offset(seq.batch, h, out_row);
      bool writes = seq.has_row(row);
      float inv = end.inv, lse = end.lse, w_rest = 0.0f;
      constexpr int kRestAtoms = RestWords<Tr>::kRestAtoms;
      RestWords<Tr> rest;
      if constexpr (kMerge) {
        writes = writes && lse != kNegInf;  // no key here: the rest's result stands
        // The rest's LSE, read by the lane that writes the merged one (no
        // lane reads what another writes) and handed to its quad, and its
        // first words, both read before either is used (neither where the
        // rest keeps no block: its rows are O = 0, LSE = -inf).
        float rest_lse = kNegInf;
        if (writes && p.rest_keeps_blocks) {
          if ((lane & 3) == 0) rest_lse = *p.lse_at(seq.batch, h, out_row);
          rest.load(p, row_offset, 0, lane);
        }
        rest_lse = __shfl_sync(0xffffffffu, rest_lse, lane & ~3);
        if (writes) {
          const RowMerge merge = RowMerge::of(rest_lse, lse);
          inv *= merge.w_b;
          lse = merge.lse;
          w_rest = merge.w_a;
        }
      }
      if (p.out_f32) {  // the same in every lane: no lane leaves a shuffle
        if (!writes) continue;
        float* out = static_cast<float*>(p.out.data) + row_offset + (lane & 3) * 2;
#pragma unroll
        for (int d = 0; d < Tr::kDAtoms; ++d) {
          if (kMerge && w_rest != 0.0f && d > 0 && d % kRestAtoms == 0) rest.load(p, row_offset, d, lane);
          float2 x = make_float2(o[a][d][2 * half] * inv, o[a][d][2 * half + 1] * inv);
          const int at = d % kRestAtoms;
          if (kMerge && w_rest != 0.0f)
            x = make_float2(x.x + w_rest * __uint_as_float(rest.word[2 * at]),
                            x.y + w_rest * __uint_as_float(rest.word[2 * at + 1]));
          *reinterpret_cast<float2*>(out + d * 8) = x;
        }
      } else {
        T* out = static_cast<T*>(p.out.data) + row_offset;
        const bool aligned = (reinterpret_cast<uintptr_t>(out) & 15u) == 0;
#pragma unroll
        for (int g = 0; g < Tr::kDAtoms / 4; ++g) {
          if (kMerge && w_rest != 0.0f && g > 0 && (4 * g) % kRestAtoms == 0) rest.load(p, row_offset, 4 * g, lane);
          uint32_t x[4];
#pragma unroll
          for (int u = 0; u < 4; ++u)
            x[u] = pack2<T>(o[a][4 * g + u][2 * half] * inv, o[a][4 * g + u][2 * half + 1] * inv);
          quad_transpose(x, lane);
          if (!writes) continue;
          T* atom = out + (4 * g + (lane & 3)) * 8;
          if (kMerge && w_rest != 0.0f) {
            const int at = (4 * g) % kRestAtoms;
#pragma unroll
            for (int u = 0; u < 4; ++u) {
              const float2 before = unpack2<T>(rest.word[at + u]), add = unpack2<T>(x[u]);
              x[u] = pack2<T>(add.x + w_rest * before.x, add.y + w_rest * before.y);
            }
          }
          if (aligned) {
            *reinterpret_cast<uint4*>(atom) = make_uint4(x[0], x[1], x[2], x[3]);
          } else {
#pragma unroll
            for (int u = 0; u < 4; ++u) *reinterpret_cast<uint32_t*>(atom + 2 * u) = x[u];
          }
        }
        if (!writes) continue;
      }
      if (p.lse != nullptr && (lane & 3) == 0) *p.lse_at(seq.batch, h, out_row) = lse;
    }
  }
}

// One piece of a split row: O / l (fp32) and the natural-log LSE of the tile
// rows holding a query of the sequence (`seq`, tile rows from query row q0)
// into the partial-result slot starting at tile row `first`. The combine step
// reads only those rows, so the others are not written: a decoding call's
// tile holds one query row (or a few, packed), and writing all of its rows
// was most of a piece's stores.
template <typename Tr>
__device__ __forceinline__ void write_partial(const FwdParams& p, const float (&o)[Tr::kMAtoms][Tr::kDAtoms][4],
                                              const float (&m)[Tr::kMAtoms][2], const float (&l)[Tr::kMAtoms][2],
                                              const SequenceSpan& seq, int64_t q0, int64_t first, int warp,
                                              int lane) {
#pragma unroll
  for (int a = 0; a < Tr::kMAtoms; ++a) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const RowEnd end = finish_row<Tr>(m, l, a, half);
      const int tile_row = warp * Tr::kWarpRows + a * 16 + (lane >> 2) + half * 8;
      if (!seq.has_row(q0 + tile_row)) continue;
      const int64_t row = first + tile_row;
      float* out = p.partial_o + row * Tr::kHeadDim + (lane & 3) * 2;
#pragma unroll
      for (int d = 0; d < Tr::kDAtoms; ++d)
        *reinterpret_cast<float2*>(out + d * 8) =
            make_float2(o[a][d][2 * half] * end.inv, o[a][d][2 * half + 1] * end.inv);
      if ((lane & 3) == 0) p.partial_lse[row] = end.lse;
    }
  }
}

}  // namespace spattn::cuda_detail
