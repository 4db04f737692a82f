// python/csrc/attention_op.cpp - one call of the spattn::attention operator
// (see attention_op.hpp).
#include "attention_op.hpp"

#include <limits>
#include <string>

#include "spattn/backward.hpp"
#include "spattn/error.hpp"
#include "tensor_bridge.hpp"

namespace spattn::torch_bridge {

Backend host_backend(c10::string_view name, DType dtype) {
  const Backend requested = parse_backend(std::string(name));
  if (requested == Backend::Auto) return dtype == DType::F64 ? Backend::Reference : Backend::Cpu;
  require(requested != Backend::Cuda, "backend 'cuda' needs CUDA tensors, got CPU tensors");
  return requested;
}

AttentionCall::AttentionCall(const at::Tensor& q_in, const at::Tensor& k_in, const at::Tensor& v_in,
                             std::optional<double> scale_in)
    : q(view_of(q_in, "q")), k(view_of(k_in, "k")), v(view_of(v_in, "v")) {
  TORCH_CHECK_VALUE(k_in.device() == q_in.device() && v_in.device() == q_in.device(),
                    "q, k and v must be on one device, got ", q_in.device(), ", ", k_in.device(),
                    " and ", v_in.device());
  out_tensor = at::empty_like(q_in);
  lse_tensor = at::empty({q_in.size(0), q_in.size(1), q_in.size(2)}, q_in.options().dtype(at::kFloat));
  options.scale = scale_in;
  // Lk == 0: every row is empty (output 0, LSE -inf) and no mask exists.
  if (q_in.numel() != 0 && k_in.size(2) == 0) {
    out_tensor.zero_();
    lse_tensor.fill_(-std::numeric_limits<float>::infinity());
  }
  empty_ = q_in.numel() == 0 || k_in.numel() == 0;
}

void AttentionCall::run(const BlockMask& mask, Backend backend, void* stream) {
  options.backend = backend;
  options.stream = stream;
  const TensorView out = view_of(out_tensor, "out");
  const TensorView lse = lse_view_of(lse_tensor);
  attention(q, k, v, out, mask, options, &lse);
}

GradientInputs gradient_inputs(const at::Tensor& lse, const at::Tensor& d_lse, const at::Tensor& d_out) {
  TORCH_CHECK_TYPE(lse.scalar_type() == at::kFloat && d_lse.scalar_type() == at::kFloat,
                   "lse and its gradient must be float32, got ", lse.scalar_type(), " and ", d_lse.scalar_type());
  TORCH_CHECK_VALUE(d_lse.sizes() == lse.sizes(), "d_lse shape ", d_lse.sizes(), " must equal lse shape ",
                    lse.sizes());
  return GradientInputs{lse.contiguous(), d_lse.contiguous(), d_out.contiguous()};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> attention_gradients(
    const at::Tensor& d_out, const at::Tensor& d_lse, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const at::Tensor& out, const at::Tensor& lse, const BlockMask& mask, std::optional<double> scale,
    Backend backend, void* stream) {
  at::Tensor dq = at::zeros_like(q), dk = at::zeros_like(k), dv = at::zeros_like(v);
  if (q.numel() == 0 || k.numel() == 0) return std::make_tuple(dq, dk, dv);
  const GradientInputs in = gradient_inputs(lse, d_lse, d_out);
  AttentionOptions options;
  options.scale = scale;
  options.backend = backend;
  options.stream = stream;
  const TensorView lse_view = lse_view_of(in.lse), d_lse_view = lse_view_of(in.d_lse);
  attention_backward(view_of(q, "q"), view_of(k, "k"), view_of(v, "v"), view_of(out, "out"), lse_view,
                     view_of(in.d_out, "d_out"), {view_of(dq, "dq"), view_of(dk, "dk"), view_of(dv, "dv")}, mask,
                     options, &d_lse_view);
  return std::make_tuple(dq, dk, dv);
}

}  // namespace spattn::torch_bridge
