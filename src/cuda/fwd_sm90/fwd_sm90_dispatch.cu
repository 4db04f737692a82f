// cuda/fwd_sm90/fwd_sm90_dispatch.cu - run-time (dtype, head dim, tile) ->
// instantiation of the Hopper forward kernel (its launch, or its plan's table
// of keep bits), and whether it can run here.
// Compiled in every CUDA build; the instantiations exist only when the build
// targets sm90 (SPATTN_CUDA_SM90_HDIM_<d> for each head dim built).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <string>

#include "cuda/common/device_info.hpp"
#include "cuda/common/head_dim_list.hpp"
#include "cuda/fwd_sm90/fwd_sm90.hpp"
#include "spattn/error.hpp"

namespace spattn::cuda_detail {
namespace {

constexpr int kBuiltHeadDims[] = {
#if defined(SPATTN_CUDA_SM90_HDIM_64)
    64,
#endif
#if defined(SPATTN_CUDA_SM90_HDIM_128)
    128,
#endif
#if defined(SPATTN_CUDA_SM90_HDIM_256)
    256,
#endif
    0};  // 0 ends the list (never a head dim)

constexpr bool is_built(int64_t head_dim) { return head_dim_in(kBuiltHeadDims, head_dim); }

// The instantiation's entry `Op` calls for the plan's tile: the head dim's
// own (sm90_tile), or the tall, small or narrow one where the head dim has
// that option.
template <typename Op, typename T, int kHeadDim, typename Params>
typename Op::Result for_tile(Params& p, cudaStream_t stream) {
  if constexpr (sm90_tall_head_dim(kHeadDim)) {
    if (p.plan.tile_rows == kSm90TallTile.rows)
      return Op::template run<T, kHeadDim, kSm90TallTile.rows, kSm90TallTile.cols>(p, stream);
  }
  if constexpr (sm90_small_head_dim(kHeadDim)) {
    if (p.plan.tile_rows == kSm90SmallTile.rows)
      return Op::template run<T, kHeadDim, kSm90SmallTile.rows, kSm90SmallTile.cols>(p, stream);
  }
  if constexpr (sm90_narrow_option_head_dim(kHeadDim)) {
    if (p.plan.tile_cols == kSm90NarrowTile.cols)
      return Op::template run<T, kHeadDim, kSm90NarrowTile.rows, kSm90NarrowTile.cols>(p, stream);
  }
  constexpr TileShape kTile = sm90_tile(kHeadDim);
  return Op::template run<T, kHeadDim, kTile.rows, kTile.cols>(p, stream);
}

// `Op` for the instantiation of (dtype, p.head_dim, the plan's tile).
template <typename Op, typename Params>
typename Op::Result dispatch(Params& p, DType dtype, cudaStream_t stream) {
  const auto typed = [&](auto element) -> typename Op::Result {
    using T = decltype(element);
    switch (p.head_dim) {
      case 64: if constexpr (is_built(64)) return for_tile<Op, T, 64>(p, stream); break;
      case 128: if constexpr (is_built(128)) return for_tile<Op, T, 128>(p, stream); break;
      case 256: if constexpr (is_built(256)) return for_tile<Op, T, 256>(p, stream); break;
    }
    fail("CUDA backend: the sm90 kernel's head_dim must be one of ", fwd_sm90_head_dims(), " in this build, got ",
         p.head_dim);
  };
  if (dtype == DType::BF16) return typed(__nv_bfloat16{});
  if (dtype == DType::F16) return typed(__half{});
  fail("CUDA backend: inputs must be fp16 or bf16, got ", dtype_name(dtype));
}

struct Launch {
  using Result = void;
  template <typename T, int kHeadDim, int kTileRows, int kTileCols>
  static void run(const FwdParams& p, cudaStream_t stream) {
    launch_fwd_sm90<T, kHeadDim, kTileRows, kTileCols>(p, stream);
  }
};

struct MakeKeepBits {
  using Result = DevicePtr;
  template <typename T, int kHeadDim, int kTileRows, int kTileCols>
  static DevicePtr run(FwdParams& p, cudaStream_t stream) {
    return make_fwd_sm90_keep_bits<T, kHeadDim, kTileRows, kTileCols>(p, stream);
  }
};

}  // namespace

bool fwd_sm90_available() {
  if (kBuiltHeadDims[0] == 0) return false;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();  // no usable device: clear the (non-sticky) error and say no
    return false;
  }
  try {
    const DeviceInfo& info = current_device_info();
    return info.major == 9 && info.minor == 0;
  } catch (const Error&) {
    cudaGetLastError();  // the device's attributes cannot be read: clear the error and say no
    return false;
  }
}

std::string fwd_sm90_head_dims() {
  return head_dim_names(kBuiltHeadDims);
}

bool fwd_sm90_supports_head_dim(int64_t head_dim) { return is_built(head_dim); }

void run_fwd_sm90(const FwdParams& p, DType dtype, cudaStream_t stream) { dispatch<Launch>(p, dtype, stream); }

DevicePtr make_fwd_sm90_keep_bits(FwdParams& p, DType dtype, cudaStream_t stream) {
  return dispatch<MakeKeepBits>(p, dtype, stream);
}

}  // namespace spattn::cuda_detail
