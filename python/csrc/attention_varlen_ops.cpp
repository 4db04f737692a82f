// python/csrc/attention_varlen_ops.cpp - the spattn::attention_varlen operator
// and its CPU kernel.
//
// Packed variable-length batches as FlashAttention's varlen API: q
// (total_q, Hq, D), k and v (total_k, Hkv, D), int32 cu_seqlens_q/k (batch + 1)
// on the device of q, max_seqlen_q/k; the mask crosses as for
// spattn::attention (one packed tensor, or None for dense attention), built
// for the longest sequence. Returns (out, lse): out with the strides of q, lse
// (Hq, total_q) fp32. The CPU kernel runs attention_varlen on the registered
// mask, which checks cu_seqlens and runs each sequence alone.
#include <torch/library.h>

#include "attention_op.hpp"
#include "attention_varlen_op.hpp"
#include "mask_registry.hpp"
#include "tensor_bridge.hpp"

namespace spattn::torch_bridge {
namespace {

std::tuple<at::Tensor, at::Tensor> attention_varlen_cpu(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& cu_seqlens_q,
    const at::Tensor& cu_seqlens_k, int64_t max_seqlen_q, int64_t max_seqlen_k, const std::optional<at::Tensor>& mask,
    std::optional<double> scale, c10::string_view backend) {
  return run_with_value_errors([&] {
    VarlenCall call(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, scale);
    call.options.backend = host_backend(backend, call.q.dtype);  // checked for empty calls too
    if (call.empty()) return call.result();
    const int64_t dense_len = varlen_dense_length(max_seqlen_q, max_seqlen_k);
    attention_varlen(call.q, call.k, call.v, call.out, call.batch, *registered_mask(mask, dense_len, dense_len),
                     call.options, &call.lse);
    return call.result();
  });
}

}  // namespace
}  // namespace spattn::torch_bridge

TORCH_LIBRARY_FRAGMENT(spattn, m) {
  m.def(
      "attention_varlen(Tensor q, Tensor k, Tensor v, Tensor cu_seqlens_q, Tensor cu_seqlens_k, "
      "int max_seqlen_q, int max_seqlen_k, Tensor? mask, float? scale, str backend) -> (Tensor out, Tensor lse)");
}

TORCH_LIBRARY_IMPL(spattn, CPU, m) {
  m.impl("attention_varlen", &spattn::torch_bridge::attention_varlen_cpu);
}
