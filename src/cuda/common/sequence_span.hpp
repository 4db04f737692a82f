// cuda/common/sequence_span.hpp - where batch element b of a forward problem
// lies in its tensors: a regular batch uses batch index b and the full
// lengths; a packed variable-length batch (FwdParams::varlen) reads the rows
// of sequence b from cu_seqlens on the device.
#pragma once

#include <cstdint>

#include "cuda/common/fwd_params.hpp"

namespace spattn::cuda_detail {

struct SequenceSpan {
  int64_t batch = 0;                 // batch index into the tensors
  int64_t q_first = 0, k_first = 0;  // first row of the sequence in q / out / lse and in k / v
  int64_t q_len = 0, k_len = 0;
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
  return s;
}

}  // namespace spattn::cuda_detail
