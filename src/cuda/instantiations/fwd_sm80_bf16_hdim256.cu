// cuda/instantiations/fwd_sm80_bf16_hdim256.cu - the portable forward kernel for
// bf16 inputs and head dim 256 (one instantiation per file keeps builds parallel).
#include "cuda/fwd_sm80/fwd_launch.cuh"

namespace spattn::cuda_detail {
template void launch_fwd_sm80<__nv_bfloat16, 256, kSm80NarrowTile.cols>(const FwdParams& p, cudaStream_t stream);
template DevicePtr make_fwd_sm80_keep_bits<__nv_bfloat16, 256, kSm80NarrowTile.cols>(FwdParams& p, cudaStream_t stream);
}  // namespace spattn::cuda_detail
