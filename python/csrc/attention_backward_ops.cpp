// python/csrc/attention_backward_ops.cpp - the spattn::attention_backward
// operator and its CPU kernel: the gradients of spattn::attention.
//
// It takes what the forward operator took (q, k, v, the packed mask or None,
// scale, backend) plus the forward's out and lse and the
// gradients of both outputs, and returns (dq, dk, dv) with the shapes of q, k
// and v. spattn/attention.py registers it as the autograd formula of
// spattn::attention. There is no CUDA kernel: the CUDA backend has no
// backward pass yet, and attention.py says so before a CUDA forward that
// would need one runs.
#include <torch/library.h>

#include <string>
#include <tuple>

#include "attention_op.hpp"
#include "mask_registry.hpp"
#include "spattn/backward.hpp"
#include "tensor_bridge.hpp"

namespace spattn::torch_bridge {
namespace {

std::tuple<at::Tensor, at::Tensor, at::Tensor> attention_backward_cpu(
    const at::Tensor& d_out, const at::Tensor& d_lse, const at::Tensor& q, const at::Tensor& k,
    const at::Tensor& v, const at::Tensor& out, const at::Tensor& lse, const std::optional<at::Tensor>& mask,
    std::optional<double> scale, c10::string_view backend) {
  return run_with_value_errors([&] {
    at::Tensor dq = at::zeros_like(q), dk = at::zeros_like(k), dv = at::zeros_like(v);
    if (q.numel() == 0 || k.numel() == 0) return std::make_tuple(dq, dk, dv);
    TORCH_CHECK_TYPE(lse.scalar_type() == at::kFloat && d_lse.scalar_type() == at::kFloat,
                     "lse and its gradient must be float32, got ", lse.scalar_type(), " and ", d_lse.scalar_type());
    TORCH_CHECK_VALUE(d_lse.sizes() == lse.sizes(), "d_lse shape ", d_lse.sizes(), " must equal lse shape ",
                      lse.sizes());
    const at::Tensor lse_c = lse.contiguous(), d_lse_c = d_lse.contiguous();
    AttentionOptions options;
    options.scale = scale;
    options.backend = host_backend(backend, dtype_of(q, "q"));
    const TensorView lse_view = lse_view_of(lse_c), d_lse_view = lse_view_of(d_lse_c);
    attention_backward(view_of(q, "q"), view_of(k, "k"), view_of(v, "v"), view_of(out, "out"), lse_view,
                       view_of(d_out, "d_out"), {view_of(dq, "dq"), view_of(dk, "dk"), view_of(dv, "dv")},
                       *registered_mask(mask, q.size(2), k.size(2)), options, &d_lse_view);
    return std::make_tuple(dq, dk, dv);
  });
}

}  // namespace
}  // namespace spattn::torch_bridge

TORCH_LIBRARY_FRAGMENT(spattn, m) {
  m.def(
      "attention_backward(Tensor d_out, Tensor d_lse, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, "
      "Tensor? mask, float? scale, str backend) -> (Tensor dq, Tensor dk, Tensor dv)");
}

TORCH_LIBRARY_IMPL(spattn, CPU, m) {
  m.impl("attention_backward", &spattn::torch_bridge::attention_backward_cpu);
}
