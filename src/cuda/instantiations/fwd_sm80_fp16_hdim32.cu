// cuda/instantiations/fwd_sm80_fp16_hdim32.cu - the portable forward kernel for
// fp16 inputs and head dim 32 (one instantiation per file keeps builds parallel).
#include "cuda/fwd_sm80/fwd_launch.cuh"

namespace spattn::cuda_detail {
template void launch_fwd_sm80<__half, 32, kSm80NarrowTile.cols>(const FwdParams& p, cudaStream_t stream);
template DevicePtr make_fwd_sm80_keep_bits<__half, 32, kSm80NarrowTile.cols>(FwdParams& p, cudaStream_t stream);
}  // namespace spattn::cuda_detail
