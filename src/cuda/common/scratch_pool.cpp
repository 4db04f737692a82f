// cuda/common/scratch_pool.cpp - per-device private memory pools for the CUDA
// backend's stream-ordered scratch (see scratch_pool.hpp).
#include "cuda/common/scratch_pool.hpp"

#include <cstdint>
#include <map>
#include <mutex>

#include "cuda/common/cuda_check.hpp"

namespace spattn::cuda_detail {

cudaMemPool_t scratch_pool() {
  static std::mutex mutex;
  static std::map<int, cudaMemPool_t> pools;
  int device = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  std::lock_guard<std::mutex> lock(mutex);
  auto found = pools.find(device);
  if (found != pools.end()) return found->second;
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = device;
  cudaMemPool_t pool = nullptr;
  check_cuda(cudaMemPoolCreate(&pool, &props), "cudaMemPoolCreate");
  uint64_t keep_all = UINT64_MAX;
  check_cuda(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep_all),
             "cudaMemPoolSetAttribute(release threshold)");
  pools[device] = pool;
  return pool;
}

void* scratch_alloc(size_t bytes, cudaStream_t stream) {
  void* p = nullptr;
  if (bytes == 0) return p;
  check_cuda(cudaMallocFromPoolAsync(&p, bytes, scratch_pool(), stream), "cudaMallocFromPoolAsync");
  return p;
}

void scratch_free(void* p, cudaStream_t stream) {
  if (p != nullptr) check_cuda(cudaFreeAsync(p, stream), "cudaFreeAsync");
}

}  // namespace spattn::cuda_detail
