// cuda/naive/naive_attention.hpp - launch of the naive one-thread-per-row
// CUDA baseline (see naive_attention.cu). Reads p.mask only, not p.plan.
#pragma once

#include <cuda_runtime_api.h>

#include "cuda/common/fwd_params.hpp"
#include "spattn/dtype.hpp"

namespace spattn::cuda_detail {

void run_naive(const FwdParams& p, DType dtype, cudaStream_t stream);

}  // namespace spattn::cuda_detail
