// cuda/common/cuda_check.hpp - CUDA runtime status codes turned into spattn::Error.
//
// Every runtime call of the CUDA backend goes through check_cuda(); kernel
// launches are followed by check_launch(), which reads the launch error without
// synchronising the device.
#pragma once

#include <cuda_runtime_api.h>

#include "spattn/error.hpp"

namespace spattn::cuda_detail {

inline void check_cuda(cudaError_t status, const char* what) {
  if (status != cudaSuccess) fail("CUDA backend: ", what, " failed: ", cudaGetErrorString(status));
}

inline void check_launch(const char* kernel) { check_cuda(cudaGetLastError(), kernel); }

}  // namespace spattn::cuda_detail
