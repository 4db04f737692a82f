// cuda/instantiations/bwd_sm80_fp16_hdim64.cu - the backward gradient kernels for
// fp16 inputs and head dim 64 (one instantiation per file keeps builds parallel).
#include "cuda/bwd_sm80/bwd_launch.cuh"

namespace spattn::cuda_detail {
template void launch_bwd_sm80<__half, 64>(const BwdParams& p, const BwdPlanView& plan, cudaStream_t stream);
}  // namespace spattn::cuda_detail
