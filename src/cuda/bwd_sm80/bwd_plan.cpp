// cuda/bwd_sm80/bwd_plan.cpp - the backward plan from a BlockMask, on the host
// and uploaded (see bwd_plan.hpp). Time and memory are proportional to the
// kept blocks (at tile granularity where the mask's blocks are smaller than
// the tile): a pass to transpose them and one to count each tile's work.
#include "cuda/bwd_sm80/bwd_plan.hpp"

#include <algorithm>
#include <numeric>
#include <utility>

#include "cuda/bwd_sm80/bwd_sm80.hpp"
#include "cuda/common/cuda_check.hpp"
#include "cuda/plan/device_exprs.hpp"
#include "spattn/error.hpp"
#include "spattn/pattern_terms.hpp"

namespace spattn::cuda_detail {
namespace {

using pattern_math::ceil_div;

// Tile indices [0, n) by descending work, ties in ascending order.
std::vector<int32_t> by_descending_work(const std::vector<int64_t>& work) {
  std::vector<int32_t> order(work.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return work[a] > work[b]; });
  return order;
}

// The walked query-major lists as a BlockMaskView (host pointers).
BlockMaskView walked_lists(const BackwardLists& l) {
  const BwdPlanView& s = l.scalars;
  BlockMaskView w;
  w.q_len = l.mask->q_len();
  w.k_len = l.mask->k_len();
  w.block_q = s.q_tiles_per_block * kBwdTileSide;
  w.block_k = s.k_tiles_per_block * kBwdTileSide;
  w.num_q_blocks = s.num_q_blocks;
  w.num_k_blocks = s.num_k_blocks;
  w.num_heads = s.num_heads;
  w.row_offsets = l.derived ? l.derived->row_offsets.data() : l.mask->row_offsets().data();
  w.kv_indices = l.derived ? l.derived->kv_indices.data() : l.mask->kv_indices().data();
  w.kv_full = l.derived ? l.derived->kv_full.data() : l.mask->kv_full().data();
  return w;
}

bool has_partial_blocks(const BlockMask& mask) { return mask.num_full_blocks() < mask.num_blocks(); }

template <typename T>
const T* upload(std::vector<DevicePtr>& owned, const T* host, int64_t count, const char* what, cudaStream_t stream) {
  const size_t bytes = static_cast<size_t>(count) * sizeof(T);
  DevicePtr device = device_alloc(bytes, what);
  if (bytes > 0) check_cuda(cudaMemcpyAsync(device.get(), host, bytes, cudaMemcpyHostToDevice, stream), what);
  const T* at = static_cast<const T*>(device.get());
  owned.push_back(std::move(device));
  return at;
}

template <typename T>
const T* upload(std::vector<DevicePtr>& owned, const std::vector<T>& host, const char* what, cudaStream_t stream) {
  return upload(owned, host.data(), static_cast<int64_t>(host.size()), what, stream);
}

}  // namespace

void check_backward_mask(const BlockMask& mask) {
  require(tile_fits(mask, kBwdTile), "CUDA backward: mask blocks of ", mask.block_q(), " x ", mask.block_k(),
          " do not fit the kernels' ", kBwdTile.rows, " x ", kBwdTile.cols,
          " tile: each block side must be a multiple of ", kBwdTile.rows,
          " or a power of two, with at most 64 blocks per tile (and mask heads times query tiles within 32 bits)");
}

BwdPlanView BackwardLists::host_view() const {
  BwdPlanView v = scalars;
  const BlockMaskView w = walked_lists(*this);
  v.row_offsets = w.row_offsets;
  v.kv_indices = w.kv_indices;
  v.kv_full = w.kv_full;
  v.col_offsets = columns.col_offsets.data();
  v.q_indices = columns.q_indices.data();
  v.q_full = columns.q_full.data();
  v.q_forward = derived ? columns.forward_position.data() : nullptr;
  v.sub_present = derived ? derived->sub_present.data() : nullptr;
  v.sub_full = derived ? derived->sub_full.data() : nullptr;
  if (has_partial_blocks(*mask)) {
    v.exprs = mask->pattern()->exprs().data();
    v.num_exprs = mask->pattern()->num_exprs();
  }
  v.q_tile_order = q_tile_order.data();
  v.k_tile_order = k_tile_order.data();
  return v;
}

BackwardLists make_backward_lists(const BlockMask& mask) {
  check_backward_mask(mask);
  const HostTilePlan tiles = make_tile_plan(mask, kBwdTile);
  BackwardLists l;
  l.mask = &mask;
  l.derived = tiles.derived;
  BwdPlanView& s = l.scalars;
  s.num_heads = mask.num_heads();
  s.num_q_tiles = ceil_div(mask.q_len(), kBwdTileSide);
  s.num_k_tiles = ceil_div(mask.k_len(), kBwdTileSide);
  if (l.derived) {
    s.num_q_blocks = s.num_q_tiles;
    s.num_k_blocks = s.num_k_tiles;
    s.q_tiles_per_block = s.k_tiles_per_block = 1;
    s.sub_row_shift = tiles.sub.row_shift;
    s.sub_col_shift = tiles.sub.col_shift;
    s.sub_cols = tiles.sub.cols;
  } else {
    s.num_q_blocks = mask.num_q_blocks();
    s.num_k_blocks = mask.num_k_blocks();
    s.q_tiles_per_block = mask.block_q() / kBwdTileSide;
    s.k_tiles_per_block = mask.block_k() / kBwdTileSide;
  }
  const BlockMaskView w = walked_lists(l);
  l.columns = key_major_plan(w);

  // Each tile's work: the tiles it meets over all mask heads.
  std::vector<int64_t> q_work(static_cast<size_t>(s.num_q_tiles), 0), k_work(static_cast<size_t>(s.num_k_tiles), 0);
  for (int64_t mh = 0; mh < w.num_heads; ++mh)
    for (int64_t qb = 0; qb < w.num_q_blocks; ++qb) {
      const int64_t q_first = qb * s.q_tiles_per_block;
      const int64_t q_count = std::min(s.q_tiles_per_block, s.num_q_tiles - q_first);
      const int64_t r = w.row(mh, qb);
      for (int64_t at = w.row_begin(r); at < w.row_end(r); ++at) {
        const int64_t k_first = w.kv_indices[at] * s.k_tiles_per_block;
        const int64_t k_count = std::min(s.k_tiles_per_block, s.num_k_tiles - k_first);
        for (int64_t t = q_first; t < q_first + q_count; ++t) q_work[static_cast<size_t>(t)] += k_count;
        for (int64_t t = k_first; t < k_first + k_count; ++t) k_work[static_cast<size_t>(t)] += q_count;
      }
    }
  l.q_tile_order = by_descending_work(q_work);
  l.k_tile_order = by_descending_work(k_work);
  return l;
}

BackwardPlan::BackwardPlan() = default;
BackwardPlan::~BackwardPlan() = default;
BackwardPlan::BackwardPlan(BackwardPlan&&) noexcept = default;
BackwardPlan& BackwardPlan::operator=(BackwardPlan&&) noexcept = default;

BackwardPlan make_backward_plan(const BlockMask& mask, cudaStream_t stream) {
  const BackwardLists lists = make_backward_lists(mask);
  const BwdPlanView host = lists.host_view();
  const BwdPlanView& s = lists.scalars;
  const int64_t rows = s.num_heads * s.num_q_blocks;
  const int64_t entries = host.row_offsets[rows];
  BackwardPlan plan;
  BwdPlanView& v = plan.view_;
  v = s;
  std::vector<DevicePtr>& owned = plan.arrays_;
  v.row_offsets = upload(owned, host.row_offsets, rows + 1, "cudaMalloc/copy of the backward plan's rows", stream);
  v.kv_indices = upload(owned, host.kv_indices, entries, "cudaMalloc/copy of the backward plan's key blocks", stream);
  v.kv_full = upload(owned, host.kv_full, entries, "cudaMalloc/copy of the backward plan's full flags", stream);
  v.col_offsets = upload(owned, lists.columns.col_offsets, "cudaMalloc/copy of the backward plan's columns", stream);
  v.q_indices = upload(owned, lists.columns.q_indices, "cudaMalloc/copy of the backward plan's query blocks", stream);
  v.q_full = upload(owned, lists.columns.q_full, "cudaMalloc/copy of the backward plan's column flags", stream);
  if (lists.derived) {
    v.q_forward = upload(owned, lists.columns.forward_position, "cudaMalloc/copy of the backward plan's positions", stream);
    v.sub_present = upload(owned, lists.derived->sub_present, "cudaMalloc/copy of the backward plan's sub-blocks", stream);
    v.sub_full = upload(owned, lists.derived->sub_full, "cudaMalloc/copy of the backward plan's full sub-blocks", stream);
  }
  v.q_tile_order = upload(owned, lists.q_tile_order, "cudaMalloc/copy of the backward plan's query tile order", stream);
  v.k_tile_order = upload(owned, lists.k_tile_order, "cudaMalloc/copy of the backward plan's key tile order", stream);
  if (host.exprs != nullptr) {
    plan.exprs_ = std::make_unique<DeviceExprs>(*mask.pattern(), stream);
    v.exprs = plan.exprs_->exprs();
    v.num_exprs = plan.exprs_->num_exprs();
  }
  check_cuda(cudaStreamSynchronize(stream), "waiting for the backward plan's copies");
  return plan;
}

}  // namespace spattn::cuda_detail
