// attention_backward.cpp - the backward entry point: validation and backend dispatch.
//
// validate_attention_backward checks that the forward's tensors (q, k, v, out,
// lse) and the mask describe one problem as attention() would, and that
// d_out, d_lse and the gradients have the shapes of what they differentiate.
#include "spattn/backward.hpp"

#include "cpu/backward/cpu_backward.hpp"
#include "plan/plan_state.hpp"
#include "spattn/error.hpp"
#include "tensor_checks.hpp"

#if defined(SPATTN_WITH_CUDA)
#include "cuda/cuda_launch.hpp"
#endif

namespace spattn {

void validate_attention_backward(const TensorView& q, const TensorView& k, const TensorView& v,
                                 const TensorView& out, const TensorView& lse, const TensorView& d_out,
                                 const AttentionGrads& grads, const BlockMask& mask,
                                 const TensorView* d_lse) {
  validate_attention(q, k, v, out, mask, &lse);
  validate_gradient_tensors(q, k, v, lse, d_out, grads, d_lse);
}

void validate_gradient_tensors(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& lse,
                               const TensorView& d_out, const AttentionGrads& grads, const TensorView* d_lse) {
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

namespace {

// A call validated against plan.mask(), on the plan's backend.
void run_backward_plan(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                       const TensorView& lse, const TensorView& d_out, const AttentionGrads& grads, const Plan& plan,
                       double scale, const TensorView* d_lse, void* stream) {
  const detail::PlanState& state = plan.state();
  switch (state.backend) {
    case Backend::Reference:
      reference_attention_backward(q, k, v, out, lse, d_out, grads, plan.mask(), scale, d_lse);
      return;
    case Backend::Cpu:
      require(state.key_major != nullptr, "attention_backward: the plan has no backward lists; make it with "
              "PlanOptions::backward");
      cpu_backward::run_backward(q, k, v, out, lse, d_out, grads, plan.mask(), *state.key_major, scale, d_lse);
      return;
    case Backend::Cuda:
#if defined(SPATTN_WITH_CUDA)
      cuda_detail::launch_backward_plan(q, k, v, out, lse, d_out, grads, *state.cuda, scale, d_lse, stream);
      return;
#endif
    case Backend::Auto: break;
  }
  (void)stream;
  fail("backend '", backend_name(state.backend), "' has no implementation");
}

}  // namespace

void attention_backward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                        const TensorView& lse, const TensorView& d_out, const AttentionGrads& grads,
                        const Plan& plan, const AttentionOptions& options, const TensorView* d_lse) {
  detail::check_call_on_plan(plan, call_shape(q, k), options.backend);
  validate_attention_backward(q, k, v, out, lse, d_out, grads, plan.mask(), d_lse);
  run_backward_plan(q, k, v, out, lse, d_out, grads, plan, resolve_scale(options, q.head_dim()), d_lse,
                    options.stream);
}

void attention_backward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                        const TensorView& lse, const TensorView& d_out, const AttentionGrads& grads,
                        const BlockMask& mask, const AttentionOptions& options, const TensorView* d_lse) {
  validate_attention_backward(q, k, v, out, lse, d_out, grads, mask, d_lse);
  const double scale = resolve_scale(options, q.head_dim());
  Backend requested = options.backend;
  // fp64 inputs on the host default to the exact reference.
  if (requested == Backend::Auto && q.dtype == DType::F64 && detail::tensor_device(q.data) < 0)
    requested = Backend::Reference;
  const Plan plan = detail::cached_plan(mask, call_shape(q, k), requested, q.data, true, options.stream);
  run_backward_plan(q, k, v, out, lse, d_out, grads, plan, scale, d_lse, options.stream);
}

}  // namespace spattn
