// cuda/bwd_sm80/bwd_dispatch.cu - run-time (dtype, head dim) -> instantiation
// of the backward gradient kernels, after the delta kernel. Only the head
// dims the build lists (SPATTN_CUDA_BWD_HDIM_<d>, from SPATTN_CUDA_HEAD_DIMS
// intersected with the ones the kernels take) are dispatched.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <string>

#include "cuda/bwd_sm80/bwd_sm80.hpp"
#include "cuda/common/head_dim_list.hpp"
#include "spattn/error.hpp"

namespace spattn::cuda_detail {
namespace {

constexpr int kBuiltHeadDims[] = {
#if defined(SPATTN_CUDA_BWD_HDIM_64)
    64,
#endif
#if defined(SPATTN_CUDA_BWD_HDIM_128)
    128,
#endif
    0};  // 0 ends the list (never a head dim)

constexpr bool is_built(int64_t head_dim) { return head_dim_in(kBuiltHeadDims, head_dim); }

[[noreturn]] void fail_head_dim(int64_t head_dim) {
  const std::string built = head_dim_names(kBuiltHeadDims);
  fail("CUDA backward: head_dim must be one of ", built.empty() ? "(none)" : built, " in this build, got ",
       head_dim);
}

template <typename T>
void run_typed(const BwdParams& p, const BwdPlanView& plan, cudaStream_t stream) {
  switch (p.shape.head_dim) {
    case 64: if constexpr (is_built(64)) return launch_bwd_sm80<T, 64>(p, plan, stream); break;
    case 128: if constexpr (is_built(128)) return launch_bwd_sm80<T, 128>(p, plan, stream); break;
  }
  fail_head_dim(p.shape.head_dim);
}

}  // namespace

void check_bwd_sm80_head_dim(int64_t head_dim) {
  if (!is_built(head_dim)) fail_head_dim(head_dim);
}

void run_backward(const BwdParams& p, const BwdPlanView& plan, DType dtype, cudaStream_t stream) {
  require(dtype == DType::BF16 || dtype == DType::F16, "CUDA backward: inputs must be fp16 or bf16, got ",
          dtype_name(dtype));
  check_bwd_sm80_head_dim(p.shape.head_dim);
  launch_bwd_delta(p, dtype, stream);
  if (dtype == DType::BF16) return run_typed<__nv_bfloat16>(p, plan, stream);
  run_typed<__half>(p, plan, stream);
}

}  // namespace spattn::cuda_detail
