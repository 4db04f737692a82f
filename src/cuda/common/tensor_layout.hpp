// cuda/common/tensor_layout.hpp - the layout a CUDA kernel's tensor needs
// (unit stride along D, aligned strides and base, device memory), checked
// before a launch by the forward (cuda_backend.cpp) and backward
// (cuda_backward.cpp) entry points.
#pragma once

#include <cstdint>

#include "spattn/tensor.hpp"

namespace spattn::cuda_detail {

// Throws spattn::Error ("<who>: <name> ...") unless `t` has unit stride along
// the head dim, its other strides (of axes longer than 1) and its base are
// aligned to `align_elems` elements, and it points to device memory.
void check_kernel_layout(const TensorView& t, const char* who, const char* name, int64_t align_elems);

}  // namespace spattn::cuda_detail
