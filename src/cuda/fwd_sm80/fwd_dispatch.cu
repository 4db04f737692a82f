// cuda/fwd_sm80/fwd_dispatch.cu - run-time (dtype, head dim, tile) ->
// instantiation of the portable forward kernel (its launch, or its plan's
// table of keep bits). Only the head dims of the build's
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

// The instantiation's entry `Op` calls for the plan's tile (head dims of
// the wide tile have an instantiation for each tile).
template <typename Op, typename T, int kHeadDim, typename Params>
typename Op::Result for_tile(Params& p, cudaStream_t stream) {
  if constexpr (sm80_wide_head_dim(kHeadDim)) {
    if (p.plan.tile_cols == kSm80WideTile.cols) return Op::template run<T, kHeadDim, kSm80WideTile.cols>(p, stream);
  }
  require(p.plan.tile_cols == kSm80NarrowTile.cols, "CUDA sm80 kernel: no instantiation for ", p.plan.tile_cols,
          "-key tiles at head_dim ", kHeadDim);
  return Op::template run<T, kHeadDim, kSm80NarrowTile.cols>(p, stream);
}

// `Op` for the instantiation of (dtype, p.head_dim, the plan's tile).
template <typename Op, typename Params>
typename Op::Result dispatch(Params& p, DType dtype, cudaStream_t stream) {
  const auto typed = [&](auto element) -> typename Op::Result {
    using T = decltype(element);
    switch (p.head_dim) {
      case 32: if constexpr (is_built(32)) return for_tile<Op, T, 32>(p, stream); break;
      case 64: if constexpr (is_built(64)) return for_tile<Op, T, 64>(p, stream); break;
      case 96: if constexpr (is_built(96)) return for_tile<Op, T, 96>(p, stream); break;
      case 128: if constexpr (is_built(128)) return for_tile<Op, T, 128>(p, stream); break;
      case 256: if constexpr (is_built(256)) return for_tile<Op, T, 256>(p, stream); break;
    }
    fail("CUDA backend: head_dim must be one of ", built_list(), " in this build, got ", p.head_dim);
  };
  if (dtype == DType::BF16) return typed(__nv_bfloat16{});
  if (dtype == DType::F16) return typed(__half{});
  fail("CUDA backend: inputs must be fp16 or bf16, got ", dtype_name(dtype));
}

struct Launch {
  using Result = void;
  template <typename T, int kHeadDim, int kTileCols>
  static void run(const FwdParams& p, cudaStream_t stream) {
    launch_fwd_sm80<T, kHeadDim, kTileCols>(p, stream);
  }
};

struct MakeKeepBits {
  using Result = DevicePtr;
  template <typename T, int kHeadDim, int kTileCols>
  static DevicePtr run(FwdParams& p, cudaStream_t stream) {
    return make_fwd_sm80_keep_bits<T, kHeadDim, kTileCols>(p, stream);
  }
};

}  // namespace

void check_fwd_sm80_head_dim(int64_t head_dim) {
  require(is_built(head_dim), "CUDA backend: head_dim must be one of ", built_list(), " in this build, got ",
          head_dim);
}

void run_fwd_sm80(const FwdParams& p, DType dtype, cudaStream_t stream) { dispatch<Launch>(p, dtype, stream); }

DevicePtr make_fwd_sm80_keep_bits(FwdParams& p, DType dtype, cudaStream_t stream) {
  return dispatch<MakeKeepBits>(p, dtype, stream);
}

}  // namespace spattn::cuda_detail
