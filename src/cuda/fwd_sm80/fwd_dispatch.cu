// cuda/fwd_sm80/fwd_dispatch.cu - run-time (dtype, head dim) -> instantiation
// of the portable forward kernel. Only the head dims of the build's
// SPATTN_CUDA_HEAD_DIMS (passed as SPATTN_CUDA_HDIM_<d>) are dispatched.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <string>

#include "cuda/common/head_dim_list.hpp"
#include "cuda/fwd_sm80/fwd_sm80.hpp"
#include "spattn/error.hpp"

namespace spattn::cuda_detail {
namespace {

constexpr int kBuiltHeadDims[] = {
#if defined(SPATTN_CUDA_HDIM_32)
    32,
#endif
#if defined(SPATTN_CUDA_HDIM_64)
    64,
#endif
#if defined(SPATTN_CUDA_HDIM_96)
    96,
#endif
#if defined(SPATTN_CUDA_HDIM_128)
    128,
#endif
#if defined(SPATTN_CUDA_HDIM_256)
    256,
#endif
    0};  // 0 ends the list (never a head dim)

constexpr bool is_built(int64_t head_dim) { return head_dim_in(kBuiltHeadDims, head_dim); }

std::string built_list() {
  return head_dim_names(kBuiltHeadDims);
}

// Head dims of the wide tile have an instantiation for each tile.
template <typename T, int kHeadDim>
void launch_for_tile(const FwdParams& p, cudaStream_t stream) {
  if constexpr (sm80_wide_head_dim(kHeadDim)) {
    if (p.plan.tile_cols == kSm80WideTile.cols) return launch_fwd_sm80<T, kHeadDim, kSm80WideTile.cols>(p, stream);
  }
  require(p.plan.tile_cols == kSm80NarrowTile.cols, "CUDA sm80 kernel: no instantiation for ", p.plan.tile_cols,
          "-key tiles at head_dim ", kHeadDim);
  launch_fwd_sm80<T, kHeadDim, kSm80NarrowTile.cols>(p, stream);
}

template <typename T>
void run_typed(const FwdParams& p, cudaStream_t stream) {
  switch (p.head_dim) {
    case 32: if constexpr (is_built(32)) return launch_for_tile<T, 32>(p, stream); break;
    case 64: if constexpr (is_built(64)) return launch_for_tile<T, 64>(p, stream); break;
    case 96: if constexpr (is_built(96)) return launch_for_tile<T, 96>(p, stream); break;
    case 128: if constexpr (is_built(128)) return launch_for_tile<T, 128>(p, stream); break;
    case 256: if constexpr (is_built(256)) return launch_for_tile<T, 256>(p, stream); break;
  }
  fail("CUDA backend: head_dim must be one of ", built_list(), " in this build, got ", p.head_dim);
}

}  // namespace

void check_fwd_sm80_head_dim(int64_t head_dim) {
  require(is_built(head_dim), "CUDA backend: head_dim must be one of ", built_list(), " in this build, got ",
          head_dim);
}

void run_fwd_sm80(const FwdParams& p, DType dtype, cudaStream_t stream) {
  if (dtype == DType::BF16) return run_typed<__nv_bfloat16>(p, stream);
  if (dtype == DType::F16) return run_typed<__half>(p, stream);
  fail("CUDA backend: inputs must be fp16 or bf16, got ", dtype_name(dtype));
}

}  // namespace spattn::cuda_detail
