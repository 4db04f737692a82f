// cuda/common/device_buffer.hpp - an owned device allocation (freed when the
// owner goes, also when a later allocation of the same constructor throws).
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <memory>

#include "cuda/common/cuda_check.hpp"

namespace spattn::cuda_detail {

struct CudaFree {
  void operator()(void* p) const {
    if (p) cudaFree(p);  // errors at teardown are ignored on purpose
  }
};
using DevicePtr = std::unique_ptr<void, CudaFree>;

// `bytes` of device memory (at least one byte, so a zero size still gives a
// valid pointer); throws spattn::Error naming `what` on failure.
inline DevicePtr device_alloc(size_t bytes, const char* what) {
  void* p = nullptr;
  check_cuda(cudaMalloc(&p, std::max<size_t>(bytes, 1)), what);
  return DevicePtr(p);
}

}  // namespace spattn::cuda_detail
