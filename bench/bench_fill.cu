// bench/bench_fill.cu - fills device buffers with pseudo-random fp16/bf16
// values in [-2, 2) from a hash of the element index, so that benchmarks time
// real (never zero) data without a slow host-side generator.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "bench_fill.hpp"

namespace spattn::bench {
namespace {

__device__ __forceinline__ float hashed_uniform(uint64_t index, uint64_t seed) {
  uint64_t x = index * 0x9e3779b97f4a7c15ull + seed;
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return static_cast<float>(x >> 40) * (4.0f / 16777216.0f) - 2.0f;
}

template <typename T>
__global__ void fill_kernel(T* data, int64_t n, uint64_t seed);

template <>
__global__ void fill_kernel<__nv_bfloat16>(__nv_bfloat16* data, int64_t n, uint64_t seed) {
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x)
    data[e] = __float2bfloat16_rn(hashed_uniform(e, seed));
}

template <>
__global__ void fill_kernel<__half>(__half* data, int64_t n, uint64_t seed) {
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x)
    data[e] = __float2half_rn(hashed_uniform(e, seed));
}

}  // namespace

void fill_random(void* data, int64_t n, bool bf16, uint64_t seed) {
  if (bf16)
    fill_kernel<<<1024, 256>>>(static_cast<__nv_bfloat16*>(data), n, seed);
  else
    fill_kernel<<<1024, 256>>>(static_cast<__half*>(data), n, seed);
}

}  // namespace spattn::bench
