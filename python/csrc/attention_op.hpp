// python/csrc/attention_op.hpp - one call of the spattn::attention operator
// and of its backward, shared by their CPU and CUDA kernels, and the backend
// choice of the CPU kernels of the attention operators.
//
// AttentionCall views q, k and v, allocates the outputs (out with the strides
// of q, so a (B, L, H, D) layout stays one; lse (B, Hq, Lq) fp32), handles the
// shapes with nothing to compute, and runs spattn::attention on a mask.
#pragma once

#include <ATen/ATen.h>

#include <optional>
#include <tuple>

#include "spattn/attention.hpp"

namespace spattn::torch_bridge {

// The backend of a CPU kernel: "auto" is the fast CPU backend, or the exact
// fp64 reference for float64 inputs; "cuda" is an error.
Backend host_backend(c10::string_view name, DType dtype);

class AttentionCall {
 public:
  AttentionCall(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                std::optional<double> scale);

  // True when there is nothing to compute (a zero-sized q or k); the outputs
  // already hold their final values (Lk == 0: out 0, lse -inf).
  bool empty() const { return empty_; }
  // spattn::attention on `mask` (its plan for the call's shape from the
  // mask's cache), CUDA work queued on `stream`.
  void run(const BlockMask& mask, Backend backend, void* stream = nullptr);
  std::tuple<at::Tensor, at::Tensor> result() const { return {out_tensor, lse_tensor}; }

  TensorView q, k, v;
  at::Tensor out_tensor, lse_tensor;
  AttentionOptions options;

 private:
  bool empty_ = false;
};

// The forward's LSE and the gradients of both outputs as the backward kernels
// read them: lse and d_lse fp32 of one shape (checked), all three contiguous
// (autograd may hand over expanded or strided gradients; the kernels read
// rows of unit stride).
struct GradientInputs {
  at::Tensor lse, d_lse, d_out;
};
GradientInputs gradient_inputs(const at::Tensor& lse, const at::Tensor& d_lse, const at::Tensor& d_out);

// The gradients (dq, dk, dv) of one spattn::attention call on `mask` run on
// `backend` (CUDA work queued on `stream`), given the forward's out and lse
// and the gradients of both outputs: zeros for an empty call.
std::tuple<at::Tensor, at::Tensor, at::Tensor> attention_gradients(
    const at::Tensor& d_out, const at::Tensor& d_lse, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const at::Tensor& out, const at::Tensor& lse, const BlockMask& mask, std::optional<double> scale,
    Backend backend, void* stream);

}  // namespace spattn::torch_bridge
