// cuda/instantiations/fwd_sm90_fp16_hdim64_narrow.cu - the Hopper forward kernel
// for fp16 inputs and head dim 64 on the narrow tile (128 x 64, kSm90NarrowTile;
// sm_90a only; one instantiation per file).
#include "cuda/fwd_sm90/fwd_sm90_launch.cuh"

namespace spattn::cuda_detail {
template void launch_fwd_sm90<__half, 64, 128, 64>(const FwdParams& p, cudaStream_t stream);
template DevicePtr make_fwd_sm90_keep_bits<__half, 64, 128, 64>(FwdParams& p, cudaStream_t stream);
}  // namespace spattn::cuda_detail
