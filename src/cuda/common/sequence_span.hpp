// cuda/common/sequence_span.hpp - where batch element b of a forward problem
// lies in its tensors: a regular batch uses batch index b and the full
// lengths; a packed variable-length batch (FwdParams::varlen) reads the rows
// of sequence b from cu_seqlens on the device.
//
// The plan's query tiles are tiles of mask rows. A regular batch's mask has
// one row per query row; a varlen batch's square mask (varlen_mask) has one
// row per position, and sequence b's query row i sits at position
// i + Lk(b) - Lq(b) (bottom-right alignment, Lq(b) <= Lk(b)).
// `mask_row_offset` is that difference: the query rows of the tile starting
// at mask row m0 start at m0 - mask_row_offset, and may begin before the
// sequence's first query. (A regular batch with Lq < Lk has offset 0 but
// still evaluates its pattern at position i + Lk - Lq: its mask rows are
// query rows.)
#pragma once

#include <cstdint>

#include "cuda/common/fwd_params.hpp"

namespace spattn::cuda_detail {

struct SequenceSpan {
  int64_t batch = 0;                 // batch index into the tensors
  int64_t q_first = 0, k_first = 0;  // first row of the sequence in q / out / lse and in k / v
  int64_t q_len = 0, k_len = 0;
  int64_t mask_row_offset = 0;       // mask row of query row 0 (see above)

  // Whether query row i (of this sequence) exists.
  __device__ __forceinline__ bool has_row(int64_t i) const { return i >= 0 && i < q_len; }
  // Whether a tile of `rows` query rows starting at query row q0 holds one.
  __device__ __forceinline__ bool tile_has_rows(int64_t q0, int64_t rows) const {
    return q_len > 0 && q0 < q_len && q0 + rows > 0;
  }
};

__device__ __forceinline__ SequenceSpan sequence_span(const FwdParams& p, int64_t b) {
  SequenceSpan s;
  if (p.varlen.cu_seqlens_q == nullptr) {
    s.batch = b;
    s.q_len = p.q_len;
    s.k_len = p.k_len;
    return s;
  }
  s.q_first = p.varlen.cu_seqlens_q[b];
  s.k_first = p.varlen.cu_seqlens_k[b];
  s.q_len = p.varlen.cu_seqlens_q[b + 1] - s.q_first;
  s.k_len = p.varlen.cu_seqlens_k[b + 1] - s.k_first;
  s.mask_row_offset = s.k_len - s.q_len;
  return s;
}

}  // namespace spattn::cuda_detail
