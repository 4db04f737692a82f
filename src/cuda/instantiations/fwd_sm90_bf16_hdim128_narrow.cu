// cuda/instantiations/fwd_sm90_bf16_hdim128_narrow.cu - the Hopper forward kernel
// for bf16 inputs and head dim 128 on the narrow tile (128 x 64, kSm90NarrowTile;
// sm_90a only; one instantiation per file).
#include "cuda/fwd_sm90/fwd_sm90_launch.cuh"

namespace spattn::cuda_detail {
template void launch_fwd_sm90<__nv_bfloat16, 128, 128, 64>(const FwdParams& p, cudaStream_t stream);
template DevicePtr make_fwd_sm90_keep_bits<__nv_bfloat16, 128, 128, 64>(FwdParams& p, cudaStream_t stream);
}  // namespace spattn::cuda_detail
