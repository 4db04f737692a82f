// cuda/cuda_launch.hpp - the launch of a CUDA plan (cuda_plan.hpp) on a
// call's tensors, for the entry points that hold the plan (attention.cpp,
// attention_varlen.cpp); defined in cuda_backend.cpp.
#pragma once

#include "cuda/plan/cuda_plan.hpp"
#include "spattn/attention.hpp"
#include "spattn/backward.hpp"

namespace spattn::cuda_detail {

// A call validated against the mask and shape `plan` was made for: its
// tensors checked for the kernels (dtype, layout, alignment, device
// memory), then the plan's passes launched on `stream`.
void launch_plan(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                 const CudaPlan& plan, double scale, const TensorView* lse, void* stream);

// The same for a packed batch of variable-length sequences (a varlen plan).
void launch_varlen_plan(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                        const VarlenBatch& batch, const CudaPlan& plan, double scale, const TensorView* lse,
                        void* stream);

// The backward pass of a call validated against the plan's mask and shape
// (a plan made with PlanOptions::backward): the kernels' checks, then the
// delta, dK/dV and dQ kernels queued on `stream` (row scratch from the
// stream-ordered pool; no synchronisation).
void launch_backward_plan(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                          const TensorView& lse, const TensorView& d_out, const AttentionGrads& grads,
                          const CudaPlan& plan, double scale, const TensorView* d_lse, void* stream);

}  // namespace spattn::cuda_detail
