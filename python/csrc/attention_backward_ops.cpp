// python/csrc/attention_backward_ops.cpp - the spattn::attention_backward
// operator and its CPU kernel (the CUDA kernel is in attention_cuda.cpp): the
// gradients of spattn::attention.
//
// It takes what the forward operator took (q, k, v, the packed mask or None,
// scale, backend) plus the forward's out and lse and the gradients of both
// outputs, and returns (dq, dk, dv) with the shapes of q, k and v.
// spattn/_autograd.py registers it as the autograd formula of
// spattn::attention. Both kernels run spattn::attention_backward on the
// registered mask, whose plan of the call's shape keeps the backward lists.
#include <torch/library.h>

#include <string>
#include <tuple>

#include "attention_op.hpp"
#include "mask_registry.hpp"
#include "tensor_bridge.hpp"

namespace spattn::torch_bridge {
namespace {

std::tuple<at::Tensor, at::Tensor, at::Tensor> attention_backward_cpu(
    const at::Tensor& d_out, const at::Tensor& d_lse, const at::Tensor& q, const at::Tensor& k,
    const at::Tensor& v, const at::Tensor& out, const at::Tensor& lse, const std::optional<at::Tensor>& mask,
    std::optional<double> scale, c10::string_view backend) {
  return run_with_value_errors([&] {
    const BlockMask& registered = *registered_mask(mask, q.size(2), k.size(2));
    return attention_gradients(d_out, d_lse, q, k, v, out, lse, registered, scale,
                               host_backend(backend, dtype_of(q, "q")), nullptr);
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
