// cuda/cuda_backward.cpp - cuda_attention_backward (spattn/cuda.hpp), the
// launch of a plan's backward pass (cuda_launch.hpp) and its steps
// (cuda_backward.hpp): the checks specific to the backward kernels, their
// arguments from the tensor views, the row scratch, and the kernels
// (bwd_sm80/) on the plan's backward lists.
#include "cuda/cuda_backward.hpp"

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>

#include "cuda/bwd_sm80/bwd_params.hpp"
#include "cuda/bwd_sm80/bwd_plan.hpp"
#include "cuda/bwd_sm80/bwd_sm80.hpp"
#include "cuda/common/cuda_check.hpp"
#include "cuda/common/scratch_pool.hpp"
#include "cuda/common/tensor_layout.hpp"
#include "cuda/cuda_launch.hpp"
#include "cuda/plan/device_mask_copy.hpp"
#include "plan/plan_state.hpp"
#include "spattn/backward.hpp"
#include "spattn/cuda.hpp"
#include "spattn/error.hpp"
#include "spattn/pattern_terms.hpp"

namespace spattn {
namespace cuda_detail {
namespace {

constexpr double kLog2e = 1.4426950408889634;
// Alignments in elements: the tile copies move 16 bytes of q, k, v and d_out
// at a time; out and the gradients are read and written in pairs.
constexpr int64_t kTileAlignElems = 8;
constexpr int64_t kPairAlignElems = 2;

// Unit stride along D, other strides and the base aligned to `align_elems` elements, device memory.
void check_layout(const TensorView& t, const char* name, int64_t align_elems) {
  cuda_detail::check_kernel_layout(t, "CUDA backward", name, align_elems);
}

BwdRowTensor row_arg(const TensorView& t) {
  return BwdRowTensor{static_cast<const float*>(t.data), t.stride[0], t.stride[1], t.stride[2]};
}

// Query rows per (batch, head) in the row scratch: q_len rounded up to the tile.
int64_t scratch_row_stride(const BwdShape& shape) {
  return pattern_math::ceil_div(shape.q_len, kBwdTileSide) * kBwdTileSide;
}

}  // namespace

BwdParams backward_params(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                          const TensorView& lse, const TensorView& d_out, const AttentionGrads& grads, double scale,
                          const TensorView* d_lse) {
  const DType t = q.dtype;
  require(t == DType::F16 || t == DType::BF16, "CUDA backward: q dtype must be fp16 or bf16, got ", dtype_name(t));
  require(d_out.dtype == t, "CUDA backward: d_out dtype must be ", dtype_name(t), " (the dtype of q), got ",
          dtype_name(d_out.dtype));
  require(out.dtype == t || out.dtype == DType::F32, "CUDA backward: out dtype must be ", dtype_name(t),
          " or fp32, got ", dtype_name(out.dtype));
  const DType g = grads.dq.dtype;
  require((g == t || g == DType::F32) && grads.dk.dtype == g && grads.dv.dtype == g, "CUDA backward: dq, dk and dv ",
          "must all be ", dtype_name(t), " or all fp32, got ", dtype_name(grads.dq.dtype), ", ",
          dtype_name(grads.dk.dtype), " and ", dtype_name(grads.dv.dtype));
  check_bwd_sm80_head_dim(q.head_dim());
  require(std::isfinite(scale) && scale > 0, "CUDA backward: scale must be finite and > 0, got ", scale);
  check_layout(q, "q", kTileAlignElems);
  check_layout(k, "k", kTileAlignElems);
  check_layout(v, "v", kTileAlignElems);
  check_layout(d_out, "d_out", kTileAlignElems);
  check_layout(out, "out", kPairAlignElems);
  check_layout(grads.dq, "dq", kPairAlignElems);
  check_layout(grads.dk, "dk", kPairAlignElems);
  check_layout(grads.dv, "dv", kPairAlignElems);
  require(cuda_is_device_pointer(lse.data), "CUDA backward: lse must point to device memory");
  if (d_lse) require(cuda_is_device_pointer(d_lse->data), "CUDA backward: d_lse must point to device memory");

  BwdParams p;
  p.shape = {q.batch(), q.heads(), k.heads(), q.seq_len(), k.seq_len(), q.head_dim()};
  p.q = tensor_arg(q);
  p.k = tensor_arg(k);
  p.v = tensor_arg(v);
  p.d_out = tensor_arg(d_out);
  p.out = tensor_arg(out);
  p.out_f32 = out.dtype == DType::F32;
  p.lse = row_arg(lse);
  if (d_lse) p.d_lse = row_arg(*d_lse);
  p.dq = tensor_arg(grads.dq);
  p.dk = tensor_arg(grads.dk);
  p.dv = tensor_arg(grads.dv);
  p.grads_f32 = g == DType::F32;
  p.scale = static_cast<float>(scale);
  p.scale_log2 = static_cast<float>(scale * kLog2e);
  return p;
}

int64_t backward_scratch_floats(const BwdShape& shape) {
  return 2 * shape.batch * shape.q_heads * scratch_row_stride(shape);
}

void set_backward_scratch(BwdParams& p, float* scratch) {
  p.stats.row_stride = scratch_row_stride(p.shape);
  p.stats.lse_log2 = scratch;
  p.stats.delta = scratch + backward_scratch_floats(p.shape) / 2;
}

namespace {

// The kernels on the plan's backward lists with arguments `p` (checked).
void run_on_plan(BwdParams p, const CudaPlan& plan, DType dtype, cudaStream_t stream) {
  require(plan.backward != nullptr, "attention_backward: the plan has no backward lists; make it with "
          "PlanOptions::backward");
  const int device = current_device();
  require(device == plan.device, "CUDA backend: the plan was made for device ", plan.device,
          " but the current device is ", device);
  // Stream-ordered, from the pool that keeps its memory: capturable in a graph.
  const ScopedScratch scratch(static_cast<size_t>(backward_scratch_floats(p.shape)) * sizeof(float), stream);
  set_backward_scratch(p, static_cast<float*>(scratch.get()));
  run_backward(p, plan.backward->view(), dtype, stream);
}

}  // namespace

void launch_backward_plan(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                          const TensorView& lse, const TensorView& d_out, const AttentionGrads& grads,
                          const CudaPlan& plan, double scale, const TensorView* d_lse, void* stream) {
  run_on_plan(backward_params(q, k, v, out, lse, d_out, grads, scale, d_lse), plan, q.dtype,
              static_cast<cudaStream_t>(stream));
}

}  // namespace cuda_detail

void cuda_attention_backward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                             const TensorView& lse, const TensorView& d_out, const AttentionGrads& grads,
                             const BlockMask& mask, double scale, const TensorView* d_lse, void* stream) {
  validate_attention_backward(q, k, v, out, lse, d_out, grads, mask, d_lse);
  // The kernels' checks first: they name the tensor that cannot run.
  const cuda_detail::BwdParams p = cuda_detail::backward_params(q, k, v, out, lse, d_out, grads, scale, d_lse);
  const Plan plan = detail::cached_plan(mask, call_shape(q, k), Backend::Cuda, q.data, true, stream);
  cuda_detail::run_on_plan(p, *plan.state().cuda, q.dtype, static_cast<cudaStream_t>(stream));
}

}  // namespace spattn
