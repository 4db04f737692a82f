// cuda/common/split_combine.cu - merges the pieces of split rows (see
// tile_plan.hpp) into the output: per query row, with piece LSEs l_n and
// normalised outputs O_n,
//   lse = log(sum_n exp(l_n)),   O = sum_n exp(l_n - lse) O_n,
// computed in one pass around a running max of the l_n; pieces whose keys
// were all masked have l_n = -inf and weigh nothing, and a row with no
// allowed key at all gets O = 0, LSE = -inf. One thread per four head-dim
// columns of a row (one 16-byte load per piece), the rows of every split
// row, batch and head spread over one grid, so the merge is bound by memory,
// not by latency.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/common/cuda_check.hpp"
#include "cuda/common/dependent_launch.cuh"
#include "cuda/common/device_info.hpp"
#include "cuda/common/sequence_span.hpp"
#include "cuda/common/split_combine.hpp"
#include "cuda/common/work_units.hpp"

namespace spattn::cuda_detail {
namespace {

constexpr int kCombineThreads = 256;
constexpr int kColumnsPerThread = 4;
constexpr int kPiecesInFlight = 8;  // pieces of a row whose loads a thread issues at once

__device__ __forceinline__ void store_pair(__nv_bfloat16* at, float x, float y) {
  *reinterpret_cast<__nv_bfloat162*>(at) = __floats2bfloat162_rn(x, y);
}
__device__ __forceinline__ void store_pair(__half* at, float x, float y) {
  *reinterpret_cast<__half2*>(at) = __floats2half2_rn(x, y);
}
__device__ __forceinline__ void store_pair(float* at, float x, float y) { *reinterpret_cast<float2*>(at) = {x, y}; }

// Four consecutive elements of out from element `at` on, stored in pairs
// (out's rows are only 2-element aligned).
template <typename T>
__device__ __forceinline__ void store_columns(T* out, int64_t at, float4 v) {
  store_pair(out + at, v.x, v.y);
  store_pair(out + at + 2, v.z, v.w);
}

// Thread `index` of the grid merges columns [4 c, 4 c + 4) of tile row r of
// split row s for copy `copy`, index = ((s * copies + copy) * tile_rows + r)
// * (head_dim / 4) + c.
template <typename T>
__global__ void __launch_bounds__(kCombineThreads) split_combine_kernel(const FwdParams p, int64_t tile_rows,
                                                                        int64_t threads) {
  wait_for_prerequisite_grid();  // the forward kernel's partial results
  const int64_t index = static_cast<int64_t>(blockIdx.x) * kCombineThreads + threadIdx.x;
  if (index >= threads) return;
  const DeviceTilePlanView& plan = p.plan;
  const int64_t heads_per_mask_head = p.q_heads / plan.blocks.num_heads;
  const int64_t copies = p.batch * heads_per_mask_head;  // launch_copies(p), its division shared with h below
  const int64_t chunks = p.head_dim / kColumnsPerThread;
  const int64_t row_index = index / chunks;
  const int64_t d = (index - row_index * chunks) * kColumnsPerThread;
  const int64_t r = row_index % tile_rows;
  const int64_t split_copy = row_index / tile_rows;
  const int64_t copy = split_copy % copies;
  const SplitRow split = plan.split_rows[split_copy / copies];
  const int64_t b = copy / heads_per_mask_head;
  const int64_t h = split.row / plan.num_q_tiles * heads_per_mask_head + copy % heads_per_mask_head;

  const SequenceSpan seq = sequence_span(p, b);
  const int64_t q = split.row % plan.num_q_tiles * tile_rows - seq.mask_row_offset + r;
  if (!seq.has_row(q)) return;
  auto slot_row = [&](int32_t n) { return ((split.first_slot + n) * copies + copy) * tile_rows + r; };
  const float neg_inf = -__builtin_huge_valf();
  // One pass around a running max (as the online softmax), kPiecesInFlight
  // pieces at a time: their loads are issued together, then merged (three
  // passes, each waiting on every load in turn, took 21 us to merge a
  // decoding step's 33 pieces per row on an H100).
  float top = neg_inf, total = 0.0f;
  float4 acc{0.0f, 0.0f, 0.0f, 0.0f};
  for (int32_t first = 0; first < split.pieces; first += kPiecesInFlight) {
    float piece_lse[kPiecesInFlight];
    float4 piece_o[kPiecesInFlight];
#pragma unroll
    for (int j = 0; j < kPiecesInFlight; ++j) {
      piece_lse[j] = neg_inf;
      piece_o[j] = float4{0.0f, 0.0f, 0.0f, 0.0f};
      if (first + j < split.pieces) {
        const int64_t at = slot_row(first + j);
        piece_lse[j] = p.partial_lse[at];
        piece_o[j] = *reinterpret_cast<const float4*>(p.partial_o + at * p.head_dim + d);
      }
    }
#pragma unroll
    for (int j = 0; j < kPiecesInFlight; ++j) {
      if (piece_lse[j] == neg_inf) continue;  // no allowed key in the piece (or past the last): no weight
      const float new_top = fmaxf(top, piece_lse[j]);
      const float keep = __expf(top - new_top), weight = __expf(piece_lse[j] - new_top);  // keep = 0 while top = -inf
      total = total * keep + weight;
      acc.x = acc.x * keep + weight * piece_o[j].x;
      acc.y = acc.y * keep + weight * piece_o[j].y;
      acc.z = acc.z * keep + weight * piece_o[j].z;
      acc.w = acc.w * keep + weight * piece_o[j].w;
      top = new_top;
    }
  }
  float lse = neg_inf;
  if (total != 0.0f) {  // 0: no piece has a key; NaN (a NaN piece) stays NaN
    lse = top + __logf(total);
    const float inv = 1.0f / total;
    acc.x *= inv;
    acc.y *= inv;
    acc.z *= inv;
    acc.w *= inv;
  }
  const int64_t at = p.out.row_offset(seq.batch, h, seq.q_first + q) + d;
  if (p.out_f32)
    store_columns(static_cast<float*>(p.out.data), at, acc);
  else
    store_columns(static_cast<T*>(p.out.data), at, acc);
  if (p.lse != nullptr && d == 0) *p.lse_at(seq.batch, h, seq.q_first + q) = lse;
}

}  // namespace

template <typename T>
void launch_split_combine(const FwdParams& p, int64_t tile_rows, cudaStream_t stream) {
  require(p.head_dim % kColumnsPerThread == 0, "CUDA backend: split rows need a head_dim divisible by ",
          kColumnsPerThread, ", got ", p.head_dim);
  const int64_t threads = p.plan.num_split_rows * launch_copies(p) * tile_rows * (p.head_dim / kColumnsPerThread);
  const int64_t ctas = (threads + kCombineThreads - 1) / kCombineThreads;
  require(ctas <= 0x7fffffff, "CUDA backend: the merge of ", p.plan.num_split_rows, " split rows needs ", ctas,
          " CTAs, more than the grid limit");
  // Launched as the forward kernel's programmatic dependent where the device
  // has it (dependent_launch.cuh): the merge's launch then overlaps the
  // forward kernel's end.
  cudaLaunchAttribute dependent{};
  dependent.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  dependent.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(ctas));
  config.blockDim = dim3(kCombineThreads);
  config.stream = stream;
  config.attrs = &dependent;
  config.numAttrs = current_device_info().major >= 9 ? 1 : 0;
  check_cuda(cudaLaunchKernelEx(&config, split_combine_kernel<T>, p, tile_rows, threads),
             "split combine kernel launch");
}

template void launch_split_combine<__nv_bfloat16>(const FwdParams& p, int64_t tile_rows, cudaStream_t stream);
template void launch_split_combine<__half>(const FwdParams& p, int64_t tile_rows, cudaStream_t stream);

}  // namespace spattn::cuda_detail
