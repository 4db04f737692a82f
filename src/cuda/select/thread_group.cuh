// cuda/select/thread_group.cuh - runs of whole warps of a CTA that work on one
// row of the selector and synchronise on their own named barrier, with the
// reductions and scans the selection kernels build on.
#pragma once

#include <cstdint>

namespace spattn::cuda_detail::select_kernels {

constexpr int kWarp = 32;

// Barrier 0 with every thread is __syncthreads; a group uses 1 + its row.
struct ThreadGroup {
  int rank, size, barrier;
  __device__ void sync() const { asm volatile("bar.sync %0, %1;" ::"r"(barrier), "r"(size) : "memory"); }
};

__device__ __forceinline__ ThreadGroup whole_cta() {
  return ThreadGroup{static_cast<int>(threadIdx.x), static_cast<int>(blockDim.x), 0};
}

__device__ __forceinline__ float warp_sum(float x) {
  for (int o = kWarp / 2; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}
__device__ __forceinline__ float warp_max(float x) {
  for (int o = kWarp / 2; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

// Reduces x over the group (sum or max); every thread of it gets the result.
template <bool kMax>
__device__ float group_reduce(const ThreadGroup& g, float x, float* scratch) {
  const int lane = g.rank % kWarp, warp = g.rank / kWarp, warps = g.size / kWarp;
  x = kMax ? warp_max(x) : warp_sum(x);
  g.sync();  // scratch may still be read by a previous reduction
  if (lane == 0) scratch[warp] = x;
  g.sync();
  x = lane < warps ? scratch[lane] : (kMax ? -INFINITY : 0.0f);
  return kMax ? warp_max(x) : warp_sum(x);
}

// Exclusive scan over the group's threads of one value each; returns this
// thread's prefix and, in *total, the sum of all values.
template <typename V>
__device__ V group_exclusive_scan(const ThreadGroup& g, V x, V* scratch, V* total = nullptr) {
  const int lane = g.rank % kWarp, warp = g.rank / kWarp, warps = g.size / kWarp;
  V inclusive = x;
  for (int o = 1; o < kWarp; o <<= 1) {
    const V up = __shfl_up_sync(0xffffffffu, inclusive, o);
    if (lane >= o) inclusive += up;
  }
  g.sync();
  if (lane == kWarp - 1) scratch[warp] = inclusive;
  g.sync();
  V warp_prefix = 0, sum = 0;
  for (int w = 0; w < warps; ++w) {
    if (w < warp) warp_prefix += scratch[w];
    sum += scratch[w];
  }
  if (total) *total = sum;
  return warp_prefix + inclusive - x;
}

}  // namespace spattn::cuda_detail::select_kernels
