// cuda/instantiations/bwd_sm80_bf16_hdim128.cu - the backward gradient kernels for
// bf16 inputs and head dim 128 (one instantiation per file keeps builds parallel).
#include "cuda/bwd_sm80/bwd_launch.cuh"

namespace spattn::cuda_detail {
template void launch_bwd_sm80<__nv_bfloat16, 128>(const BwdParams& p, const BwdPlanView& plan, cudaStream_t stream);
}  // namespace spattn::cuda_detail
