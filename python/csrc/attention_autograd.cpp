// python/csrc/attention_autograd.cpp - the gradient of spattn::attention,
// registered for the Autograd dispatch key in C++: a call reaches the kernel
// with no Python on the way (the Python autograd layer of torch.library cost
// several microseconds a call, a quarter of a small call's host time), and
// its backward runs spattn::attention_backward with respect to q, k and v,
// given the gradients of both outputs (out and the LSE); the mask is a
// constant. torch.compile traces through it as through any C++ autograd
// kernel: both operators have fake kernels (spattn/_ops.py, _autograd.py).
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <optional>
#include <string>
#include <tuple>

namespace spattn::torch_bridge {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

std::tuple<at::Tensor, at::Tensor> call_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                  const std::optional<at::Tensor>& mask, std::optional<double> scale,
                                                  c10::string_view backend) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("spattn::attention", "")
                             .typed<std::tuple<at::Tensor, at::Tensor>(
                                 const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                 const std::optional<at::Tensor>&, std::optional<double>, c10::string_view)>();
  return op.call(q, k, v, mask, scale, backend);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> call_attention_backward(
    const at::Tensor& d_out, const at::Tensor& d_lse, const at::Tensor& q, const at::Tensor& k,
    const at::Tensor& v, const at::Tensor& out, const at::Tensor& lse, const std::optional<at::Tensor>& mask,
    std::optional<double> scale, c10::string_view backend) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("spattn::attention_backward", "")
                             .typed<std::tuple<at::Tensor, at::Tensor, at::Tensor>(
                                 const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                 const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                 const std::optional<at::Tensor>&, std::optional<double>, c10::string_view)>();
  return op.call(d_out, d_lse, q, k, v, out, lse, mask, scale, backend);
}

class AttentionFunction : public torch::autograd::Function<AttentionFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                               const std::optional<at::Tensor>& mask, std::optional<double> scale,
                               c10::string_view backend) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    auto [out, lse] = call_attention(q, k, v, mask, scale, backend);
    ctx->save_for_backward({q, k, v, out, lse, mask.value_or(at::Tensor())});
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["backend"] = std::string(backend);
    return {out, lse};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor &q = saved[0], &k = saved[1], &v = saved[2], &out = saved[3], &lse = saved[4];
    const std::optional<at::Tensor> mask = saved[5].defined() ? std::optional<at::Tensor>(saved[5]) : std::nullopt;
    // An output that no loss reaches has no gradient: it contributes zero.
    const at::Tensor d_out = grads[0].defined() ? grads[0] : at::zeros_like(out);
    const at::Tensor d_lse = grads[1].defined() ? grads[1] : at::zeros_like(lse);
    const std::optional<double> scale = ctx->saved_data["scale"].toOptional<double>();
    const std::string backend = ctx->saved_data["backend"].toStringRef();
    auto [dq, dk, dv] = call_attention_backward(d_out, d_lse, q, k, v, out, lse, mask, scale, backend);
    return {dq, dk, dv, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

std::tuple<at::Tensor, at::Tensor> attention_autograd(const at::Tensor& q, const at::Tensor& k,
                                                      const at::Tensor& v, const std::optional<at::Tensor>& mask,
                                                      std::optional<double> scale, c10::string_view backend) {
  const variable_list outputs = AttentionFunction::apply(q, k, v, mask, scale, backend);
  return {outputs[0], outputs[1]};
}

}  // namespace
}  // namespace spattn::torch_bridge

TORCH_LIBRARY_IMPL(spattn, Autograd, m) {
  m.impl("attention", &spattn::torch_bridge::attention_autograd);
}
