// cuda/common/split_combine.cu - merges the pieces of split rows (see
// tile_plan.hpp) into the output: per query row, with piece LSEs l_n and
// normalised outputs O_n,
//   lse = log(sum_n exp(l_n)),   O = sum_n exp(l_n - lse) O_n,
// computed around the largest l_n; pieces whose keys were all masked have
// l_n = -inf and weigh nothing, and a row with no allowed key at all gets
// O = 0, LSE = -inf. One CTA per (split row, batch, head), one warp per query
// row at a time, lanes across the head dim.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/common/cuda_check.hpp"
#include "cuda/common/sequence_span.hpp"
#include "cuda/common/split_combine.hpp"
#include "cuda/common/work_units.hpp"

namespace spattn::cuda_detail {
namespace {

constexpr int kCombineThreads = 128;

__device__ __forceinline__ void store_out(__nv_bfloat16* at, float x) { *at = __float2bfloat16_rn(x); }
__device__ __forceinline__ void store_out(__half* at, float x) { *at = __float2half_rn(x); }

template <typename T>
__global__ void __launch_bounds__(kCombineThreads) split_combine_kernel(const FwdParams p, int64_t tile_rows) {
  const DeviceTilePlanView& plan = p.plan;
  const int64_t heads_per_mask_head = p.q_heads / plan.blocks.num_heads;
  const int64_t copies = p.batch * heads_per_mask_head;  // launch_copies(p), its division shared with h below
  const SplitRow split = plan.split_rows[blockIdx.x / copies];
  const int64_t copy = blockIdx.x % copies;
  const int64_t b = copy / heads_per_mask_head;
  const int64_t h = split.row / plan.num_q_tiles * heads_per_mask_head + copy % heads_per_mask_head;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const float neg_inf = -__builtin_huge_valf();

  const SequenceSpan seq = sequence_span(p, b);
  const int64_t q0 = split.row % plan.num_q_tiles * tile_rows - seq.mask_row_offset;  // query row of the tile's first row
  for (int64_t r = warp; r < tile_rows; r += kCombineThreads / 32) {
    if (!seq.has_row(q0 + r)) continue;
    auto slot_row = [&](int32_t n) { return ((split.first_slot + n) * copies + copy) * tile_rows + r; };
    float top = neg_inf;
    for (int32_t n = 0; n < split.pieces; ++n) top = fmaxf(top, p.partial_lse[slot_row(n)]);
    float total = 0.0f;
    if (top != neg_inf)
      for (int32_t n = 0; n < split.pieces; ++n) total += __expf(p.partial_lse[slot_row(n)] - top);
    const float lse = top == neg_inf ? neg_inf : top + __logf(total);
    const int64_t out_row = p.out.row_offset(seq.batch, h, seq.q_first + q0 + r);
    for (int64_t d = lane; d < p.head_dim; d += 32) {
      float acc = 0.0f;
      if (lse != neg_inf)
        for (int32_t n = 0; n < split.pieces; ++n) {
          const int64_t at = slot_row(n);
          acc += __expf(p.partial_lse[at] - lse) * p.partial_o[at * p.head_dim + d];
        }
      if (p.out_f32)
        static_cast<float*>(p.out.data)[out_row + d] = acc;
      else
        store_out(static_cast<T*>(p.out.data) + out_row + d, acc);
    }
    if (p.lse != nullptr && lane == 0)
      *p.lse_at(seq.batch, h, seq.q_first + q0 + r) = lse;
  }
}

}  // namespace

template <typename T>
void launch_split_combine(const FwdParams& p, int64_t tile_rows, cudaStream_t stream) {
  const int64_t ctas = p.plan.num_split_rows * launch_copies(p);
  require(ctas <= 0x7fffffff, "CUDA backend: ", ctas, " split rows exceed the grid limit");
  split_combine_kernel<T><<<static_cast<unsigned>(ctas), kCombineThreads, 0, stream>>>(p, tile_rows);
  check_launch("split combine kernel launch");
}

template void launch_split_combine<__nv_bfloat16>(const FwdParams& p, int64_t tile_rows, cudaStream_t stream);
template void launch_split_combine<__half>(const FwdParams& p, int64_t tile_rows, cudaStream_t stream);

}  // namespace spattn::cuda_detail
