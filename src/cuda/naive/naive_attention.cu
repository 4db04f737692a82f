// cuda/naive/naive_attention.cu - the naive CUDA baseline of the seed
// programs: one thread per query row, no tiling, no shared memory.
//
// Each thread walks its row's kept key blocks through the block iterator
// (BlockMaskView on the device), tests pairs of partial blocks with the
// pattern predicate, and runs an online softmax in fp32, reading q, k and v
// straight from global memory. It exists to reproduce the seed tables (fused
// kernel vs one-thread-per-row) and as a second, independent GPU code path.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/common/cuda_check.hpp"
#include "cuda/common/fwd_params.hpp"
#include "cuda/naive/naive_attention.hpp"
#include "spattn/pattern_terms.hpp"

namespace spattn::cuda_detail {
namespace {

constexpr int kMaxHeadDim = 256;
constexpr int kThreadsPerCta = 128;

__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }

__device__ __forceinline__ void store_value(__nv_bfloat16* at, float x) { *at = __float2bfloat16_rn(x); }
__device__ __forceinline__ void store_value(__half* at, float x) { *at = __float2half_rn(x); }

// Writes x to element `at` of out, which holds T or (f32) floats.
template <typename T>
__device__ __forceinline__ void store(void* out, int64_t at, float x, bool f32) {
  if (f32)
    static_cast<float*>(out)[at] = x;
  else
    store_value(static_cast<T*>(out) + at, x);
}

template <typename T>
__global__ void __launch_bounds__(kThreadsPerCta) naive_kernel(const FwdParams p) {
  const int64_t item = static_cast<int64_t>(blockIdx.x) * kThreadsPerCta + threadIdx.x;
  if (item >= p.batch * p.q_heads * p.q_len) return;
  const int64_t i = item % p.q_len, h = (item / p.q_len) % p.q_heads, b = item / (p.q_len * p.q_heads);
  const int64_t kv_head = h / (p.q_heads / p.kv_heads);
  const int64_t D = p.head_dim;
  const BlockMaskView& mask = p.mask.blocks;
  const PatternExpr* expr = p.mask.exprs ? p.mask.expr_for_head(h, p.q_heads) : nullptr;
  const T* q = static_cast<const T*>(p.q.data) + p.q.row_offset(b, h, i);

  float acc[kMaxHeadDim];
  for (int64_t d = 0; d < D; ++d) acc[d] = 0.0f;
  float running_max = -__builtin_huge_valf(), running_sum = 0.0f;
  const int64_t r = mask.row(mask.mask_head(h, p.q_heads), i / mask.block_q);
  for (int64_t at = mask.row_begin(r); at < mask.row_end(r); ++at) {
    const int64_t kb = mask.kv_indices[at];
    const bool full = mask.kv_full[at] != 0;
    for (int64_t j = mask.k_first(kb); j < mask.k_last(kb); ++j) {
      if (!full && !expr_allows(*expr, h, i, i + (p.k_len - p.q_len), j)) continue;
      const T* k = static_cast<const T*>(p.k.data) + p.k.row_offset(b, kv_head, j);
      const T* v = static_cast<const T*>(p.v.data) + p.v.row_offset(b, kv_head, j);
      float score = 0.0f;
      for (int64_t d = 0; d < D; ++d) score += to_float(q[d]) * to_float(k[d]);
      score *= p.scale;
      if (score == -__builtin_huge_valf()) continue;  // weighs 0, as a masked key
      if (score > running_max) {
        const float rescale = __expf(running_max - score);
        running_sum *= rescale;
        for (int64_t d = 0; d < D; ++d) acc[d] *= rescale;
        running_max = score;
      }
      const float weight = __expf(score - running_max);
      running_sum += weight;
      for (int64_t d = 0; d < D; ++d) acc[d] += weight * to_float(v[d]);
    }
  }
  const bool empty = running_sum == 0.0f;  // no allowed key; a NaN sum keeps the row NaN
  const float inv = empty ? 0.0f : 1.0f / running_sum;
  const int64_t out_row = p.out.row_offset(b, h, i);
  for (int64_t d = 0; d < D; ++d) store<T>(p.out.data, out_row + d, acc[d] * inv, p.out_f32);
  if (p.lse != nullptr)
    *p.lse_at(b, h, i) = empty ? -__builtin_huge_valf() : running_max + __logf(running_sum);
}

template <typename T>
void launch(const FwdParams& p, cudaStream_t stream) {
  const int64_t rows = p.batch * p.q_heads * p.q_len;
  const int64_t ctas = (rows + kThreadsPerCta - 1) / kThreadsPerCta;
  require(ctas <= 0x7fffffff, "CUDA backend: ", rows, " query rows exceed the naive kernel's grid limit");
  naive_kernel<T><<<static_cast<unsigned>(ctas), kThreadsPerCta, 0, stream>>>(p);
  check_launch("naive kernel launch");
}

}  // namespace

void run_naive(const FwdParams& p, DType dtype, cudaStream_t stream) {
  require(p.head_dim <= kMaxHeadDim, "CUDA naive baseline: head_dim must be <= ", kMaxHeadDim, ", got ",
          p.head_dim);
  if (dtype == DType::BF16) return launch<__nv_bfloat16>(p, stream);
  if (dtype == DType::F16) return launch<__half>(p, stream);
  fail("CUDA naive baseline: inputs must be fp16 or bf16, got ", dtype_name(dtype));
}

}  // namespace spattn::cuda_detail
