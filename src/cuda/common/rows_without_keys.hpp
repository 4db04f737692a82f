// cuda/common/rows_without_keys.hpp - the result of a call with no key (Lk = 0)
// on the device: every row has no allowed key, so out is 0 and the LSE -inf
// (spattn/attention.hpp, "Empty shapes"). attention() writes it this way for
// the CUDA backend, whose kernels need keys to read.
#pragma once

#include <cuda_runtime_api.h>

#include "spattn/tensor.hpp"

namespace spattn::cuda_detail {

// Writes 0 into every element of `out` (any strides; fp16, bf16 or fp32) and
// -inf into every entry of `lse` (fp32; null: none) on `stream`. Both must
// point to device memory (checked).
void write_rows_without_keys(const TensorView& out, const TensorView* lse, cudaStream_t stream);

}  // namespace spattn::cuda_detail
