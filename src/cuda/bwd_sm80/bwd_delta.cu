// cuda/bwd_sm80/bwd_delta.cu - the first kernel of the backward pass: per
// query row, the statistics both gradient kernels read (BwdRowStats).
//
//   delta_i    = d_out_i . out_i - d_lse_i      (fp32 sums of the stored values)
//   lse_log2_i = lse_i * log2(e)
// A row whose LSE is -inf (no allowed key) gets lse_log2 = +inf and
// delta = 0, so that its weights exp2(s - lse_log2) are 0 and it adds
// nothing (as the host backends skip it); a NaN LSE stays NaN and spreads
// into what the row reads. The padding rows of each (batch, head) past q_len
// get the same +inf and 0. A group of kLanesPerRow lanes takes a row, each
// lane a pair of elements at a time (out and the gradient rows need only be
// 2-element aligned), then the group sums with shuffles.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/bwd_sm80/bwd_sm80.hpp"
#include "cuda/common/cuda_check.hpp"
#include "cuda/common/ptx_sm80.cuh"
#include "spattn/error.hpp"

namespace spattn::cuda_detail {
namespace {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kInf = __builtin_huge_valf();
constexpr int kLanesPerRow = 8;
constexpr int kDeltaThreads = 256;
constexpr int kRowsPerCta = kDeltaThreads / kLanesPerRow;

// Two consecutive elements of a T or fp32 row as floats.
template <typename E>
__device__ __forceinline__ float2 load_pair(const E* at);

template <>
__device__ __forceinline__ float2 load_pair<float>(const float* at) {
  return *reinterpret_cast<const float2*>(at);
}
template <>
__device__ __forceinline__ float2 load_pair<__half>(const __half* at) {
  return unpack2<__half>(*reinterpret_cast<const uint32_t*>(at));
}
template <>
__device__ __forceinline__ float2 load_pair<__nv_bfloat16>(const __nv_bfloat16* at) {
  return unpack2<__nv_bfloat16>(*reinterpret_cast<const uint32_t*>(at));
}

// T: the type of d_out; O: the type of out (T or float).
template <typename T, typename O>
__global__ void __launch_bounds__(kDeltaThreads) bwd_delta_kernel(const BwdParams p) {
  const BwdShape& shape = p.shape;
  const int64_t rows = shape.batch * shape.q_heads * p.stats.row_stride;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerCta + threadIdx.x / kLanesPerRow;
  const int part = static_cast<int>(threadIdx.x) % kLanesPerRow;
  const bool in_grid = r < rows;  // lanes past the rows still take part in the shuffles
  const int64_t i = r % p.stats.row_stride, bh = r / p.stats.row_stride;
  const int64_t h = bh % shape.q_heads, b = bh / shape.q_heads;
  const bool is_row = in_grid && i < shape.q_len;
  float sum = 0.0f;
  if (is_row) {
    const O* out = static_cast<const O*>(p.out.data) + p.out.row_offset(b, h, i);
    const T* d_out = static_cast<const T*>(p.d_out.data) + p.d_out.row_offset(b, h, i);
    for (int64_t d = 2 * part; d < shape.head_dim; d += 2 * kLanesPerRow) {
      const float2 o = load_pair<O>(out + d), g = load_pair<T>(d_out + d);
      sum = fmaf(o.x, g.x, fmaf(o.y, g.y, sum));
    }
  }
#pragma unroll
  for (int width = kLanesPerRow / 2; width > 0; width /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, width);
  if (!in_grid || part != 0) return;
  float lse_log2 = kInf, delta = 0.0f;  // a row that adds nothing
  if (is_row) {
    const float lse = p.lse.at(b, h, i);
    if (lse != -kInf) {
      lse_log2 = lse * kLog2e;
      delta = sum - (p.d_lse.data != nullptr ? p.d_lse.at(b, h, i) : 0.0f);
    }
  }
  p.stats.lse_log2[r] = lse_log2;
  p.stats.delta[r] = delta;
}

template <typename T>
void launch_typed(const BwdParams& p, cudaStream_t stream) {
  const int64_t rows = p.shape.batch * p.shape.q_heads * p.stats.row_stride;
  const int64_t ctas = (rows + kRowsPerCta - 1) / kRowsPerCta;
  require(ctas <= 0x7fffffff, "CUDA backward: ", rows, " query rows exceed the delta kernel's grid");
  if (ctas == 0) return;
  const auto kernel = p.out_f32 ? bwd_delta_kernel<T, float> : bwd_delta_kernel<T, T>;
  kernel<<<static_cast<unsigned>(ctas), kDeltaThreads, 0, stream>>>(p);
  check_launch("bwd_sm80 delta kernel launch");
}

}  // namespace

void launch_bwd_delta(const BwdParams& p, DType dtype, cudaStream_t stream) {
  if (dtype == DType::BF16) return launch_typed<__nv_bfloat16>(p, stream);
  if (dtype == DType::F16) return launch_typed<__half>(p, stream);
  fail("CUDA backward: inputs must be fp16 or bf16, got ", dtype_name(dtype));
}

}  // namespace spattn::cuda_detail
