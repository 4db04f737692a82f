// cuda/common/dependent_launch.cuh - programmatic dependent launch (compute
// capability 9.0 and newer) between a forward kernel and the merge of its
// split rows that follows it on the stream: the forward kernel lets the
// merge launch early, the merge launched so waits for the whole forward grid
// (and its memory) before it reads a partial result, and its launch latency
// hides behind the forward kernel's last CTAs. On older devices both calls
// compile to nothing and the merge launches as any kernel does.
#pragma once

namespace spattn::cuda_detail {

// Lets the kernel launched after this one with programmatic stream
// serialisation start once every CTA of this grid has called it (or ended).
__device__ __forceinline__ void allow_dependent_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Waits until the grid this kernel depends on has completed and its writes
// are visible (returns at once where it was launched in the usual way).
__device__ __forceinline__ void wait_for_prerequisite_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

}  // namespace spattn::cuda_detail
