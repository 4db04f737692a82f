// python/csrc/attention_varlen_ops.cpp - the spattn::attention_varlen operator
// and its CPU kernel.
//
// Packed variable-length batches as FlashAttention's varlen API: q
// (total_q, Hq, D), k and v (total_k, Hkv, D), int32 cu_seqlens_q/k (batch + 1)
// on the device of q, max_seqlen_q/k; the mask crosses as for
// spattn::attention (its arrays, lengths, block sizes and encoded pattern), built
// for the longest sequence. Returns (out, lse): out with the strides of q, lse
// (Hq, total_q) fp32. The CPU kernel rebuilds the mask on the host and runs
// attention_varlen, which checks cu_seqlens and runs each sequence alone.
#include <torch/library.h>

#include "attention_op.hpp"
#include "attention_varlen_op.hpp"
#include "tensor_bridge.hpp"

namespace spattn::torch_bridge {
namespace {

std::tuple<at::Tensor, at::Tensor> attention_varlen_cpu(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& cu_seqlens_q,
    const at::Tensor& cu_seqlens_k, int64_t max_seqlen_q, int64_t max_seqlen_k, int64_t mask_q_len,
    int64_t mask_k_len, int64_t block_q, int64_t block_k, const at::Tensor& row_offsets,
    const at::Tensor& kv_indices, const at::Tensor& kv_full, at::IntArrayRef code, const at::Tensor& table_i32,
    const at::Tensor& table_i64, std::optional<double> scale, c10::string_view backend) {
  return run_with_value_errors([&] {
    VarlenCall call(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, scale);
    call.options.backend = host_backend(backend, call.q.dtype);  // checked for empty calls too
    if (call.empty()) return call.result();
    const MaskTensors mask{mask_q_len, mask_k_len, block_q, block_k,   row_offsets,
                           kv_indices, kv_full,    code,    table_i32, table_i64};
    attention_varlen(call.q, call.k, call.v, call.out, call.batch, host_block_mask(mask), call.options, &call.lse);
    return call.result();
  });
}

}  // namespace
}  // namespace spattn::torch_bridge

TORCH_LIBRARY_FRAGMENT(spattn, m) {
  m.def(
      "attention_varlen(Tensor q, Tensor k, Tensor v, Tensor cu_seqlens_q, Tensor cu_seqlens_k, "
      "int max_seqlen_q, int max_seqlen_k, int mask_q_len, int mask_k_len, int block_q, int block_k, "
      "Tensor row_offsets, Tensor kv_indices, Tensor kv_full, int[] code, Tensor table_i32, "
      "Tensor table_i64, float? scale, str backend) -> (Tensor out, Tensor lse)");
}

TORCH_LIBRARY_IMPL(spattn, CPU, m) {
  m.impl("attention_varlen", &spattn::torch_bridge::attention_varlen_cpu);
}
