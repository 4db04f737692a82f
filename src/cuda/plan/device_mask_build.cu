// cuda/plan/device_mask_build.cu - the kernels and host steps of the device
// BlockMask builder (see device_mask_build.hpp).
//
// One thread per lane: a chunk of key blocks of one (mask head, query block)
// row (the walk of device_mask_walk.hpp). The same walk runs twice: the count
// pass stores each lane's number of kept blocks, an inclusive scan over all
// lanes' counts (rows after one another) gives every lane its first output
// slot and every row its offset, and the fill pass writes the blocks there in
// key order, so the rows come out sorted without any sort. Cost follows the
// boundaries of the pattern (O(log) classifications per boundary and lane),
// not the L x L grid; short lanes keep the longest serial walk short.
#include <cub/device/device_scan.cuh>

#include <limits>

#include "cuda/common/cuda_check.hpp"
#include "cuda/common/scratch_pool.hpp"
#include "cuda/plan/device_mask_build.hpp"
#include "cuda/plan/device_mask_walk.hpp"
#include "pattern/build_checks.hpp"

namespace spattn::cuda_detail {
namespace {

constexpr int kThreadsPerCta = 128;

using pattern_math::ceil_div;
using pattern_math::min64;

// Count pass (kWrite false): lane_counts[slot] = kept blocks of the lane's
// chunk, slot = row * lanes_per_row + lane. Fill pass (kWrite true): writes
// them from lane_offsets[slot] on, and the row offsets.
template <bool kWrite>
__global__ void __launch_bounds__(kThreadsPerCta)
    walk_rows_kernel(RowGrid g, int64_t* lane_counts, const int64_t* lane_offsets, int64_t* row_offsets,
                     int32_t* kv_indices, uint8_t* kv_full) {
  const int64_t slot = static_cast<int64_t>(blockIdx.x) * kThreadsPerCta + threadIdx.x;
  if (slot >= g.rows * g.lanes_per_row) return;
  const int64_t row = slot / g.lanes_per_row, lane = slot % g.lanes_per_row;
  if constexpr (!kWrite) {
    int64_t count = 0;
    walk_lane(g, row, lane, [&](int64_t a, int64_t b, bool) { count += b - a + 1; });
    lane_counts[slot] = count;
  } else {
    int64_t at = lane_offsets[slot];
    walk_lane(g, row, lane, [&](int64_t a, int64_t b, bool full) {
      for (int64_t kb = a; kb <= b; ++kb, ++at) {
        kv_indices[at] = static_cast<int32_t>(kb);
        kv_full[at] = full ? 1 : 0;
      }
    });
    if (lane == 0) row_offsets[row] = lane_offsets[slot];
    if (slot == g.rows * g.lanes_per_row - 1) row_offsets[g.rows] = lane_offsets[slot + 1];
  }
}

// `count` elements of T in owned device memory.
template <typename T>
DevicePtr device_array(int64_t count, const char* what) {
  return device_alloc(static_cast<size_t>(count > 0 ? count : 0) * sizeof(T), what);
}

}  // namespace

std::unique_ptr<DeviceMaskArrays> build_mask_on_device(const Pattern& pattern, const MaskShape& shape,
                                                       const DeviceExprs& exprs, cudaStream_t stream) {
  check_build_args(pattern, shape);
  require(exprs.num_exprs() == pattern.num_exprs(), "device mask build: the device pattern has ",
          exprs.num_exprs(), " expressions, the pattern ", pattern.num_exprs());
  RowGrid g;
  g.exprs = exprs.exprs();
  g.num_exprs = exprs.num_exprs();
  g.query_heads = shape.num_heads;
  g.num_q_blocks = ceil_div(shape.q_len, shape.block_q);
  g.num_k_blocks = ceil_div(shape.k_len, shape.block_k);
  g.q_len = shape.q_len;
  g.k_len = shape.k_len;
  g.block_q = shape.block_q;
  g.block_k = shape.block_k;
  g.offset = shape.k_len - shape.q_len;
  const int64_t mask_heads = plan_mask_heads(pattern, shape);
  constexpr int64_t kMaxSlots = std::numeric_limits<int32_t>::max() - 1;  // CUB's item count
  require(g.num_q_blocks <= kMaxSlots / mask_heads, "device mask build: mask heads (", mask_heads,
          ") times query blocks (", g.num_q_blocks, ") must be below 2^31; raise block_q (", shape.block_q, ")");
  g.rows = mask_heads * g.num_q_blocks;
  set_lanes(g, lane_blocks_for(g));
  require(g.rows <= kMaxSlots / g.lanes_per_row, "device mask build: ", g.rows, " rows of ", g.lanes_per_row,
          " lanes each must be below 2^31 lanes; raise block_q (", shape.block_q, ")");
  const int64_t slots = g.rows * g.lanes_per_row;

  auto out = std::make_unique<DeviceMaskArrays>();
  out->row_offsets_ = device_array<int64_t>(g.rows + 1, "cudaMalloc of the mask's row offsets");
  auto* row_offsets = static_cast<int64_t*>(out->row_offsets_.get());

  // Scratch: lane counts, lane offsets (one more entry: the total), CUB's temp.
  size_t scan_bytes = 0;
  check_cuda(cub::DeviceScan::InclusiveSum(nullptr, scan_bytes, static_cast<const int64_t*>(nullptr),
                                           static_cast<int64_t*>(nullptr), static_cast<int>(slots), stream),
             "cub::DeviceScan::InclusiveSum (size query)");
  const size_t counts_bytes = scratch_aligned(static_cast<size_t>(slots) * sizeof(int64_t));
  const size_t offsets_bytes = scratch_aligned(static_cast<size_t>(slots + 1) * sizeof(int64_t));
  ScopedScratch scratch(counts_bytes + offsets_bytes + scan_bytes, stream);
  char* const scratch_bytes = static_cast<char*>(scratch.get());
  auto* lane_counts = reinterpret_cast<int64_t*>(scratch_bytes);
  auto* lane_offsets = reinterpret_cast<int64_t*>(scratch_bytes + counts_bytes);
  void* scan_temp = scratch_bytes + counts_bytes + offsets_bytes;

  const dim3 grid(static_cast<unsigned>(ceil_div(slots, kThreadsPerCta)));
  const dim3 block(kThreadsPerCta);
  walk_rows_kernel<false><<<grid, block, 0, stream>>>(g, lane_counts, nullptr, nullptr, nullptr, nullptr);
  check_launch("device mask build: count kernel");
  check_cuda(cudaMemsetAsync(lane_offsets, 0, sizeof(int64_t), stream), "cudaMemsetAsync");
  check_cuda(cub::DeviceScan::InclusiveSum(scan_temp, scan_bytes, lane_counts, lane_offsets + 1,
                                           static_cast<int>(slots), stream),
             "cub::DeviceScan::InclusiveSum");
  int64_t total = 0;
  check_cuda(cudaMemcpyAsync(&total, lane_offsets + slots, sizeof(int64_t), cudaMemcpyDeviceToHost, stream),
             "cudaMemcpyAsync of the block count");
  check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize for the block count");

  out->num_blocks_ = total;
  out->kv_indices_ = device_array<int32_t>(total, "cudaMalloc of the mask's kv_indices");
  out->kv_full_ = device_array<uint8_t>(total, "cudaMalloc of the mask's kv_full");
  auto* kv_indices = static_cast<int32_t*>(out->kv_indices_.get());
  auto* kv_full = static_cast<uint8_t*>(out->kv_full_.get());
  walk_rows_kernel<true><<<grid, block, 0, stream>>>(g, nullptr, lane_offsets, row_offsets, kv_indices, kv_full);
  check_launch("device mask build: fill kernel");

  BlockMaskView& v = out->view_;
  v.q_len = shape.q_len;
  v.k_len = shape.k_len;
  v.block_q = shape.block_q;
  v.block_k = shape.block_k;
  v.num_q_blocks = g.num_q_blocks;
  v.num_k_blocks = g.num_k_blocks;
  v.num_heads = mask_heads;
  v.row_offsets = row_offsets;
  v.kv_indices = kv_indices;
  v.kv_full = kv_full;
  return out;
}

}  // namespace spattn::cuda_detail
