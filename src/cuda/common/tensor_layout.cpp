// cuda/common/tensor_layout.cpp - a kernel tensor's layout checks (see
// tensor_layout.hpp).
#include "cuda/common/tensor_layout.hpp"

#include "spattn/cuda.hpp"
#include "spattn/error.hpp"

namespace spattn::cuda_detail {

void check_kernel_layout(const TensorView& t, const char* who, const char* name, int64_t align_elems) {
  require(t.stride[3] == 1, who, ": ", name, " must have unit stride along head_dim, got ", t.stride[3]);
  for (int axis = 0; axis < 3; ++axis)
    require(t.shape[axis] == 1 || t.stride[axis] % align_elems == 0, who, ": ", name,
            " strides must be multiples of ", align_elems, " elements, got stride ", t.stride[axis], " on axis ",
            axis);
  const int64_t align_bytes = align_elems * dtype_size(t.dtype);
  require(reinterpret_cast<uintptr_t>(t.data) % static_cast<uintptr_t>(align_bytes) == 0, who, ": ", name,
          " must be ", align_bytes, "-byte aligned");
  require(cuda_is_device_pointer(t.data), who, ": ", name, " must point to device memory");
}

}  // namespace spattn::cuda_detail
