// cuda/cuda_backward.hpp - the steps of cuda_attention_backward
// (spattn/cuda.hpp) apart, for callers that keep the plan and the row
// scratch across calls (the benchmark; the library's plan object later):
// the kernels' arguments from the tensor views, the scratch's size and
// place. Then make_backward_plan (bwd_sm80/bwd_plan.hpp) once per mask and
// run_backward (bwd_sm80/bwd_sm80.hpp) per call.
#pragma once

#include <cstdint>

#include "cuda/bwd_sm80/bwd_params.hpp"
#include "spattn/backward.hpp"
#include "spattn/tensor.hpp"

namespace spattn::cuda_detail {

// The kernels' arguments of a call already validated by
// validate_attention_backward, after the checks specific to the CUDA kernels
// (dtypes, head dim, scale, layouts, device memory); throws spattn::Error
// naming the parameter. The row scratch is left unset (set_backward_scratch).
BwdParams backward_params(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                          const TensorView& lse, const TensorView& d_out, const AttentionGrads& grads, double scale,
                          const TensorView* d_lse);

// Floats the call's row scratch holds (two arrays of batch x query heads x
// query rows rounded up to the tile).
int64_t backward_scratch_floats(const BwdShape& shape);

// Points p's row scratch at `scratch` (backward_scratch_floats floats, 16-byte aligned).
void set_backward_scratch(BwdParams& p, float* scratch);

}  // namespace spattn::cuda_detail
