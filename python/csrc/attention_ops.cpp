// python/csrc/attention_ops.cpp - the spattn::attention operator and its CPU kernel.
//
// The operator is a pure function of tensors and scalars, so torch.compile
// can trace it (its fake kernel lives in spattn/_ops.py) and CUDA graphs can
// capture it: the BlockMask crosses as one packed int64 tensor on the device
// of q (packed_mask.hpp), or None for dense attention. The operator always
// returns (out, lse): out with the strides of q, lse (B, Hq, Lq) fp32.
//
// Each kernel finds the host BlockMask of the packed tensor (decoded on its
// first use and kept, mask_registry.hpp) and runs spattn::attention on it,
// whose plan for the call's shape the mask caches. The CPU kernel runs a
// host backend: "auto" is the fast CPU backend, or the exact fp64 reference
// for float64 inputs.
#include <torch/library.h>

#include <optional>
#include <string>

#include "attention_op.hpp"
#include "mask_registry.hpp"
#include "spattn/error.hpp"
#include "tensor_bridge.hpp"

namespace spattn::torch_bridge {
namespace {

std::tuple<at::Tensor, at::Tensor> attention_cpu(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                 const std::optional<at::Tensor>& mask, std::optional<double> scale,
                                                 c10::string_view backend) {
  return run_with_value_errors([&] {
    AttentionCall call(q, k, v, scale);
    const Backend host = host_backend(backend, call.q.dtype);  // checked for empty calls too
    if (call.empty()) return call.result();
    call.run(*registered_mask(mask, q.size(2), k.size(2)), host);
    return call.result();
  });
}

}  // namespace
}  // namespace spattn::torch_bridge

TORCH_LIBRARY_FRAGMENT(spattn, m) {
  m.def("attention(Tensor q, Tensor k, Tensor v, Tensor? mask, float? scale, str backend) "
        "-> (Tensor out, Tensor lse)");
}

TORCH_LIBRARY_IMPL(spattn, CPU, m) {
  m.impl("attention", &spattn::torch_bridge::attention_cpu);
}
