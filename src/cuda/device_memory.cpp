// cuda/device_memory.cpp - memory guards for device allocations (spattn/cuda.hpp):
// what a call will allocate on the current GPU, checked against the free
// memory cudaMemGetInfo reports there, as spattn/memory.hpp checks host memory.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "cuda/common/cuda_check.hpp"
#include "spattn/cuda.hpp"

namespace spattn {

int64_t cuda_free_memory_bytes() {
  size_t free = 0, total = 0;
  cuda_detail::check_cuda(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
  return static_cast<int64_t>(free);
}

void cuda_check_memory(const MemoryEstimate& estimate) { estimate.check(cuda_free_memory_bytes(), "device memory"); }

}  // namespace spattn
