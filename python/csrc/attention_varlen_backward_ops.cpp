// python/csrc/attention_varlen_backward_ops.cpp - the
// spattn::attention_varlen_backward operator and its CPU kernel: the
// gradients (dq, dk, dv) of one attention_varlen call, given its packed
// tensors, cu_seqlens, mask, out and lse (Hq, total_q) and the gradients of
// both outputs. The CPU kernel runs attention_varlen_backward
// (spattn/backward.hpp), which checks cu_seqlens and differentiates each
// sequence alone; CUDA tensors have no kernel yet (the Python autograd says so).
#include <torch/library.h>

#include <optional>
#include <tuple>

#include "attention_op.hpp"
#include "attention_varlen_op.hpp"
#include "mask_registry.hpp"
#include "spattn/backward.hpp"
#include "tensor_bridge.hpp"

namespace spattn::torch_bridge {
namespace {

std::tuple<at::Tensor, at::Tensor, at::Tensor> attention_varlen_backward_cpu(
    const at::Tensor& d_out, const at::Tensor& d_lse, const at::Tensor& q, const at::Tensor& k,
    const at::Tensor& v, const at::Tensor& out, const at::Tensor& lse, const at::Tensor& cu_seqlens_q,
    const at::Tensor& cu_seqlens_k, int64_t max_seqlen_q, int64_t max_seqlen_k,
    const std::optional<at::Tensor>& mask, std::optional<double> scale, c10::string_view backend) {
  return run_with_value_errors([&] {
    const VarlenOffsets offsets(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, q);
    AttentionOptions options;
    options.scale = scale;
    options.backend = host_backend(backend, dtype_of(q, "q"));
    at::Tensor dq = at::zeros_like(q), dk = at::zeros_like(k), dv = at::zeros_like(v);
    if (q.numel() == 0 || k.numel() == 0) return std::make_tuple(dq, dk, dv);
    const GradientInputs in = gradient_inputs(lse, d_lse, d_out);
    const TensorView lse_view = lse_view_of(in.lse.unsqueeze(0)), d_lse_view = lse_view_of(in.d_lse.unsqueeze(0));
    const int64_t dense_len = varlen_dense_length(max_seqlen_q, max_seqlen_k);
    attention_varlen_backward(packed_view_of(q, "q"), packed_view_of(k, "k"), packed_view_of(v, "v"),
                              packed_view_of(out, "out"), lse_view, packed_view_of(in.d_out, "d_out"),
                              {packed_view_of(dq, "dq"), packed_view_of(dk, "dk"), packed_view_of(dv, "dv")},
                              offsets.batch, *registered_mask(mask, dense_len, dense_len), options, &d_lse_view);
    return std::make_tuple(dq, dk, dv);
  });
}

}  // namespace
}  // namespace spattn::torch_bridge

TORCH_LIBRARY_FRAGMENT(spattn, m) {
  m.def(
      "attention_varlen_backward(Tensor d_out, Tensor d_lse, Tensor q, Tensor k, Tensor v, Tensor out, "
      "Tensor lse, Tensor cu_seqlens_q, Tensor cu_seqlens_k, int max_seqlen_q, int max_seqlen_k, Tensor? mask, "
      "float? scale, str backend) -> (Tensor dq, Tensor dk, Tensor dv)");
}

TORCH_LIBRARY_IMPL(spattn, CPU, m) {
  m.impl("attention_varlen_backward", &spattn::torch_bridge::attention_varlen_backward_cpu);
}
