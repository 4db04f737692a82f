// tools/spattn/memory_checks.cpp - the tool's memory estimates (see memory_checks.hpp).
#include "memory_checks.hpp"

#include <omp.h>

#include <algorithm>

#include "spattn/dtype.hpp"
#include "spattn/error.hpp"

#if defined(SPATTN_HAVE_CUDA)
#include "spattn/cuda.hpp"
#endif

namespace spattn::cli {

std::string size_request(const Args& args) {
  const std::string typed = args.typed({"seq", "seq-k", "seqs", "long-seq", "batch", "heads", "kv-heads",
                                        "head-dim", "dtype", "block", "block-q", "block-k", "size"});
  return typed.empty() ? args.command() + " with its default sizes" : typed;
}

int64_t input_bytes(const ProblemShape& s) {
  const int64_t bh = bytes_for(s.batch, s.head_dim), element = dtype_size(s.dtype);
  const int64_t q = bytes_for(bytes_for(bytes_for(bh, s.heads), s.q_len), element);
  const int64_t k = bytes_for(bytes_for(bytes_for(bh, s.kv_heads), s.k_len), element);
  return add_bytes(bytes_for(q, 2), bytes_for(k, 2));  // q and out, k and v
}

int64_t reference_bytes(const ProblemShape& s) {
  return bytes_for(bytes_for(bytes_for(bytes_for(s.batch, s.heads), s.q_len), s.head_dim), sizeof(double));
}

int64_t naive_scratch_bytes(int64_t q_len, int64_t k_len) {
  return bytes_for(bytes_for(q_len, k_len), sizeof(float) * std::max(1, omp_get_max_threads()));
}

void check_device_memory(const std::string& request, Backend backend, int64_t bytes) {
  if (backend != Backend::Cuda) return;
#if defined(SPATTN_HAVE_CUDA)
  cuda_check_memory(MemoryEstimate(request).add("q, k, v and out on the GPU", bytes));
#else
  (void)request;
  (void)bytes;
  fail("backend cuda: this spattn was built without CUDA");
#endif
}

BlockMask build_checked(const PatternSetup& setup, const std::string& request) {
  MemoryEstimate(request).add("block mask", BlockMask::build_bytes(setup.pattern, setup.shape)).check();
  return BlockMask::build(setup.pattern, setup.shape);
}

}  // namespace spattn::cli
