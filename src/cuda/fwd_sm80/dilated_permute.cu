// cuda/fwd_sm80/dilated_permute.cu - gather and merge kernels of the dilated
// token permutation (see dilated_permute.hpp). Both are memory-bound: the
// gather moves one 16-byte chunk per thread, the merge one row per warp with
// lanes across the head dim.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/common/cuda_check.hpp"
#include "cuda/common/row_merge.cuh"
#include "cuda/fwd_sm80/dilated_permute.hpp"
#include "spattn/error.hpp"

namespace spattn::cuda_detail {
namespace {

constexpr int kThreads = 256;

struct RowIndex {
  int64_t b, h, position;
};

__device__ __forceinline__ RowIndex permuted_row(const PermuteGeometry& g, int64_t n) {
  const int64_t a = n % g.group, seg = n / g.group % g.num_segments;
  const int64_t rest = n / (g.group * g.num_segments);
  const int64_t h = rest % g.heads, b = rest / g.heads;
  return RowIndex{b, h, g.first_position + seg * g.segment + h % g.rate + a * g.rate};
}

__global__ void __launch_bounds__(kThreads) gather_kernel(const PermuteGeometry g, const TensorArg src,
                                                          int64_t head_div, int64_t row_shift, uint4* dst,
                                                          int64_t chunks_per_row, int64_t total) {
  for (int64_t c = blockIdx.x * int64_t{kThreads} + threadIdx.x; c < total; c += int64_t{gridDim.x} * kThreads) {
    const int64_t n = c / chunks_per_row, chunk = c % chunks_per_row;
    const RowIndex r = permuted_row(g, n);
    const int64_t at = src.row_offset(r.b, r.h / head_div, r.position - row_shift);
    // 2-byte elements: 8 per chunk.
    dst[c] = reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(src.data) + at)[chunk];
  }
}

__device__ __forceinline__ float load_out(const __nv_bfloat16* at) { return __bfloat162float(*at); }
__device__ __forceinline__ float load_out(const __half* at) { return __half2float(*at); }
__device__ __forceinline__ void store_out(__nv_bfloat16* at, float x) { *at = __float2bfloat16_rn(x); }
__device__ __forceinline__ void store_out(__half* at, float x) { *at = __float2half_rn(x); }

template <typename T>
__global__ void __launch_bounds__(kThreads) merge_kernel(const PermuteGeometry g, const FwdParams p,
                                                         const float* o_b, const float* lse_b_rows) {
  const float neg_inf = -__builtin_huge_valf();
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t warps = int64_t{gridDim.x} * (kThreads / 32);
  for (int64_t n = blockIdx.x * int64_t{kThreads / 32} + threadIdx.x / 32; n < g.rows(); n += warps) {
    const float lse_b = lse_b_rows[n];
    if (lse_b == neg_inf) continue;  // the permuted pass saw no key: the rest stands
    const RowIndex r = permuted_row(g, n);
    const int64_t i = r.position - (p.k_len - p.q_len);
    float* lse_at = p.lse_at(r.b, r.h, i);
    const RowMerge merge = RowMerge::of(*lse_at, lse_b);
    const float w_a = merge.w_a, w_b = merge.w_b, lse = merge.lse;
    const int64_t out_row = p.out.row_offset(r.b, r.h, i);
    const float* from = o_b + n * g.head_dim;
    for (int64_t d = lane; d < g.head_dim; d += 32) {
      if (p.out_f32) {
        float* at = static_cast<float*>(p.out.data) + out_row + d;
        *at = (w_a != 0.0f ? w_a * *at : 0.0f) + w_b * from[d];
      } else {
        T* at = static_cast<T*>(p.out.data) + out_row + d;
        store_out(at, (w_a != 0.0f ? w_a * load_out(at) : 0.0f) + w_b * from[d]);
      }
    }
    __syncwarp();
    if (lane == 0) *lse_at = lse;
  }
}

unsigned grid_for(int64_t units, int64_t per_cta) {
  const int64_t ctas = (units + per_cta - 1) / per_cta;
  return static_cast<unsigned>(ctas < 65535 * 16 ? ctas : 65535 * 16);
}

}  // namespace

void launch_dilated_gather(const PermuteGeometry& g, const TensorArg& src, int64_t head_div, int64_t row_shift,
                           void* dst, DType dtype, cudaStream_t stream) {
  require(dtype_size(dtype) == 2, "CUDA backend: the dilated gather moves 2-byte elements, got ",
          dtype_name(dtype));
  const int64_t chunks_per_row = g.head_dim / 8, total = g.rows() * chunks_per_row;
  if (total == 0) return;
  gather_kernel<<<grid_for(total, kThreads), kThreads, 0, stream>>>(g, src, head_div, row_shift,
                                                                   static_cast<uint4*>(dst), chunks_per_row, total);
  check_launch("dilated gather kernel launch");
}

void launch_dilated_merge(const PermuteGeometry& g, const FwdParams& p, const float* o, const float* lse,
                          DType dtype, cudaStream_t stream) {
  if (g.rows() == 0) return;
  const unsigned grid = grid_for(g.rows(), kThreads / 32);
  if (dtype == DType::BF16)
    merge_kernel<__nv_bfloat16><<<grid, kThreads, 0, stream>>>(g, p, o, lse);
  else
    merge_kernel<__half><<<grid, kThreads, 0, stream>>>(g, p, o, lse);
  check_launch("dilated merge kernel launch");
}

}  // namespace spattn::cuda_detail
