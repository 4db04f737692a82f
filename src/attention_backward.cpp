// attention_backward.cpp - the backward entry point: validation and backend dispatch.
//
// validate_attention_backward checks that the forward's tensors (q, k, v, out,
// lse) and the mask describe one problem as attention() would, and that
// d_out, d_lse and the gradients have the shapes of what they differentiate.
#include "spattn/backward.hpp"

#include "spattn/error.hpp"
#include "tensor_checks.hpp"

#if defined(SPATTN_WITH_CUDA)
#include "spattn/cuda.hpp"
#endif

namespace spattn {

void validate_attention_backward(const TensorView& q, const TensorView& k, const TensorView& v,
                                 const TensorView& out, const TensorView& lse, const TensorView& d_out,
                                 const AttentionGrads& grads, const BlockMask& mask,
                                 const TensorView* d_lse) {
  validate_attention(q, k, v, out, mask, &lse);
  validate_tensor(d_out, "d_out");
  require_same_shape(d_out, "d_out", q, "q");
  if (d_lse) {
    validate_tensor(*d_lse, "d_lse");
    require(d_lse->dtype == DType::F32, "d_lse dtype must be fp32, got ", dtype_name(d_lse->dtype));
    require_same_shape(*d_lse, "d_lse", lse, "lse");
  }
  validate_tensor(grads.dq, "dq");
  validate_tensor(grads.dk, "dk");
  validate_tensor(grads.dv, "dv");
  require_same_shape(grads.dq, "dq", q, "q");
  require_same_shape(grads.dk, "dk", k, "k");
  require_same_shape(grads.dv, "dv", v, "v");
}

void attention_backward(const TensorView& q, const TensorView& k, const TensorView& v,
                        const TensorView& out, const TensorView& lse, const TensorView& d_out,
                        const AttentionGrads& grads, const BlockMask& mask, const AttentionOptions& options,
                        const TensorView* d_lse) {
  validate_attention_backward(q, k, v, out, lse, d_out, grads, mask, d_lse);
  const double scale = resolve_scale(options, q.head_dim());
  Backend backend = resolve_backend(options.backend, q.data);
  if (options.backend == Backend::Auto && backend == Backend::Cpu && q.dtype == DType::F64)
    backend = Backend::Reference;
  switch (backend) {
    case Backend::Reference:
      reference_attention_backward(q, k, v, out, lse, d_out, grads, mask, scale, d_lse);
      return;
    case Backend::Cpu: cpu_attention_backward(q, k, v, out, lse, d_out, grads, mask, scale, d_lse); return;
    case Backend::Cuda:
#if defined(SPATTN_WITH_CUDA)
      cuda_attention_backward(q, k, v, out, lse, d_out, grads, mask, scale, d_lse);
      return;
#endif
    case Backend::Auto: break;
  }
  fail("backend '", backend_name(options.backend), "' has no implementation");
}

}  // namespace spattn
