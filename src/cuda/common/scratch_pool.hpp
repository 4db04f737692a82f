// cuda/common/scratch_pool.hpp - stream-ordered scratch memory of the CUDA
// backend (partial results of split rows, the sm90 kernel's work counter).
//
// Each device gets one private memory pool, created on first use and kept for
// the process, that keeps freed memory instead of returning it to the driver
// at every synchronisation; allocations are stream-ordered (no host sync) and
// can be captured in CUDA graphs. The default pool is left untouched.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <exception>

namespace spattn::cuda_detail {

// The pool of the current device (created here on first use; do that outside
// graph capture: making a plan does, cuda_plan.cpp).
cudaMemPool_t scratch_pool();

// `bytes` of scratch usable by work queued on `stream` after this call (null
// for none).
void* scratch_alloc(size_t bytes, cudaStream_t stream);

// Returns scratch once the work queued on `stream` so far has finished (null:
// nothing).
void scratch_free(void* p, cudaStream_t stream);

// `bytes` rounded up to 256, the alignment of each part of one allocation
// carved into several.
inline size_t scratch_aligned(size_t bytes) { return (bytes + 255) / 256 * 256; }

// Stream-ordered scratch returned when the scope ends (also on a throw).
// While an exception unwinds the scope the free is not checked (a second
// throw would terminate the program; the pool keeps what it could not free).
class ScopedScratch {
 public:
  ScopedScratch(size_t bytes, cudaStream_t stream) : stream_(stream), ptr_(scratch_alloc(bytes, stream)) {}
  ~ScopedScratch() noexcept(false) {
    if (ptr_ != nullptr && std::uncaught_exceptions() > 0)
      cudaFreeAsync(ptr_, stream_);
    else
      scratch_free(ptr_, stream_);
  }
  ScopedScratch(const ScopedScratch&) = delete;
  ScopedScratch& operator=(const ScopedScratch&) = delete;
  void* get() const { return ptr_; }

 private:
  cudaStream_t stream_;
  void* ptr_;
};

}  // namespace spattn::cuda_detail
